// The one room where URLTaskManager forks by platform.
//
// Everything the library does differently on swift-corelibs-foundation (Linux, Windows) and on
// Apple's Foundation is a requirement of `PlatformSupport`, answered once by `CorelibsPlatform`
// (Platform/Corelibs) and once by `ApplePlatform` (Platform/Apple); the rest of the library calls
// `Platform`, which is one of the two, and holds no `#if` beyond its imports. Each corelibs
// answer names the corelibs issue, commit or source line it works around, and a pin test
// (Tests/URLTaskManagerTests/Platform) says which of those facts still hold on the toolchain in
// use, so the day one changes, a test says which.

import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

#if canImport(FoundationNetworking)
/// The platform this build runs on: swift-corelibs-foundation.
typealias Platform = CorelibsPlatform
#else
/// The platform this build runs on: Apple's Foundation.
typealias Platform = ApplePlatform
#endif

/// What the bridge, the transport and the pipeline need to know or do differently on each
/// Foundation. Static requirements only: the answer is fixed per build, and a call through
/// ``Platform`` costs nothing at run time.
protocol PlatformSupport {
    // MARK: The session a manager hands out

    /// Creates the session a manager hands out, owning `pipeline` for as long as it lives, with
    /// the bridge's protocol class in front of the configuration's `protocolClasses`.
    static func makeSession(
        configuration: URLSessionConfiguration, delegate: (any URLSessionDelegate)?, delegateQueue: OperationQueue?, pipeline: Pipeline
    ) -> URLSession

    /// Whether that session tells the pipeline of its own invalidation. Where it cannot, the
    /// manager's invalidation methods tell the pipeline themselves.
    static var sessionReportsInvalidation: Bool { get }

    /// Runs `body` (on a thread of the pipeline's) once `session` has started every task resumed
    /// before this call, so that each of them has reached the pipeline.
    static func afterTasksResumedSoFar(of session: URLSession, _ body: @escaping @Sendable () -> Void)

    // MARK: The outer task, seen from the bridge's `startLoading`

    /// What the bridge needs to know about the outer `task` it starts loading: how its body is
    /// handed over, its queue, its upload body, its pipeline.
    static func facts(for task: URLSessionTask, request: URLRequest, bridge: BridgeURLProtocol.Type) -> OuterTaskFacts

    /// Whether the bridge moves the outer task's `progress` itself (the platform does not).
    static var bridgeMovesProgress: Bool { get }

    // MARK: The inner session

    /// The delegate `session`'s async API (`data(for:delegate:)`) was given for `task`, read from
    /// `session`'s delegate callbacks: where the platform asks the session's delegate about such
    /// a task's redirect instead of the task's own, the transport hands the callback on
    /// (``WholeTransfer``).
    static func asyncAPIDelegate(of task: URLSessionTask, in session: URLSession) -> (any URLSessionTaskDelegate)?

    /// Whether a safe request of the manager's own methods goes out as a ``WholeTransfer``: the
    /// inner session's async `data(for:)`, which hands its answer over where the transfer ends
    /// (corelibs), where a delegate-driven task crosses the delegate queue three times. It relies
    /// on ``asyncAPIDelegate(of:in:)`` and on a refused challenge ending the async call with
    /// `cancelled`, both read in corelibs' source: elsewhere the methods stream as the session's
    /// tasks do.
    static var sendsWholeTransfers: Bool { get }

    /// Makes the inner session's delegate callbacks run where its transfers are read, if the
    /// platform allows it; `false` if they keep their own delegate queue.
    @discardableResult
    static func runCallbacksOnWorkQueue(of session: URLSession, delegateQueue: OperationQueue) -> Bool

    /// Whether the current code runs on a session's work queue, where a `URLProtocolClient` may
    /// be called at once and a task must not be created, resumed or cancelled.
    static var isOnSessionWorkQueue: Bool { get }

    /// Cancels an inner transfer from wherever the transport's caller is.
    static func cancel(innerTask task: URLSessionTask)

    /// Calls `found`, on a thread of its own, with the task `session`'s async API
    /// (`data(for:delegate:)`) runs for `delegate`: what a ``WholeTransfer`` cancels directly,
    /// since cancelling the Swift task of such a call can hang its session on corelibs (see
    /// there).
    static func asyncAPITask(
        withDelegate delegate: any URLSessionTaskDelegate, in session: URLSession, _ found: @escaping @Sendable (AsyncAPITaskLookup) -> Void
    )

    /// Whether the inner session must refuse `challenge` so that the caller's session, which
    /// gets the response, answers it (as a plain session would).
    static func handsChallengeToCaller(_ challenge: URLAuthenticationChallenge) -> Bool

    /// The `Cookie` header a request goes out with, given its `own` and the one the inner
    /// session's storage holds for its URL (`stored`, `nil` when the session adds none): what
    /// sharing keys a request by (``WireHeaders``).
    static func cookieHeaderOnTheWire(own: String?, stored: String?, request: URLRequest) -> WireCookie

    /// The `Cookie` header the inner session put on `task` as it made it, where the platform
    /// shows it: checked against the prediction when a shared transfer starts.
    static func cookieHeaderSent(by task: URLSessionTask) -> SentCookie

    /// How long `request` may go without progress before the inner session fails it with
    /// `URLError.timedOut`, in a session whose `timeoutIntervalForRequest` is `sessionDefault`;
    /// `nil` for never. What a listener of a shared transfer is timed by: the transfer itself is
    /// sent with no timeout of its own (``SharedTransfers``).
    static func idleTimeout(of request: URLRequest, sessionDefault: TimeInterval) -> Duration?

    /// The error the inner session fails a request with when its idle timeout passes.
    static func idleTimeoutError(url: URL?) -> URLError

    // MARK: Header fields

    /// The spelling `setValue(_:forHTTPHeaderField:)` stores `name` under.
    static func storedSpelling(ofHeader name: String) -> String

    /// Sets `value` under `name`, replacing the field under any spelling (see
    /// `URLRequest.replaceHeader(_:with:)`).
    static func replaceHeader(_ name: HeaderName, with value: String, in request: inout URLRequest)

    /// Sets every one of `headers` in order, with one write of the request's fields where that
    /// matters (see `URLRequest.replaceHeaders(_:)`).
    static func replaceHeaders(_ headers: [(name: HeaderName, value: String)], in request: inout URLRequest)

    /// The value of `name` under any spelling.
    static func headerValue(_ name: HeaderName, in request: URLRequest) -> String?

    /// The values of two names under any spelling, found in one read of the request's fields
    /// (on corelibs each read of `allHTTPHeaderFields` bridges the whole dictionary).
    static func headerValues(_ first: HeaderName, _ second: HeaderName, in request: URLRequest) -> (String?, String?)
}

extension PlatformSupport {
    /// Asks the outer session's delegate for the body of a `uploadTask(withStreamedRequest:)`
    /// task, as corelibs' own protocol does (`URLSessionTask.getBody`): its
    /// `urlSession(_:task:needNewBodyStream:)`, called right here (on the work queue, like
    /// corelibs). `nil` (no delegate, or the delegate gave no stream) means an empty body, as
    /// with a plain session.
    static func requestBodyStream(
        for task: URLSessionTask, session: URLSession?, completion: @escaping @Sendable (InputStream?) -> Void
    ) {
        guard let session, let delegate = session.delegate as? URLSessionTaskDelegate else {
            completion(nil)
            return
        }
        delegate.urlSession(session, task: task, needNewBodyStream: completion)
    }

    /// The protocol class URLSession itself uses for HTTP, to which download tasks are handed.
    static var nativeHTTPProtocol: URLProtocol.Type? { NativeHTTPProtocol.found }
}

/// The native HTTP protocol class, found once.
private enum NativeHTTPProtocol {
    static let found: URLProtocol.Type? = {
        let classes = URLSessionConfiguration.default.protocolClasses ?? []
        return classes.lazy.compactMap { $0 as? URLProtocol.Type }.first {
            $0.canInit(with: URLRequest(url: URL(string: "http://127.0.0.1/")!))
        }
    }()
}

/// What ``PlatformSupport/asyncAPITask(withDelegate:in:_:)`` found.
enum AsyncAPITaskLookup: Sendable {
    /// The session's task for that delegate.
    case found(URLSessionTask)
    /// The session has no such task now: not made yet, or ended.
    case none
    /// The session's tasks cannot be read (a toolchain whose internals changed).
    case unreadable
}
