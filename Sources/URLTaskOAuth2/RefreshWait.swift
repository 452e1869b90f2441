import Dispatch
import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One caller's wait for the refresh in flight, bounded by the token endpoint's `timeout`: the
/// first of the refresh's end, the deadline and the caller's cancellation answers the caller;
/// the refresh itself goes on (its token answer is stored even if every caller gave up).
struct RefreshWaitStateMachine {
    typealias Answer = Result<OAuth2Credential, any Error>
    typealias Continuation = CheckedContinuation<OAuth2Credential, any Error>

    private enum State {
        /// The continuation is being installed; the caller may already have cancelled.
        case starting(cancelled: Bool)
        case waiting(Continuation)
        case ended
    }

    /// What to do after an event, with no lock held.
    enum Action {
        case none
        /// Answer the caller.
        case answer(Continuation, Answer)
    }

    private var state = State.starting(cancelled: false)
    private let url: URL

    init(url: URL) {
        self.url = url
    }

    mutating func started(_ continuation: Continuation) -> Action {
        switch state {
        case .starting(cancelled: false):
            state = .waiting(continuation)
            return .none
        case .starting(cancelled: true):
            state = .ended
            return .answer(continuation, .failure(CancellationError()))
        case .waiting, .ended:
            preconditionFailure("a wait starts once")
        }
    }

    mutating func refreshEnded(_ answer: Answer) -> Action {
        guard case .waiting(let continuation) = state else { return .none }  // the deadline or a cancel won
        state = .ended
        return .answer(continuation, answer)
    }

    /// The caller waited ``OAuth2TokenEndpoint/timeout``: it fails as a token request that took
    /// that long always did, with `URLError.timedOut` naming the token endpoint.
    mutating func deadlinePassed() -> Action {
        guard case .waiting(let continuation) = state else { return .none }
        state = .ended
        return .answer(continuation, .failure(URLError(.timedOut, userInfo: BoundedDataRequestStateMachine.info(url))))
    }

    mutating func cancelled() -> Action {
        switch state {
        case .starting:
            state = .starting(cancelled: true)
            return .none
        case .waiting(let continuation):
            state = .ended
            return .answer(continuation, .failure(CancellationError()))
        case .ended:
            return .none
        }
    }
}

/// The storage of one ``RefreshWaitStateMachine``, and the wait itself.
final class RefreshWait: Sendable {
    private let machine: LockedState<RefreshWaitStateMachine>

    private init(url: URL) {
        machine = LockedState(RefreshWaitStateMachine(url: url))
    }

    /// The credential `refresh` produces, or its error, if it ends within `limit`; otherwise
    /// `URLError.timedOut` at `limit`, leaving `refresh` running.
    static func value(
        of refresh: Task<OAuth2Credential, any Error>, within limit: Duration, tokenEndpoint url: URL
    ) async throws -> OAuth2Credential {
        let wait = RefreshWait(url: url)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                wait.perform(wait.locked { $0.started(continuation) })
                Task {
                    let result = await refresh.result
                    wait.perform(wait.locked { $0.refreshEnded(result) })
                }
                DispatchQueue.global().asyncAfter(deadline: .now() + limit.clampedWait / .seconds(1)) {
                    wait.perform(wait.locked { $0.deadlinePassed() })
                }
            }
        } onCancel: {
            wait.perform(wait.locked { $0.cancelled() })
        }
    }

    private func locked(_ event: (inout RefreshWaitStateMachine) -> RefreshWaitStateMachine.Action) -> RefreshWaitStateMachine.Action {
        machine.withLock { event(&$0) }
    }

    private func perform(_ action: RefreshWaitStateMachine.Action) {
        switch action {
        case .none: break
        case .answer(let continuation, let answer): continuation.resume(with: answer)
        }
    }
}
