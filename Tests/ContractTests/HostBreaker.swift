import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import URLTaskManager  // not @testable: this target sees what an app sees

// DocC third-party breaker: begin
/// A circuit breaker written by an app, on URLTaskManager's public API alone: an interceptor
/// that refuses requests to a failing host, and an outcome observer that counts failures.
// @unchecked Sendable: `machine` is only read and written under `lock`; the rest is immutable.
final class HostBreaker: URLTaskInterceptor, SynchronousInterceptor, URLTaskOutcomeObserver, @unchecked Sendable {
    /// What the breaker decided, for logs and tests.
    enum Decision: Sendable, Equatable {
        case opened(URLOrigin, failures: Int)
        case probing(URLOrigin)
        case refused(URLOrigin)
        case closed(URLOrigin)
        case reopened(URLOrigin)
    }

    /// Why a request was refused; the caller finds it as the `URLTaskError`'s `underlying`.
    struct HostUnavailable: Error, Equatable {
        let host: URLOrigin
        let retryAfter: Duration
    }

    let decisions = DecisionEvents<Decision>()
    private let lock = NSLock()
    private var machine: HostCircuitStateMachine
    private let isFailure: @Sendable (URLTaskOutcome) -> Bool
    private let now: @Sendable () -> ContinuousClock.Instant

    init(
        threshold: Int = 5, coolDown: Duration = .seconds(30),
        isFailure: @escaping @Sendable (URLTaskOutcome) -> Bool = { ($0.statusCode ?? 500) >= 500 },
        now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        self.machine = HostCircuitStateMachine(threshold: threshold, coolDown: coolDown)
        self.isFailure = isFailure
        self.now = now
    }

    /// First, so a refused request costs no other interceptor any work (the manager checks).
    var interceptorPlacement: URLTaskPlacement { .first }

    var trackedHosts: Int { lock.withLock { machine.trackedHosts } }

    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        try interceptWithoutSuspending(&task, context: context) ?? .execute
    }

    func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand? {
        guard let host = URLOrigin(task.request.url) else { return .execute }
        let instant = now()
        let id = task.id
        switch lock.withLock({ machine.requestArrives(id, to: host, now: instant) }) {
        case .send:
            return .execute
        case .sendAsProbe:
            // The probe must hear the server itself, never an identical request's transfer.
            task.attemptValues[ExclusiveTransfer.self] = true
            decisions.emit(.probing(host))
            return .execute
        case .refuse(let retryAfter):
            decisions.emit(.refused(host))
            return .fail(URLTaskError(code: .hostUnavailable, underlying: HostUnavailable(host: host, retryAfter: retryAfter)))
        }
    }

    func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
        guard let host = URLOrigin(task.request.url) else { return }
        let failed = isFailure(outcome)  // the app's predicate: called with no lock held
        let instant = now()
        switch lock.withLock({ machine.outcomeArrives(of: task.id, at: host, failed: failed, now: instant) }) {
        case .none: break
        case .opened(let failures): decisions.emit(.opened(host, failures: failures))
        case .closed: decisions.emit(.closed(host))
        case .reopened: decisions.emit(.reopened(host))
        }
    }
}

extension URLTaskError.Code {
    /// The breaker refused the request without sending it: its host failed repeatedly. The
    /// error's `underlying` is a `HostBreaker.HostUnavailable`, which says when to try again.
    static let hostUnavailable = URLTaskError.Code(
        "HostBreaker.hostUnavailable", summary: "Refused without sending: the host keeps failing")
}
// DocC third-party breaker: end
