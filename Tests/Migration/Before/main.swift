// Code written against URLTaskManager 0.2.0, from its README and articles, with only the
// migration's first step done (the products and imports). It does not compile against this
// version: scripts/check-migration.sh builds it and checks that each diagnostic names what to
// write instead. Tests/Migration/After/main.swift is the same code after the article's steps.
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import URLTaskManager
import URLTaskOAuth2
import URLTaskResilience

// The README's recommended stack, as 0.2.0 wrote it.
func makeManager(auth: OAuth2Authenticator) -> URLTaskManager {
    let breaker = CircuitBreaker(policy: .init(exempts: { auth.isTokenRequest($0) }))
    let limiter = RateLimiter(policy: .init(rate: 20, burst: 10))
    let coalescing = CoalescingInterceptor(
        configuration: .init(answerChangingHeaders: ["authorization", "x-tenant"], maximumSharedBodySize: 1 << 20))
    let manager = URLTaskManager(
        interceptors: [breaker, BearerInterceptor(authenticator: auth), coalescing, limiter],
        reactors: [breaker, limiter, OAuth2RefreshReactor(authenticator: auth), OfflineHold(), RetryReactor()]
    )
    coalescing.attach(to: manager)
    return manager
}

// A reactor of one's own, configured as 0.2.0's Writing reactors article did.
struct ResetConnection: URLTaskReactor {
    var configuration: URLTaskReactorConfiguration {
        var configuration = URLTaskReactorConfiguration(requeue: false, timeout: .seconds(5))
        configuration.loopGuard = .init(maximumRuns: 2, window: .seconds(30))
        return configuration
    }
    func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.urlErrorCode == .networkConnectionLost }
    func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
}

struct PerTaskPause: URLTaskReactor {
    var configuration: URLTaskReactorConfiguration { URLTaskReactorConfiguration(sharing: .perTask, holdsNewTasks: false) }
    func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 425 }
    func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws { try await Task.sleep(for: .milliseconds(100)) }
}

// A policy that asked for the parts it skipped by name.
func skipsRetries(_ request: URLRequest) -> Bool {
    guard let policy = URLTaskPolicy(of: request) else { return false }
    return policy.skippedReactors.contains("RetryReactor")
}

_ = (makeManager, ResetConnection(), PerTaskPause(), skipsRetries)
