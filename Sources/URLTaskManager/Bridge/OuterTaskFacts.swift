import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// How the outer session wants a task's body handed over.
enum BodyDelivery: Sendable, Equatable {
    /// The task reports each chunk to a delegate: forward chunks as they arrive.
    case stream
    /// The task has a completion handler (or is `async data(for:)`): corelibs keeps only the
    /// LAST `didLoad` chunk for those, so the whole body must arrive in one call.
    case buffer
}

/// What the bridge learns about the outer task it is loading.
struct OuterTaskFacts: Sendable {
    var delivery: BodyDelivery
    /// The serial queue the outer session uses for this task. Every `URLProtocolClient` call is
    /// made on it: corelibs reads its task registry from the client callbacks without a lock,
    /// and a call from another thread races with the session adding or removing tasks.
    var workQueue: DispatchQueue?
    /// The request body as the outer session holds it.
    var body: URLTaskBody
    /// `true` when the body should have been found but was not (an upload task whose body the
    /// toolchain hides): the task must fail rather than go out empty.
    var bodyMissing: Bool
    /// An upload task made with `uploadTask(withStreamedRequest:)`: like corelibs, the bridge
    /// asks the session delegate for the body (``Platform/requestBodyStream(for:completion:)``).
    var bodyFromDelegate = false
    /// A download task: corelibs cannot complete one through a custom protocol (it reads a
    /// temporary file URL only its own protocol can set), so it is handed to the native one.
    var isDownload: Bool
    /// The pipeline of the session that created the task, and only that one (its protocol
    /// class's number says which): `nil` if the session is gone from under it (it cannot be while
    /// the task lives).
    var pipeline: Pipeline?
    /// The session that created the task, where the bridge itself asks the caller's delegate
    /// about redirects and authentication challenges (corelibs cannot take either from a
    /// custom protocol); `nil` where the platform does that itself.
    var session: URLSession?
    /// The delegate given to one of the async APIs (`data(for:delegate:)`, `upload(for:from:delegate:)`,
    /// ...): corelibs keeps it in its task registry and has only its own protocol stream the body
    /// and report upload progress to it, so the bridge does. `nil` on other platforms.
    var taskDelegate: (any URLSessionTaskDelegate)?
    /// Who is told of upload progress (`didSendBodyData`): the task's own delegate, or the
    /// session's delegate for a delegate-driven task, as corelibs' own protocol does. `nil` where
    /// the platform reports it itself.
    var uploadProgressDelegate: (any URLSessionTaskDelegate)?
    /// The task's `delegate` (its own, or the session's), read once in `startLoading`, on the work
    /// queue: the bridge asks it about redirects and challenges later, from its own threads, where
    /// reading `task.delegate` would race with corelibs setting the session's delegate to `nil`
    /// on the delegate queue when the session is invalidated. `nil` where the platform asks it.
    var callerDelegate: (any URLSessionTaskDelegate)?
}
