import Foundation

/// Every way URLTaskManager itself can fail a task, as the caller receives it.
///
/// A task made through ``URLTaskManager/session`` completes exactly once: with a response, with
/// the transport's own `URLError` (exactly as a plain `URLSession` would report it), with
/// `URLError.cancelled` when its caller cancels it, or with one of these. Each case names the
/// component that failed (by type name) and carries the underlying error, so an app can map
/// it to its own error type in one `switch`:
///
/// ```swift
/// do {
///     let (data, _) = try await manager.session.data(from: url)
/// } catch URLTaskError.reactorFailed(_, let underlying) {
///     showLogin(because: underlying)
/// }
/// ```
public enum URLTaskError: Error, Sendable {
    /// An interceptor threw, or returned ``InterceptCommand/fail(_:)``.
    case interceptorFailed(interceptor: String, underlying: any Error)
    /// A header value contained CR or LF, or a header name was not an HTTP token. Sending it
    /// would let one request smuggle another, so the task fails instead.
    case invalidHeader(name: String, reason: String)
    /// The task was held in a batch longer than ``URLTaskManager/Options/maximumHoldTime``.
    case holdTimedOut(interceptor: String, after: Duration)
    /// The shared work of a reactor (a token refresh) threw; every task waiting on that run
    /// receives this same error.
    case reactorFailed(reactor: String, underlying: any Error)
    /// A reactor's work ran longer than its configured timeout.
    case reactorTimedOut(reactor: String, after: Duration)
    /// The task triggered reactions more times than its reactor allows.
    case tooManyAttempts(reactor: String, attempts: Int)
    /// A reactor ran more often than its loop guard allows within a time window (a refresh
    /// that succeeds but whose token the server keeps rejecting).
    case reactionLoop(reactor: String, runs: Int, window: Duration)
    /// The task must be sent again but its body cannot be: a stream body larger than the
    /// replay limit, or a stream that failed while being read.
    case bodyNotReplayable(reason: String)
    /// An upload task whose body the platform does not expose to a `URLProtocol`. The task
    /// fails rather than send an empty body.
    case uploadBodyUnavailable
    /// The task reached a session that was already invalidated: on Linux, a task created
    /// before `finishTasksAndInvalidate()` but resumed only after every other task had ended,
    /// or a ``URLTaskManager/download(for:)`` started after the session was invalidated. A plain
    /// session would refuse such a task too.
    case managerInvalidated
    /// A download task made with the session's own download APIs (`download(from:)`,
    /// `downloadTask(with:)`) whose request an interceptor would change, hold, fail or answer.
    /// On Linux such a task cannot pass through the interceptors (corelibs completes a download
    /// only from its own protocol), and sending it without them (no token, no API key) would
    /// fail quietly; so it fails before anything is sent. Use ``URLTaskManager/download(for:)``,
    /// which runs the whole pipeline.
    case downloadNeedsPipeline(interceptor: String, reason: String)
}

extension URLTaskError: CustomStringConvertible, LocalizedError {
    public var description: String {
        switch self {
        case .interceptorFailed(let interceptor, let underlying):
            "Interceptor \(interceptor) failed the task: \(underlying)"
        case .invalidHeader(let name, let reason):
            "Header \"\(name)\" refused: \(reason)"
        case .holdTimedOut(let interceptor, let after):
            "Held by \(interceptor) for longer than \(after)"
        case .reactorFailed(let reactor, let underlying):
            "Reactor \(reactor) failed: \(underlying)"
        case .reactorTimedOut(let reactor, let after):
            "Reactor \(reactor) did not finish within \(after)"
        case .tooManyAttempts(let reactor, let attempts):
            "Reactor \(reactor) reacted to this task \(attempts) times; giving up"
        case .reactionLoop(let reactor, let runs, let window):
            "Reactor \(reactor) ran \(runs) times within \(window); refusing to run again"
        case .bodyNotReplayable(let reason):
            "The request body cannot be sent again: \(reason)"
        case .uploadBodyUnavailable:
            "The upload body is not visible to URLTaskManager on this platform; the task was not sent"
        case .managerInvalidated:
            "The URLTaskManager's session was invalidated before the task was sent"
        case .downloadNeedsPipeline(let interceptor, let reason):
            "Interceptor \(interceptor) would not let this download go out as it is (\(reason)), and on Linux a download task "
                + "made with URLSession's download APIs cannot pass through the interceptors: use manager.download(for:) instead; "
                + "nothing was sent"
        }
    }

    public var errorDescription: String? { description }
}
