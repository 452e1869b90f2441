import Foundation
import URLTaskManager

/// Sends a task again after a transient failure, waiting as its ``RetryPolicy`` says.
///
/// ```swift
/// let manager = URLTaskManager(reactors: [OAuth2RefreshReactor(authenticator: auth), RetryReactor()])
/// ```
///
/// It runs with `URLTaskReactorConfiguration.retry`: each task waits out its own back-off
/// (retries are not shared), no task is held for another's, and the wait is the only work. The
/// wait ends at once when the caller cancels the task, which then completes with `cancelled`.
///
/// When the policy's attempts are used up, or the failure is not retryable, it does not take
/// the task, so the caller receives the last response (a 503 with its body) or transport error
/// exactly as a plain `URLSession` would have delivered it, not a wrapped error.
///
/// Attempts are counted by `URLTask.attempt`, which counts every send of the task, including
/// one made after a token refresh. Each retry runs the interceptors again (fresh headers, a
/// fresh signature) and replays the body (see `URLTaskManager.Options.maximumReplayableBodySize`).
/// It is placed `URLTaskPlacement.last` (the manager checks it): the fallback, after the
/// reactors that handle a failure better (``OfflineHold`` waits for an unreachable host) and after
/// the observers (a ``CircuitBreaker`` counts the task by its last attempt, when it ends). Where it stands next to an
/// authentication reactor does not matter: a 401 is not retryable.
public struct RetryReactor: URLTaskReactor {
    /// What is retried, how often and how late.
    public let policy: RetryPolicy
    public let configuration: URLTaskReactorConfiguration

    /// Retries as `policy` says.
    public init(policy: RetryPolicy = .default, configuration: URLTaskReactorConfiguration = .retry) {
        self.policy = policy
        self.configuration = configuration
    }

    public func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
        policy.shouldRetry(task.request, attempt: task.attempt, after: outcome)
    }

    public func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
        // Clamped again: `Task.sleep` traps beyond `Int64` seconds from now.
        try await Task.sleep(for: policy.delay(afterAttempt: task.attempt, outcome: outcome).clampedWait)
    }

    /// `URLTaskPlacement.last`: a retry is the fallback once no other reactor takes the failure.
    public var reactorPlacement: URLTaskPlacement { .last }
}
