import Dispatch
import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension URLSession {
    /// `data(for:)` bounded as a whole by `deadline`, and whose cancellation never blocks the
    /// thread that cancels it: how the kit talks to a token endpoint.
    ///
    /// A request's own `timeoutInterval` only bounds the silence between two bytes, so an
    /// endpoint that drips its answer would hold every request waiting for the refresh for as long
    /// as it drips. Past `deadline` the caller gets `URLError.timedOut` at once and the transfer is
    /// cancelled; its late answer is dropped.
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
    func boundedData(for request: URLRequest, deadline: Duration?) async throws -> (Data, URLResponse) {
        let bounded = BoundedDataRequest(url: request.url)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let task = dataTask(with: request) { data, response, error in
                    let result: Result<(Data, URLResponse), any Error>
                    if let error {
                        result = .failure(error)
                    } else if let data, let response {
                        result = .success((data, response))
                    } else {
                        result = .failure(URLError(.badServerResponse))
                    }
                    bounded.perform(bounded.locked { $0.completed(result) })
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

/// One bounded request's lifecycle: the first of its answer, its deadline and its caller's
/// cancellation ends it; the others find it ended.
struct BoundedDataRequestStateMachine {
    typealias Answer = Result<(Data, URLResponse), any Error>
    typealias Continuation = CheckedContinuation<(Data, URLResponse), any Error>

    private enum State {
        /// The task is being made; the caller may already have cancelled.
        case starting(cancelled: Bool)
        case running(URLSessionDataTask, Continuation)
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
    private let url: URL?

    init(url: URL?) {
        self.url = url
    }

    mutating func started(_ task: URLSessionDataTask, continuation: Continuation) -> Action {
        switch state {
        case .starting(cancelled: false):
            state = .running(task, continuation)
            return .resume(task)
        case .starting(cancelled: true):
            state = .ended
            return .cancel(task, continuation, answer: .failure(CancellationError()))
        case .running, .ended:
            preconditionFailure("a bounded request starts once")
        }
    }

    mutating func completed(_ answer: Answer) -> Action {
        guard case .running(_, let continuation) = state else { return .none }  // the deadline or a cancel won
        state = .ended
        return .answer(continuation, answer)
    }

    mutating func deadlinePassed() -> Action {
        guard case .running(let task, let continuation) = state else { return .none }
        state = .ended
        return .cancel(task, continuation, answer: .failure(URLError(.timedOut, userInfo: Self.info(url))))
    }

    mutating func cancelled() -> Action {
        switch state {
        case .starting:
            state = .starting(cancelled: true)
            return .none
        case .running(let task, let continuation):
            state = .ended
            return .cancel(task, continuation, answer: .failure(CancellationError()))
        case .ended:
            return .none
        }
    }

    static func info(_ url: URL?) -> [String: Any] {
        guard let url else { return [NSLocalizedDescriptionKey: "The request timed out."] }
        return [
            NSURLErrorFailingURLErrorKey: url, "NSErrorFailingURLStringKey": url.absoluteString,
            NSLocalizedDescriptionKey: "The request timed out.",
        ]
    }
}

/// The storage of one ``BoundedDataRequestStateMachine``.
private final class BoundedDataRequest: @unchecked Sendable {  // `machine` is guarded by `lock`.
    private let lock = NSLock()
    private var machine: BoundedDataRequestStateMachine

    init(url: URL?) {
        machine = BoundedDataRequestStateMachine(url: url)
    }

    func locked(
        _ event: (inout BoundedDataRequestStateMachine) -> BoundedDataRequestStateMachine.Action
    )
        -> BoundedDataRequestStateMachine.Action
    {
        lock.withLock { event(&machine) }
    }

    func perform(_ action: BoundedDataRequestStateMachine.Action) {
        switch action {
        case .none:
            break
        case .resume(let task):
            task.resume()
        case .cancel(let task, let continuation, let answer):
            DispatchQueue.global().async { task.cancel() }
            continuation?.resume(with: answer)
        case .answer(let continuation, let answer):
            continuation.resume(with: answer)
        }
    }
}
