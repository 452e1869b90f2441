import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Who a ``Call`` answers: the calling task's continuation (the pipeline model's tests answer a
/// recorder instead, so that they drive this very storage).
protocol CallAnswer<Success>: Sendable {
    associatedtype Success
    func resume(with result: sending Result<Success, any Error>)
}

extension CheckedContinuation: CallAnswer where E == any Error {}

/// One call of the manager's own methods: its ``CallStateMachine`` under a lock, and the
/// continuation it resumes, exactly once and with the lock released.
///
/// The sink of the call's pipeline task reports the task's end with ``end(_:)``; the calling
/// task's cancellation handler calls ``cancel()``.
final class Call<Success: Sendable>: Sendable {
    typealias Continuation = any CallAnswer<Success>

    /// The machine, and what a ``DataCallSink`` collected of the answer (under the same lock:
    /// one lock a call).
    private struct State {
        var machine = CallStateMachine<Continuation>()
        var response: URLResponse?
        var body = Data()
    }

    private let state = LockedState(State())
    /// The URL the caller asked for, which a cancellation names.
    private let url: URL?
    /// Lets go of what the call holds for its answer (a download's file) once the caller was
    /// answered `cancelled`: the pipeline tells a cancelled task's sink nothing more.
    private let cleanUpAfterCancel: (@Sendable () -> Void)?

    init(url: URL?, cleanUpAfterCancel: (@Sendable () -> Void)? = nil) {
        self.url = url
        self.cleanUpAfterCancel = cleanUpAfterCancel
    }

    /// Hands over the calling task's continuation: `true` if the call should start its pipeline
    /// task, `false` if the caller had already cancelled (and has been answered).
    func attach(_ continuation: Continuation) -> Bool {
        switch state.withLock({ $0.machine.attach(continuation) }) {
        case .start:
            return true
        case .answerCancelled(let continuation):
            continuation.resume(with: .failure(URLError.cancelled(url: url)))
            cleanUpAfterCancel?()
            return false
        }
    }

    /// The pipeline returned the task's handle.
    func started(_ handle: any PipelineTaskHandle) {
        if case .cancel(let handle) = state.withLock({ $0.machine.started(handle) }) { handle.cancel() }
    }

    /// The calling task was cancelled: the caller gets `URLError.cancelled` now, as from
    /// URLSession's async methods, and the pipeline task is stopped.
    func cancel() {
        guard case .answerCancelled(let continuation, let handle) = state.withLock({ $0.machine.cancelled() }) else { return }
        continuation.resume(with: .failure(URLError.cancelled(url: url)))
        handle?.cancel()
        cleanUpAfterCancel?()
    }

    /// The pipeline task ended with `result` (unless the caller was answered already).
    func end(_ result: Result<Success, any Error>) {
        guard case .answer(let continuation) = state.withLock({ $0.machine.ended() }) else { return }
        continuation.resume(with: result)
    }
}

/// The sink of a call of the manager's own methods, which has no outer task for the session's
/// `invalidateAndCancel()` to cancel.
protocol CallSink: TaskSink {
    /// The manager was invalidated and cancelled: the call is cancelled as the session cancels
    /// its tasks (``Call/cancel()``).
    func cancelCall()
}

/// A sink of the manager's own methods that answers an HTTP authentication challenge as a
/// session without a delegate answers it: the configuration's credential storage's default
/// credential for the protection space, if any, else the caller gets the 401. (There is no
/// delegate to ask: the methods have no `URLSessionTask`.)
protocol AnswersChallengesFromStorage: TaskSink {}

extension AnswersChallengesFromStorage {
    func challenge(
        _ challenge: URLAuthenticationChallenge, answer: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        answer(.performDefaultHandling, nil)
    }

    var answersChallenges: Bool { true }
}

extension Call {
    /// Keeps the answer's head (``DataCallSink``).
    func collect(response: URLResponse) {
        state.withLock { $0.response = response }
    }

    /// Appends a piece of the answer's body (``DataCallSink``). The first piece is kept as it
    /// came, not copied into an empty buffer: a body delivered whole (``TransferDelivery/whole``)
    /// arrives as one piece, which is then the very bytes the caller gets.
    func collect(data: Data) {
        state.withLock { state in
            if state.body.isEmpty {
                state.body = data
            } else {
                state.body.append(data)
            }
        }
    }

    /// What was collected, which is let go.
    func takeCollected() -> (URLResponse?, Data) {
        state.withLock { state in
            defer { state.body = Data() }
            return (state.response, state.body)
        }
    }
}

extension Pipeline {
    /// Runs one call of the manager's methods: `makeSink` makes the sink that ends `call`; the
    /// task starts on the calling thread (no outer session, so no work queue to stay off), and
    /// cancelling the calling task cancels it.
    /// - Parameter started: Told of the task's handle as the pipeline returns it.
    func call<Success: Sendable>(
        _ request: URLRequest, body: URLTaskBody, started: ((any PipelineTaskHandle) -> Void)? = nil,
        _ makeSink: (Call<Success>) -> any TaskSink
    ) async throws -> Success {
        try await call(request, body: body, Call<Success>(url: request.url), started: started, makeSink)
    }

    /// ``call(_:body:_:)`` with a call made by the caller (one that cleans up after a cancel).
    func call<Success: Sendable>(
        _ request: URLRequest, body: URLTaskBody, _ call: Call<Success>, started: ((any PipelineTaskHandle) -> Void)? = nil,
        _ makeSink: (Call<Success>) -> any TaskSink
    ) async throws -> Success {
        let sink = makeSink(call)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                guard call.attach(continuation) else { return }
                let handle = start(request: request, body: body, sink: sink, now: true)
                started?(handle)
                call.started(handle)
            }
        } onCancel: {
            call.cancel()
        }
    }
}
