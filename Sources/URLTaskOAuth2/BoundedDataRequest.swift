import Dispatch
import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension URLSession {
    /// `data(for:)` bounded as a whole by `deadline` and in size by `sizeLimit`, and whose
    /// cancellation never blocks the thread that cancels it: how the kit talks to a token endpoint.
    ///
    /// A request's own `timeoutInterval` only bounds the silence between two bytes, so an
    /// endpoint that drips its answer would hold every request waiting for the refresh for as long
    /// as it drips. Past `deadline` the caller gets `URLError.timedOut` at once and the transfer is
    /// cancelled; its late answer is dropped.
    ///
    /// A body longer than `sizeLimit` bytes fails with ``OAuth2Error/tokenAnswerTooLarge(limit:url:)``
    /// and the transfer is cancelled: at the response's head when its `Content-Length` announces
    /// more, else as soon as the bytes received pass it. The body streams to the request only
    /// through a session whose delegate is the kit's ``TokenSessionDelegate`` (the
    /// ``OAuth2TokenEndpoint/defaultSession``); through any other session the task has a
    /// completion handler, URLSession reads the whole body first, and the limit is checked on it.
    ///
    /// On swift-corelibs-foundation (6.3.1) `data(for:)`'s cancellation handler calls
    /// `URLSessionTask.cancel()` synchronously, which waits for the session's work queue, while
    /// the Swift runtime holds the cancelled task's status lock. If the work queue is at that
    /// moment completing the same request, it resumes the task's continuation, which needs that
    /// lock: both wait forever (caught twice in the test suite, with `gdb`, when a refresh's
    /// deadline cancelled its token request). Here every cancel is handed to another thread, and
    /// nothing waits for it to take effect: right also from 6.4, where `cancel()` only queues the
    /// cancellation (corelibs #5417) and the task may still complete with its answer after
    /// `cancel()` returned (the state machine then finds the request ended and drops it).
    func boundedData(for request: URLRequest, deadline: Duration?, sizeLimit: Int) async throws -> (Data, URLResponse) {
        let bounded = BoundedDataRequest(url: request.url, sizeLimit: sizeLimit)
        let router = delegate as? TokenSessionDelegate
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let task: URLSessionDataTask
                if let router {
                    // Delegate-driven: the body streams to `bounded`, which can stop it.
                    task = dataTask(with: request)
                    router.register(bounded, for: task)
                } else {
                    task = dataTask(with: request) { data, response, error in
                        let result: Result<(Data, URLResponse), any Error>
                        if let error {
                            result = .failure(response == nil ? BoundedDataRequestStateMachine.unanswered(error) : error)
                        } else if let data, let response {
                            result = .success((data, response))
                        } else {
                            result = .failure(BoundedDataRequestStateMachine.unanswered(URLError(.badServerResponse)))
                        }
                        bounded.perform(bounded.locked { $0.completed(result) })
                    }
                }
                bounded.perform(bounded.locked { $0.started(task, continuation: continuation) })
                if let deadline {
                    DispatchQueue.global().asyncAfter(deadline: .now() + deadline.clampedWait / .seconds(1)) {
                        bounded.perform(bounded.locked { $0.deadlinePassed() })
                    }
                }
            }
        } onCancel: {
            bounded.perform(bounded.locked { $0.cancelled() })
        }
    }
}

/// One bounded request's lifecycle: the first of its answer, its deadline, its caller's
/// cancellation and its body passing the size limit ends it; the others find it ended.
struct BoundedDataRequestStateMachine {
    typealias Answer = Result<(Data, URLResponse), any Error>
    typealias Continuation = CheckedContinuation<(Data, URLResponse), any Error>

    private enum State {
        /// The task is being made; the caller may already have cancelled.
        case starting(cancelled: Bool)
        /// Sent; `response` is the head, once a delegate-driven task has received it.
        case running(URLSessionDataTask, Continuation, response: URLResponse?)
        case ended
    }

    /// What to do after an event, with no lock held.
    enum Action {
        case none
        case resume(URLSessionDataTask)
        /// Cancel the task (on another thread) and answer the caller with `answer`.
        case cancel(URLSessionDataTask, Continuation?, answer: Answer)
        case answer(Continuation, Answer)
    }

    private var state = State.starting(cancelled: false)
    /// The body of a delegate-driven task so far (never more than `sizeLimit` bytes).
    private var body = Data()
    private let url: URL?
    private let sizeLimit: Int

    init(url: URL?, sizeLimit: Int = OAuth2TokenEndpoint.defaultAnswerSizeLimit) {
        self.url = url
        self.sizeLimit = max(0, sizeLimit)
    }

    mutating func started(_ task: URLSessionDataTask, continuation: Continuation) -> Action {
        switch state {
        case .starting(cancelled: false):
            state = .running(task, continuation, response: nil)
            return .resume(task)
        case .starting(cancelled: true):
            state = .ended
            return .cancel(task, continuation, answer: .failure(CancellationError()))
        case .running, .ended:
            preconditionFailure("a bounded request starts once")
        }
    }

    /// A delegate-driven task received its response's head: a `Content-Length` beyond the limit
    /// ends it before a byte of the body is read.
    mutating func received(_ response: URLResponse) -> Action {
        guard case .running(let task, let continuation, _) = state else { return .none }
        guard response.expectedContentLength <= Int64(sizeLimit) else { return tooLarge(task, continuation) }
        state = .running(task, continuation, response: response)
        return .none
    }

    /// A delegate-driven task received a piece of the body: kept while the body stays within
    /// the limit, else the transfer ends.
    mutating func received(_ data: Data) -> Action {
        guard case .running(let task, let continuation, _) = state else { return .none }
        guard data.count <= sizeLimit - body.count else { return tooLarge(task, continuation) }
        body.append(data)
        return .none
    }

    /// A delegate-driven task ended, with `error` or with the body received. Ended before any
    /// response head arrived, its `badServerResponse` is marked ``unanswered(_:)``.
    mutating func finished(_ error: (any Error)?) -> Action {
        guard case .running(_, let continuation, let response) = state else { return .none }
        state = .ended
        defer { body = Data() }
        if let error { return .answer(continuation, .failure(response == nil ? Self.unanswered(error) : error)) }
        guard let response else { return .answer(continuation, .failure(Self.unanswered(URLError(.badServerResponse)))) }
        return .answer(continuation, .success((body, response)))
    }

    /// The `userInfo` key that marks a `URLError.badServerResponse` of a token request whose
    /// connection ended before a byte of an answer (``isUnanswered(_:)``).
    static let unansweredKey = "URLTaskOAuth2TokenRequestUnanswered"

    /// `error`, marked when it is a `badServerResponse` of a request that received no response
    /// head: the server closed the connection without answering (corelibs reports libcurl's
    /// "Empty reply from server" so). That code also stands for answers that could not be read
    /// (Apple platforms), which are refusals; only the mark tells a silence apart. Other errors
    /// are returned unchanged.
    static func unanswered(_ error: any Error) -> any Error {
        guard let error = error as? URLError, error.code == .badServerResponse else { return error }
        var info = error.userInfo
        info[unansweredKey] = true
        return URLError(.badServerResponse, userInfo: info)
    }

    /// Whether `error` is a token request's `badServerResponse` that ``unanswered(_:)`` marked.
    static func isUnanswered(_ error: any Error) -> Bool {
        guard let error = error as? URLError, error.code == .badServerResponse else { return false }
        return error.userInfo[unansweredKey] as? Bool == true
    }

    /// A task with a completion handler (a session of the app's own) ended; its body is whole,
    /// so the limit is checked on it.
    mutating func completed(_ answer: Answer) -> Action {
        guard case .running(_, let continuation, _) = state else { return .none }  // the deadline or a cancel won
        state = .ended
        if case .success(let (data, _)) = answer, data.count > sizeLimit {
            return .answer(continuation, .failure(OAuth2Error.tokenAnswerTooLarge(limit: sizeLimit)))
        }
        return .answer(continuation, answer)
    }

    mutating func deadlinePassed() -> Action {
        guard case .running(let task, let continuation, _) = state else { return .none }
        state = .ended
        body = Data()
        return .cancel(task, continuation, answer: .failure(URLError(.timedOut, userInfo: Self.info(url))))
    }

    mutating func cancelled() -> Action {
        switch state {
        case .starting:
            state = .starting(cancelled: true)
            return .none
        case .running(let task, let continuation, _):
            state = .ended
            body = Data()
            return .cancel(task, continuation, answer: .failure(CancellationError()))
        case .ended:
            return .none
        }
    }

    /// Ends the request because its body is longer than the limit; what was read is dropped.
    private mutating func tooLarge(_ task: URLSessionDataTask, _ continuation: Continuation) -> Action {
        state = .ended
        body = Data()
        return .cancel(task, continuation, answer: .failure(OAuth2Error.tokenAnswerTooLarge(limit: sizeLimit)))
    }

    static func info(_ url: URL?) -> [String: Any] {
        guard let url else { return [NSLocalizedDescriptionKey: "The request timed out."] }
        return [
            NSURLErrorFailingURLErrorKey: url, "NSErrorFailingURLStringKey": url.absoluteString,
            NSLocalizedDescriptionKey: "The request timed out.",
        ]
    }
}

/// The storage of one ``BoundedDataRequestStateMachine``, and the receiver of its task's
/// delegate calls when ``TokenSessionDelegate`` routes them.
final class BoundedDataRequest: Sendable {
    private let machine: LockedState<BoundedDataRequestStateMachine>

    init(url: URL?, sizeLimit: Int) {
        machine = LockedState(BoundedDataRequestStateMachine(url: url, sizeLimit: sizeLimit))
    }

    func locked(
        _ event: (inout BoundedDataRequestStateMachine) -> BoundedDataRequestStateMachine.Action
    )
        -> BoundedDataRequestStateMachine.Action
    {
        machine.withLock { event(&$0) }
    }

    /// Runs `action`; call it with no lock held. Returns whether it cancels the task.
    @discardableResult
    func perform(_ action: BoundedDataRequestStateMachine.Action) -> Bool {
        switch action {
        case .none:
            return false
        case .resume(let task):
            task.resume()
            return false
        case .cancel(let task, let continuation, let answer):
            DispatchQueue.global().async { task.cancel() }
            continuation?.resume(with: answer)
            return true
        case .answer(let continuation, let answer):
            continuation.resume(with: answer)
            return false
        }
    }
}
