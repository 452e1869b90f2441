/// An interceptor that can usually decide without suspending, so the manager runs it right where
/// the task is instead of starting a Swift task for it.
///
/// Why it exists: the manager calls ``URLTaskInterceptor/intercept(_:context:)`` in a Swift task
/// of its own (an `async` method cannot be called from the threads the pipeline runs on without
/// one), once per interceptor per send. For an interceptor that only sets a header from memory
/// that task costs more than the header: starting it enqueues a job on the cooperative pool and
/// wakes a thread to run it, which adds instructions and a thread hand-off to every request, for
/// every such interceptor (measured: <doc:Performance>, "The synchronous path").
/// ``HeaderInterceptor`` with fixed values, `BearerInterceptor` while its token is fresh and
/// `CoalescingInterceptor` take this path.
///
/// The manager first calls ``interceptWithoutSuspending(_:context:)``. Returning a command ends
/// this interceptor's turn, exactly as if `intercept` had returned it; throwing fails the task
/// as `intercept` throwing does. Returning `nil` means "not this time": the manager then calls
/// the async ``URLTaskInterceptor/intercept(_:context:)`` in a Swift task, as for any
/// interceptor, with the task as it was before (a change made to it before returning `nil` is
/// dropped). So the async method must still do the whole work on its own: it is also what
/// ``URLTaskManager/download(for:)``'s check calls. A ``PerRequestInterceptor`` wrapping one
/// forwards both methods to it.
///
/// ```swift
/// /// The API key, from memory once loaded; loading it may suspend.
/// struct APIKeyHeader: SynchronousInterceptor {
///     let keys: APIKeys
///
///     func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand? {
///         guard let key = keys.loaded else { return nil }  // not loaded yet: the async path
///         task.request.setValue(key, forHTTPHeaderField: "X-API-Key")
///         return .execute
///     }
///
///     func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
///         task.request.setValue(try await keys.load(), forHTTPHeaderField: "X-API-Key")
///         return .execute
///     }
/// }
/// ```
///
/// Where it runs: on whatever thread moved the task to this interceptor, never the caller's,
/// and in no Swift task started for it (it may be inside another part's, a reactor's that just
/// ended, say). That is a Dispatch thread for a new task, the thread that
/// released a batch, ended a reactor's run or fired a retry's timer, and on Linux
/// (swift-corelibs-foundation) also URLSession's own work queue, when a transport callback
/// moves the task on (a redirect followed, a requeue): one serial queue that every session of
/// the process shares. So the method must return quickly and must never block: no lock held
/// for long, no semaphore, no `DispatchQueue.sync`, no file or network I/O, and no call that
/// creates, resumes or cancels a `URLSessionTask` or waits for one (those `sync` onto that
/// very queue and deadlock). Anything that may wait belongs in the async path: return `nil`.
///
/// An interceptor whose ``URLTaskInterceptor/interceptsOneAtATime`` is `true` never takes this
/// path: the manager then runs `intercept` behind the interceptor's serial gate, one task at a
/// time, and ``interceptWithoutSuspending(_:context:)`` is not called at all.
public protocol SynchronousInterceptor: URLTaskInterceptor {
    /// Decides for `task` without suspending, or returns `nil` (changes to `task` are then
    /// dropped) to have the manager call ``URLTaskInterceptor/intercept(_:context:)`` instead.
    func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand?
}
