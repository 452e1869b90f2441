#if canImport(FoundationNetworking)
import Dispatch
import Foundation
import FoundationNetworking

/// swift-corelibs-foundation (Linux, Windows): what a custom `URLProtocol` cannot do there, and
/// how the bridge does it instead.
///
/// corelibs hides several things a custom protocol needs behind internal API. The bridge learns
/// what it can from its own session (``ManagedURLSession`` overrides the open task factories and
/// records what each task was asked for), and reads corelibs' private state only where nothing
/// else says it: the session's work queue and libcurl queue, its task registry for the async
/// APIs' per-task delegate, and an async upload's body. Each read checks names and layout
/// before any cast (``Reflection``, ``EnumShape``) and has a fallback that is taken when it finds
/// nothing (a toolchain whose internals changed): a body is buffered instead of streamed, a task
/// fails with a typed error instead of sending an empty body, a barrier takes corelibs' own
/// `getAllTasks`. `PlatformPinTests`, `CorelibsChangePinTests` and `CorelibsReadFallbackTests` pin
/// each fact and force each fallback.
///
/// The workarounds, each with what it answers:
/// - Completion-handler and async tasks keep only the last `didLoad` chunk
///   (`URLSession.swift` ~849, upstream #3367): ``facts(for:request:bridge:)`` says which tasks
///   stream and which must get their body in one piece.
/// - A protocol cannot see its task's session, nor an async API's delegate, nor an async
///   upload's body: the session's protocol class of its own (``BridgeClasses``), the factory
///   records, and the reads above.
/// - Every session's work queue targets one serial queue, and creating, resuming or cancelling
///   a task `sync`s onto it: ``runCallbacksOnWorkQueue(of:delegateQueue:)``,
///   ``isOnSessionWorkQueue``, ``cancel(innerTask:)``.
/// - `getAllTasks` reads the task registry off its queue (URLSession.swift:408-414):
///   ``afterTasksResumedSoFar(of:_:)`` hops through the work queue instead.
/// - A 401 with `WWW-Authenticate: Basic` is raised as a challenge after the body, and with no
///   credential hangs on 6.3.1 (completes from 6.3.2, #5457): ``handsChallengeToCaller(_:)``.
/// - `setValue(_:forHTTPHeaderField:)` and `value(forHTTPHeaderField:)` capitalize and compare
///   with Foundation's locale-aware string functions on every call: the header functions
///   (CorelibsPlatform+Headers.swift).
/// - Only corelibs' own protocol moves a task's `progress`: ``bridgeMovesProgress``.
enum CorelibsPlatform: PlatformSupport {
    /// Inspects `task` from inside `startLoading`, which runs on the session's work queue (the
    /// only place the session's task registry may be read).
    static func facts(for task: URLSessionTask, request: URLRequest, bridge: BridgeURLProtocol.Type) -> OuterTaskFacts {
        facts(for: task, request: request, bridge: bridge, plainSession: nil)
    }

    /// ``facts(for:request:bridge:)``, for a task of `plainSession` too.
    /// - Parameters:
    ///   - bridge: The protocol class loading the task: a manager's session has one of its own,
    ///     whose number says which session and pipeline the task belongs to.
    ///   - plainSession: The task's session where no number says it (the pin tests' own protocol on
    ///     a plain session); the bridge never reads it from the task.
    static func facts(
        for task: URLSessionTask, request: URLRequest, bridge: BridgeURLProtocol.Type = BridgeURLProtocol.self,
        plainSession: URLSession?
    ) -> OuterTaskFacts {
        let isDownload = task is URLSessionDownloadTask
        let registered = bridge.sessionNumber.map { BridgeRegistry.shared.entry(for: $0) }
        let managed = registered?.session as? ManagedURLSession
        let session = managed ?? plainSession
        // A manager's session found its work queue and task registry once, when it was made.
        let workQueue = managed?.foundWorkQueue ?? Reflection.child(task, "workQueue") as? DispatchQueue
        var body = URLTaskBody(request: request)
        var missing = false
        var fromDelegate = false
        let delivery: BodyDelivery
        let taskDelegate: (any URLSessionTaskDelegate)?
        if let record = managed?.factoryRecords.record(for: task) {
            // Made by one of the session's open factories, which recorded how it reports and the
            // upload body it was given: nothing of corelibs' is read.
            delivery = record.delivery
            taskDelegate = nil
            if let uploadBody = record.uploadBody { body = uploadBody }
            fromDelegate = record.bodyFromDelegate
        } else {
            // Made by an async API (`data(for:delegate:)`, `upload(for:from:)`, ...), which corelibs
            // creates through an internal factory: it reports to a completion handler, so its body
            // is buffered. Only corelibs' task registry holds the delegate the API was given, and
            // only the task holds an upload's body. (A manager's session that found no registry
            // when it was made will not find one later: the task delegate is then not called.)
            let registry = managed.map(\.registryReader) ?? session.flatMap { TaskRegistryReader(session: $0) }
            let behaviour = registry.flatMap { $0.behaviour(for: task.taskIdentifier) }
            // A plain session's task (the pin tests) may be delegate-driven: the registry says.
            delivery = managed == nil ? behaviour?.delivery ?? .buffer : .buffer
            taskDelegate = behaviour?.taskDelegate
            if case .none = body, task is URLSessionUploadTask {
                if let field = Reflection.child(task, managed?.uploadBodyField ?? "knownBody") {
                    if let known = Reflection.unwrapOptional(field) {
                        body = uploadBody(fromKnownBody: known)
                    } else {
                        // `knownBody` is nil only for `uploadTask(withStreamedRequest:)`.
                        fromDelegate = true
                    }
                }
            }
        }
        if task is URLSessionUploadTask { missing = !fromDelegate && body.isNone }
        return OuterTaskFacts(
            delivery: delivery, workQueue: workQueue, body: body, bodyMissing: missing, bodyFromDelegate: fromDelegate,
            isDownload: isDownload, pipeline: registered?.pipeline, session: managed, taskDelegate: taskDelegate,
            uploadProgressDelegate: taskDelegate ?? (delivery == .stream ? task.delegate : nil),
            callerDelegate: managed == nil ? nil : task.delegate)
    }

    /// The session is a ``ManagedURLSession``, which tells the pipeline of its invalidation.
    static let sessionReportsInvalidation = true

    /// corelibs moves a task's `progress` only for its own protocol.
    static let bridgeMovesProgress = true

    /// corelibs asks the session's delegate about an async task's redirects and challenges
    /// (``asyncAPIDelegate(of:in:)``), and a refused challenge ends the async call `cancelled`
    /// (`URLSessionTask.swift`, 6.3.1).
    static let sendsWholeTransfers = true

    /// corelibs keeps the delegate given to `data(for:delegate:)` in the task registry alone (the
    /// task's `delegate` falls back to the session's), and asks `task.delegate` about the task's
    /// redirect (`HTTPURLProtocol.redirectFor`) and challenge: the session's delegate, then.
    /// The registry is read on the session's work queue, where the transport's callbacks run;
    /// from anywhere else, on that queue.
    static func asyncAPIDelegate(of task: URLSessionTask, in session: URLSession) -> (any URLSessionTaskDelegate)? {
        let read = {
            TaskRegistryReader(session: session)?.behaviour(for: task.taskIdentifier)?.taskDelegate
        }
        if isOnSessionWorkQueue { return read() }
        return workQueue(of: session)?.sync(execute: read)
    }

    /// Creates the session a manager hands out, owning `pipeline` for as long as it lives: a
    /// ``ManagedURLSession``, whose invalidation ends the pipeline.
    ///
    /// Every session gets a protocol class of its own whose number is never reused
    /// (``BridgeClasses``): a `URLProtocol` cannot see its task's session (corelibs keeps it in an
    /// internal field), so the class says which session and pipeline a task belongs to, and a
    /// task can only ever run through the pipeline of the session that created it.
    static func makeSession(
        configuration: URLSessionConfiguration, delegate: (any URLSessionDelegate)?, delegateQueue: OperationQueue?, pipeline: Pipeline
    ) -> URLSession {
        let number = BridgeRegistry.shared.register(pipeline)
        configuration.protocolClasses = [BridgeClasses.protocolClass(for: number)] + (configuration.protocolClasses ?? [])
        let session = ManagedURLSession(
            configuration: configuration, delegate: delegate, delegateQueue: delegateQueue, pipeline: pipeline, number: number)
        BridgeRegistry.shared.attach(session, to: number)
        return session
    }

    /// Runs the transport's delegate callbacks on the queue where the inner session's libcurl
    /// reads (its multi handle's queue, which targets the session's work queue) instead of a
    /// thread of their own, and marks the work queue so ``isOnSessionWorkQueue`` can see it.
    ///
    /// On corelibs every session's work queue targets one shared serial queue, so a callback
    /// running there is serialized with the outer session's work queue too: the bridge may then
    /// answer the outer task's client at once, where it would otherwise wake the delegate
    /// queue's thread and then the work queue's again (two thread hops per event, most of the
    /// bridge's cost). The price is the rule of that queue: nothing run from a transport
    /// callback may create, resume or cancel a task, or answer a challenge, there (each `sync`s
    /// onto it): ``isOnSessionWorkQueue`` says when to move such a call elsewhere.
    ///
    /// Why the multi handle's queue and not the work queue itself: while a socket stays
    /// readable (a fast server on loopback), libdispatch keeps draining that queue, reading the
    /// whole body, before anything else queued on the work queue runs. Callbacks queued on the
    /// work queue then waited behind the entire body, which stayed in memory meanwhile (see the
    /// Performance article, "Streaming memory through the session"), and so did a `suspend()`
    /// meant to pause the transfer. Queued on the same queue as the reads,
    /// each chunk's callback runs right after the read that produced it.
    ///
    /// Must be called before the queue has any operation. Returns `false` (and changes nothing)
    /// where the work queue cannot be found; falls back to the work queue where the multi
    /// handle's queue cannot be.
    @discardableResult
    static func runCallbacksOnWorkQueue(of session: URLSession, delegateQueue: OperationQueue) -> Bool {
        guard let workQueue = workQueue(of: session) else { return false }
        workQueue.setSpecific(key: sessionWorkQueueKey, value: true)
        delegateQueue.underlyingQueue = libcurlQueue(of: session) ?? workQueue
        return true
    }

    /// Runs `body` (on a thread of the pipeline's) once `session` has started every task resumed
    /// before this call: its `startLoading` has run, so the task has reached the pipeline.
    ///
    /// corelibs queues `startLoading` on the task's work queue, which targets the session's, when
    /// the task is resumed: a block queued on the session's work queue after that runs after it.
    /// The block reads nothing; it only hops. corelibs' own barrier, `getAllTasks`, reads the
    /// session's task registry on the delegate queue while the work queue adds and removes tasks
    /// (URLSession.swift:408-414, 6.3.1 to `main`): a SIGILL seen in CI. It is used only where the
    /// work queue cannot be found (a toolchain whose internals changed) and on Apple platforms,
    /// whose `getAllTasks` is thread-safe.
    static func afterTasksResumedSoFar(of session: URLSession, _ body: @escaping @Sendable () -> Void) {
        let found = (session as? ManagedURLSession).map(\.foundWorkQueue) ?? workQueue(of: session)
        guard let workQueue = found else {
            session.getAllTasks { _ in body() }
            return
        }
        // Off the work queue at once: every session's work queue is one serial queue.
        workQueue.async { DispatchQueue.global().async(execute: body) }
    }

    /// Whether the current code runs on a transport's work queue (see
    /// ``runCallbacksOnWorkQueue(of:delegateQueue:)``): then a `URLProtocolClient` may be called
    /// right here, and a task must not be created, resumed or cancelled here.
    static var isOnSessionWorkQueue: Bool {
        DispatchQueue.getSpecific(key: sessionWorkQueueKey) ?? false
    }

    private static let sessionWorkQueueKey = DispatchSpecificKey<Bool>()

    /// corelibs' name of a session's work queue field (`workQueue`). Tests rename it, before the
    /// sessions they make, to force the fallbacks (`CorelibsReadFallbackTests`); nothing else
    /// writes it.
    nonisolated(unsafe) static var workQueueField = "workQueue"

    /// `session`'s work queue, which every task of it runs on; `nil` if the field is not found.
    static func workQueue(of session: URLSession) -> DispatchQueue? {
        Reflection.child(session, workQueueField) as? DispatchQueue
    }

    /// The queue of `session`'s libcurl multi handle (`multiHandle.queue`), where it reads
    /// and writes its sockets; it targets the session's work queue.
    static func libcurlQueue(of session: URLSession) -> DispatchQueue? {
        Reflection.child(session, "multiHandle").flatMap { Reflection.child($0, "queue") } as? DispatchQueue
    }

    /// Cancels an inner task (a caller cancelled its own request) from a thread of its own:
    /// `cancel()` `sync`s onto the work queue on 6.3, where the transport's callbacks may be
    /// running. From 6.4 (corelibs #5417) it only queues a block there and the hop is merely
    /// unneeded; nothing here waits for the cancellation to take effect, which is reported, as
    /// on 6.3, by `didCompleteWithError` (`testCorelibs5417_CancelReturnsBeforeTheTaskIsCanceling`).
    ///
    /// corelibs' `cancel()` racing with the transfer's own end can report that end twice (a
    /// `fatalError` in `URLSession.behaviour(for:)`), for plain sessions too. Neither cancelling
    /// on the delegate queue nor waiting for the task's work queue after the cancel made that
    /// race go away when dozens of transfers were cancelled at once (2 to 6 crashes in 40
    /// stress runs); that is why a session's invalidation abandons its transfers instead of
    /// cancelling them (see `Pipeline`). One caller's cancel is as exposed as with a plain session.
    /// One sequence that does it is known: the inner session has the caller's `URLCache`, so a
    /// task's protocol is made after a cache lookup on a background thread, which queues the
    /// task's start and then the block of a `cancel()` that came during the lookup; a transfer
    /// that ends in between is completed by both (`CancelDuringCacheLookupStressTests`, LinuxNotes).
    static func cancel(innerTask task: URLSessionTask) {
        DispatchQueue.global().async { task.cancel() }
    }

    /// Reads the session's task registry (`tasks`, beside the behaviours ``asyncAPIDelegate(of:in:)``
    /// reads) on its work queue, the only place it may be read, and answers off it.
    static func asyncAPITask(
        withDelegate delegate: any URLSessionTaskDelegate, in session: URLSession, _ found: @escaping @Sendable (AsyncAPITaskLookup) -> Void
    ) {
        guard let workQueue = (session as? ManagedURLSession).map(\.foundWorkQueue) ?? workQueue(of: session) else {
            return DispatchQueue.global().async { found(.unreadable) }
        }
        workQueue.async {
            let lookup: AsyncAPITaskLookup
            if let tasks = Reflection.child(session, "taskRegistry").flatMap({ Reflection.child($0, "tasks") }) as? [Int: URLSessionTask] {
                // A task whose end was already handed over is no longer running: not cancelled.
                lookup =
                    tasks.values.first { $0.state == .running && asyncAPIDelegate(of: $0, in: session) === delegate }
                    .map(AsyncAPITaskLookup.found) ?? .none
            } else {
                lookup = .unreadable
            }
            DispatchQueue.global().async { found(lookup) }
        }
    }

    /// corelibs raises an HTTP authentication challenge (a 401 with `WWW-Authenticate: Basic`)
    /// only after the response and its body were delivered. The challenge belongs to the
    /// caller's session, which gets the 401 like any response and then asks the caller's
    /// delegate or credential storage exactly as a plain session does. The inner session must
    /// not answer it: with a credential in the storage it shares with the caller's configuration
    /// it would resend the request itself, unseen by the interceptors and the caller's delegate;
    /// without one, what it does depends on the toolchain (6.3.1 never completes the task; from
    /// 6.3.2, corelibs #5457, it completes with the 401). So the inner task's challenge is
    /// refused, whatever the toolchain, and its end reported as the normal end of the 401
    /// response (`testCorelibs5457_A401WithoutCredentialCompletes` pins what a plain session does).
    static func handsChallengeToCaller(_ challenge: URLAuthenticationChallenge) -> Bool {
        (challenge.failureResponse as? HTTPURLResponse)?.statusCode == 401
    }

    /// corelibs replaces a request's own `Cookie` with the stored cookies for its URL, whenever
    /// there are any and the configuration's `httpShouldSetCookies` is on, whatever the request's
    /// `httpShouldHandleCookies` says (`URLSession._Configuration.setCookies(on:)`, called from
    /// `createConfiguredRequest(from:)` as a task is made; pinned by
    /// `PlatformPinTests.testStoredCookiesReplaceARequestsOwnCookie`).
    static func cookieHeaderOnTheWire(own: String?, stored: String?, request: URLRequest) -> WireCookie {
        .known(stored ?? own)
    }

    /// corelibs puts the cookies on the request as it makes the task: its `originalRequest` shows
    /// what goes out.
    static func cookieHeaderSent(by task: URLSessionTask) -> SentCookie {
        .sent(task.originalRequest?.value(forHTTPHeaderField: "Cookie"))
    }

    /// corelibs' HTTP protocol arms a timer of `Int(timeoutInterval) * 1000` ms, made again on
    /// every callback of libcurl (header, data), so a timeout is an idle time in whole seconds
    /// (below one second it fires at once). The request's own value counts only if it was set on
    /// the `URLRequest` (its internal `isTimeoutIntervalSet`, which `URLRequest(url:timeoutInterval:)`
    /// does not set); otherwise the session's `timeoutIntervalForRequest`
    /// (`_HTTPURLProtocol.configureEasyHandle(for:body:)`). Where corelibs would trap (NaN,
    /// infinity) there is no timeout.
    static func idleTimeout(of request: URLRequest, sessionDefault: TimeInterval) -> Duration? {
        let isSet = Reflection.storedBool("isTimeoutIntervalSet", of: request) ?? true
        let seconds = (isSet ? request.timeoutInterval : sessionDefault).rounded(.towardZero)
        guard seconds.isFinite else { return nil }
        return .seconds(Int64(max(0, min(seconds, SharedTransfers.innerTimeout))))
    }

    /// corelibs' own timeout error carries no user info at all (`configureEasyHandle`'s handler).
    static func idleTimeoutError(url: URL?) -> URLError {
        URLError(_nsError: NSError(domain: NSURLErrorDomain, code: NSURLErrorTimedOut, userInfo: nil))
    }

    /// Maps corelibs' internal `URLSessionTask._Body` (`none`, `data(DispatchData)`,
    /// `file(URL)`, `stream(InputStream)`).
    private static func uploadBody(fromKnownBody known: Any) -> URLTaskBody {
        let mirror = Mirror(reflecting: known)
        guard let payload = mirror.children.first else { return .none }
        switch payload.label {
        case "data":
            if let data = payload.value as? DispatchData { return .data(Data(data)) }
            if let data = payload.value as? Data { return .data(data) }
        case "file":
            if let url = payload.value as? URL { return .file(url) }
        case "stream":
            if let stream = payload.value as? InputStream { return .stream(stream) }
        default:
            break
        }
        return .none
    }
}
#endif
