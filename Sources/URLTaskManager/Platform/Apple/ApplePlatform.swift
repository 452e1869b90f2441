#if !canImport(FoundationNetworking)
import Dispatch
import Foundation

/// Apple's Foundation: a custom `URLProtocol` gets every chunk appended for every task kind, may
/// call its client from any thread, and the session answers challenges, moves progress and
/// reports invalidation itself. What is left is ownership: `URLSession` cannot be subclassed
/// there (its initializer is a factory method), so the session owns the pipeline through an
/// associated object (``PipelineOwner``).
///
/// This file cannot be compiled on the Linux machine the library is developed on; the macOS
/// jobs of the CI workflow compile and test it. Keep it this small.
enum ApplePlatform: PlatformSupport {
    static func facts(for task: URLSessionTask, request: URLRequest, bridge: BridgeURLProtocol.Type) -> OuterTaskFacts {
        let body = URLTaskBody(request: request)
        let missing = task is URLSessionUploadTask && body.isNone
        var facts = OuterTaskFacts(
            delivery: .stream, workQueue: nil, body: body, bodyMissing: missing, isDownload: task is URLSessionDownloadTask)
        facts.pipeline = bridge.sessionNumber.flatMap { BridgeRegistry.shared.pipeline(for: $0) }
        return facts
    }

    /// A plain `URLSession` cannot tell the pipeline: the manager's methods do.
    static let sessionReportsInvalidation = false

    /// URLSession counts what a protocol delivers.
    static let bridgeMovesProgress = false

    /// Neither what ``WholeTransfer`` relies on is read in Apple's source, and the delegate
    /// queue's cost it avoids is corelibs': the methods stream here.
    static let sendsWholeTransfers = false

    /// The task keeps the delegate its async API was given (and is asked before the session's).
    static func asyncAPIDelegate(of task: URLSessionTask, in session: URLSession) -> (any URLSessionTaskDelegate)? {
        task.delegate
    }

    /// Creates the session a manager hands out: a plain `URLSession` with a protocol class of
    /// its own in front (``BridgeClasses``), owning `pipeline` through an associated object.
    static func makeSession(
        configuration: URLSessionConfiguration, delegate: (any URLSessionDelegate)?, delegateQueue: OperationQueue?, pipeline: Pipeline
    ) -> URLSession {
        let number = BridgeRegistry.shared.register(pipeline)
        configuration.protocolClasses = [BridgeClasses.protocolClass(for: number)] + (configuration.protocolClasses ?? [])
        let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue)
        PipelineOwner.attach(PipelineOwner(pipeline: pipeline, number: number), to: session)
        return session
    }

    /// The transport's callbacks keep their own serial delegate queue.
    static func runCallbacksOnWorkQueue(of session: URLSession, delegateQueue: OperationQueue) -> Bool { false }

    /// `getAllTasks` is thread-safe here, and answers after the tasks resumed before it started.
    static func afterTasksResumedSoFar(of session: URLSession, _ body: @escaping @Sendable () -> Void) {
        session.getAllTasks { _ in body() }
    }

    static var isOnSessionWorkQueue: Bool { false }

    static func cancel(innerTask task: URLSessionTask) {
        task.cancel()
    }

    /// `getAllTasks` is thread-safe here, and the task keeps its async API's delegate.
    static func asyncAPITask(
        withDelegate delegate: any URLSessionTaskDelegate, in session: URLSession, _ found: @escaping @Sendable (AsyncAPITaskLookup) -> Void
    ) {
        session.getAllTasks { tasks in found(tasks.first { $0.delegate === delegate }.map(AsyncAPITaskLookup.found) ?? .none) }
    }

    /// The inner session's default handling completes a 401 with no credential as a response.
    static func handsChallengeToCaller(_ challenge: URLAuthenticationChallenge) -> Bool { false }

    /// Apple's loader adds stored cookies to a request that handles cookies; how it combines them
    /// with a `Cookie` the request sets itself is not documented, so such a request is never
    /// shared.
    static func cookieHeaderOnTheWire(own: String?, stored: String?, request: URLRequest) -> WireCookie {
        guard request.httpShouldHandleCookies, let stored else { return .known(own) }
        return own == nil ? .known(stored) : .unknown
    }

    /// The loader adds cookies below the task, after it is made.
    static func cookieHeaderSent(by task: URLSessionTask) -> SentCookie { .notVisible }

    /// The request's `timeoutInterval`, an idle time, as Apple documents it.
    static func idleTimeout(of request: URLRequest, sessionDefault: TimeInterval) -> Duration? {
        let seconds = request.timeoutInterval
        guard seconds > 0, seconds.isFinite else { return nil }
        return Duration(clampingSeconds: min(seconds, SharedTransfers.innerTimeout))
    }

    /// As the loader words it: description and failing URL.
    static func idleTimeoutError(url: URL?) -> URLError { URLError.timedOut(url: url) }

    static func storedSpelling(ofHeader name: String) -> String { name }

    static func replaceHeader(_ name: HeaderName, with value: String, in request: inout URLRequest) {
        request.setValue(value, forHTTPHeaderField: name.spelled)
    }

    static func replaceHeaders(_ headers: [(name: HeaderName, value: String)], in request: inout URLRequest) {
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name.spelled) }
    }

    static func headerValue(_ name: HeaderName, in request: URLRequest) -> String? {
        request.value(forHTTPHeaderField: name.spelled)
    }

    static func headerValues(_ first: HeaderName, _ second: HeaderName, in request: URLRequest) -> (String?, String?) {
        (request.value(forHTTPHeaderField: first.spelled), request.value(forHTTPHeaderField: second.spelled))
    }
}
#endif
