import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Receives one inner task's events.
protocol TransportEvents: AnyObject, Sendable {
    func transportDidReceive(response: URLResponse)
    func transportDidReceive(data: Data)
    func transportDidComplete(error: (any Error)?)
    /// The transfer has sent `totalBytesSent` bytes of its body, of `totalBytesExpectedToSend`
    /// (0 or -1 when unknown).
    func transportDidSendBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64)
    /// The transfer met a redirect and waits for `decide` (`nil`: do not follow).
    func transportWillRedirect(_ response: HTTPURLResponse, to request: URLRequest, decide: @escaping @Sendable (URLRequest?) -> Void)
    /// The transfer read `byteCount` bytes of body that the platform never handed over (a
    /// ``WholeTransfer``'s redirect response, whose body corelibs drops): they count as
    /// received, and nobody gets them.
    func transportDidDropBody(byteCount: Int)
}

extension TransportEvents {
    func transportDidDropBody(byteCount: Int) {}
}

/// The inner `URLSession` that does the real HTTP.
///
/// Built from a copy of the caller's configuration without the bridge, so timeouts, cookies,
/// cache policy and proxies behave as in a plain session; its additional headers are put on
/// the caller's request by the pipeline instead (``AdditionalHeaders``). A redirect is never
/// followed here: the task that met it decides, and the pipeline sends the followed request as
/// a new transfer, through the interceptors (see ``urlSession(_:task:willPerformHTTPRedirection:newRequest:completionHandler:)``).
/// HTTP authentication challenges are left to the caller's session (see
/// ``urlSession(_:task:didReceive:completionHandler:)``).
// @unchecked Sendable: `session` is a `var` (set once in init, after `super.init()`: its delegate is `self`).
final class Transport: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    /// Where one inner task's events go, and whether its response head has gone there yet.
    private struct Route {
        let events: any TransportEvents
        var sawHead = false
    }

    private struct State {
        /// Each inner task's route, by task identifier.
        var routes: [Int: Route] = [:]
        /// Inner tasks whose 401 challenge was handed to the caller's session: their cancellation
        /// is the normal end of the 401 response.
        var handedOver: Set<Int> = []
    }

    private let state = LockedState(State())
    /// Holds this object as its delegate until it is invalidated, which the pipeline does when
    /// the outer session ends (``PipelineLifecycleStateMachine``).
    private(set) var session: URLSession!
    /// Serial: every delegate callback. On corelibs its operations run on the inner session's
    /// own work queue (``Platform/runCallbacksOnWorkQueue(of:delegateQueue:)``).
    private let delegateQueue = OperationQueue()

    /// Whether the callbacks run on the inner session's work queue
    /// (``Platform/runCallbacksOnWorkQueue(of:delegateQueue:)``).
    private(set) var callbacksOnWorkQueue = false

    /// - Parameter callbacksOnWorkQueue: Whether to run the callbacks on the session's work
    ///   queue where the platform allows (the outer session's tasks), or on a thread of their own.
    init(configuration: URLSessionConfiguration, callbacksOnWorkQueue: Bool = true) {
        super.init()
        delegateQueue.maxConcurrentOperationCount = 1
        delegateQueue.name = "URLTaskManager.Transport"
        session = URLSession(configuration: configuration, delegate: self, delegateQueue: delegateQueue)
        if callbacksOnWorkQueue, Platform.runCallbacksOnWorkQueue(of: session, delegateQueue: delegateQueue) {
            self.callbacksOnWorkQueue = true
            // That queue is serial, so the callbacks stay serialized and in order; what a limit
            // of 1 would add is a wait: OperationQueue hands the queue one operation at a time,
            // each behind whatever libcurl read meanwhile (up to 100 chunks per socket event),
            // and a fast body piled up here, in memory, until the transfer ended (see the
            // Performance article, "Streaming memory through the session").
            delegateQueue.maxConcurrentOperationCount = OperationQueue.defaultMaxConcurrentOperationCount
        }
    }

    /// Starts `request`. Must not be called on the outer session's work queue (corelibs
    /// creates and resumes tasks with a `sync` onto it).
    func start(_ request: URLRequest, body: URLTaskBody, events: any TransportEvents) -> URLSessionTask {
        assert(!Platform.isOnSessionWorkQueue, "a task created on the work queue deadlocks")
        let request = Self.prepared(request, body: body)
        let task: URLSessionTask
        if case .file(let url) = body {
            task = session.uploadTask(with: request, fromFile: url)
        } else {
            task = session.dataTask(with: request)
        }
        state.withLock { $0.routes[task.taskIdentifier] = Route(events: events) }
        task.resume()
        return task
    }

    /// Starts `request` (``WholeTransfer/accepts(_:body:)``) as a ``WholeTransfer``: its answer
    /// arrives in one piece.
    func startWhole(_ request: URLRequest, events: any TransportEvents) -> WholeTransfer {
        WholeTransfer(Self.prepared(request, body: .none), session: session, events: events) { [self] events in
            start(request, body: .none, events: events)
        }
    }

    /// `request` (framed: ``BodyFraming/framed(_:body:)``, which also took the policy's header
    /// off) as the inner session sends it: with `body` in its body fields (a file's is the
    /// upload task's), each field written only when it must change (see `removeBody()`).
    static func prepared(_ request: URLRequest, body: URLTaskBody) -> URLRequest {
        var request = request
        switch body {
        case .none, .file:
            request.removeBody()
        case .data(let data):
            if request.httpBodyStream != nil { request.httpBodyStream = nil }
            request.httpBody = data
        case .stream(let stream):
            if request.httpBody != nil { request.httpBody = nil }
            request.httpBodyStream = stream
        }
        return request
    }

    /// Cancels an inner task (a caller cancelled its own request), as the platform allows
    /// (``PlatformSupport/cancel(innerTask:)``: on corelibs, from a thread of its own).
    func cancel(_ task: URLSessionTask) {
        Platform.cancel(innerTask: task)
    }

    private func events(for task: URLSessionTask) -> (any TransportEvents)? {
        state.withLock { $0.routes[task.taskIdentifier]?.events }
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
    ) {
        let events = state.withLock { state -> (any TransportEvents)? in
            state.routes[dataTask.taskIdentifier]?.sawHead = true
            return state.routes[dataTask.taskIdentifier]?.events
        }
        events?.transportDidReceive(response: response)
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        events(for: dataTask)?.transportDidReceive(data: data)
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64,
        totalBytesExpectedToSend: Int64
    ) {
        events(for: task)?.transportDidSendBody(totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend)
    }

    /// A transfer that ends without an error but whose head never came is a redirect status
    /// corelibs meant to follow and could not (a 301-303 or 305-308 with no `Location`, or one
    /// that is not a URL): corelibs hands a delegate-driven task no head for those statuses, and
    /// keeps the response on the task only. That response is the answer, as a plain session
    /// gives it (its body is dropped by corelibs alike). With neither a head nor an error, the
    /// transfer is `badServerResponse`: it never ends with nothing.
    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let (route, handedOver) = state.withLock {
            ($0.routes.removeValue(forKey: task.taskIdentifier), $0.handedOver.remove(task.taskIdentifier) != nil)
        }
        guard let route else { return }
        if handedOver { return route.events.transportDidComplete(error: nil) }
        if error == nil, !route.sawHead {
            guard let response = task.response else {
                return route.events.transportDidComplete(error: URLError.noResponse(url: task.originalRequest?.url))
            }
            route.events.transportDidReceive(response: response)
        }
        route.events.transportDidComplete(error: error)
    }

    /// An HTTP authentication challenge belongs to the caller's session, which gets the 401 like
    /// any response and then asks the caller's delegate or credential storage exactly as a plain
    /// session does. Where the platform would have the inner session answer it itself
    /// (``PlatformSupport/handsChallengeToCaller(_:)``), the inner task's challenge is refused and
    /// its end reported as the normal end of the 401 response.
    func urlSession(
        _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        var disposition = URLSession.AuthChallengeDisposition.performDefaultHandling
        if Platform.handsChallengeToCaller(challenge) {
            // A whole transfer's task (no route) ends with `cancelled`, which it reads as this.
            state.withLock { if $0.routes[task.taskIdentifier] != nil { $0.handedOver.insert(task.taskIdentifier) } }
            disposition = .cancelAuthenticationChallenge
        }
        // corelibs answers by cancelling or suspending the task, a `sync` onto the work queue.
        if Platform.isOnSessionWorkQueue {
            // Called once, from that one thread; corelibs' handler locks what it touches.
            nonisolated(unsafe) let answer = completionHandler
            DispatchQueue.global().async { [disposition] in answer(disposition, nil) }
        } else {
            completionHandler(disposition, nil)
        }
    }

    /// Redirects are the pipeline's to follow (through the interceptors, after asking the
    /// caller's delegate): the task decides, and the inner session then delivers the redirect
    /// response, which the task drops if it follows.
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest,
        completionHandler: @escaping (URLRequest?) -> Void
    ) {
        // Called once; corelibs' handler hops to the task's own queue itself.
        nonisolated(unsafe) let completion = completionHandler
        guard let events = events(for: task) else {
            // A whole transfer's task, about which the platform asks the session's delegate.
            guard let relay = Platform.asyncAPIDelegate(of: task, in: session) as? RedirectRelay else { return completion(nil) }
            return relay.urlSession(session, task: task, willPerformHTTPRedirection: response, newRequest: request) { completion($0) }
        }
        events.transportWillRedirect(response, to: request) { completion($0) }
    }

    /// corelibs lets go of the delegate right after this call, and a task that ends after that
    /// (one cancelled by `invalidateAndCancel()` whose end was still queued) reports nothing.
    /// Its pipeline task must still end, and release what it holds: it ends here, cancelled.
    func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
        let orphans: [any TransportEvents] = state.withLock { state in
            defer {
                state.routes = [:]
                state.handedOver = []
            }
            return state.routes.values.map(\.events)
        }
        for events in orphans { events.transportDidComplete(error: URLError(.cancelled)) }
    }
}

extension URLRequest {
    /// Clears `httpBody` and `httpBodyStream`, writing each only when it is set: on corelibs the
    /// first write to a request shared with another holder (the bridge's `URLProtocol`, the task's
    /// record) copies the whole request, and most requests have neither field set (the copy's
    /// cost: the Performance article, "Single operations on Linux").
    mutating func removeBody() {
        if httpBody != nil { httpBody = nil }
        if httpBodyStream != nil { httpBodyStream = nil }
    }
}
