// Tests/Migration/Before/main.swift after the "Migrating from 0.2" article's steps: it builds
// against this version (scripts/check-migration.sh). The blocks marked `// DocC` are the
// article's "after" listings (DocCArticleTests checks that they agree).
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import URLTaskManager
import URLTaskOAuth2
import URLTaskResilience

// The README's recommended stack.
func makeManager(auth: OAuth2Authenticator) -> URLTaskManager {
    // DocC migrating stack: begin
    let breaker = CircuitBreaker(policy: .init(exempts: { auth.isTokenRequest($0) }))
    let limiter = RateLimiter(policy: .init(rate: 20, burst: 10))
    let coalescing = CoalescingInterceptor(configuration: .init(headersThatNeverIdentifyACaller: ["traceparent", "x-request-id"]))
    let manager = URLTaskManager(
        interceptors: [breaker, BearerInterceptor(authenticator: auth), coalescing, limiter],
        reactors: [OAuth2RefreshReactor(authenticator: auth), OfflineHold(), RetryReactor()]
    )
    // DocC migrating stack: end
    return manager
}

// A reactor of one's own.
struct ResetConnection: URLTaskReactor {
    // DocC migrating reactor configuration: begin
    var configuration: URLTaskReactorConfiguration {
        URLTaskReactorConfiguration(
            mode: .singleFlight(loopGuard: .init(maximumRuns: 2, window: .seconds(30)), afterwards: .deliverResponse),
            timeout: .seconds(5))
    }
    // DocC migrating reactor configuration: end
    func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.urlErrorCode == .networkConnectionLost }
    func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
}

struct PerTaskPause: URLTaskReactor {
    // DocC migrating per-task mode: begin
    var configuration: URLTaskReactorConfiguration { URLTaskReactorConfiguration(mode: .perTask(afterwards: .sendAgain)) }
    // DocC migrating per-task mode: end
    func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 425 }
    func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws { try await Task.sleep(for: .milliseconds(100)) }
}

// A policy that asks for the parts it skips by type.
func skipsRetries(_ request: URLRequest) -> Bool {
    // DocC migrating policy: begin
    guard let policy = URLTaskPolicy(of: request) else { return false }
    return policy.skipsReactor(RetryReactor.self)
    // DocC migrating policy: end
}

// What a caller catches: the codes that changed meaning.
func load(_ request: URLRequest, from session: URLSession) async -> String {
    // DocC migrating errors: begin
    do {
        let (data, _) = try await session.data(for: request)
        return String(decoding: data, as: UTF8.self)
    } catch let error as URLTaskError where error.code == .circuitOpen {
        return "host refused by the breaker: \(error.underlying.map { "\($0)" } ?? "")"
    } catch let error as URLTaskError where error.code == .rateLimitQueueFull {
        return "too many requests queued: \(error)"
    } catch let error as URLTaskError where error.code == .authenticationFailed {
        return "sign in again: \(error)"  // the token endpoint refused the refresh
    } catch let error as URLError where [.cannotConnectToHost, .timedOut, .notConnectedToInternet].contains(error.code) {
        return "offline: \(error.code)"  // a token endpoint out of reach, an OfflineHold that gave up
    } catch {
        return "failed: \(error)"
    }
    // DocC migrating errors: end
}

// 0.2.0's patterns over OAuth2Error (Tests/Migration/BeforePatterns), with the fourth value.
// DocC migrating oauth patterns: begin
func serverCode(of error: any Error) -> String? {
    if case .tokenRequestRejected(_, let code?, _, _)? = error as? OAuth2Error { return code }
    return nil
}

func isRefusedGrant(_ oauth: OAuth2Error) -> Bool {
    if case .tokenRequestRejected(400, "invalid_grant", _, _) = oauth { return true }
    return false
}

func status(of oauth: OAuth2Error) -> Int? {
    guard case .tokenRequestRejected(let status, _, _, _) = oauth else { return nil }
    return status
}

func summary(of oauth: OAuth2Error) -> String {
    switch oauth {
    case .tokenRequestRejected(let status, let code, _, _): return "\(status) \(code ?? "-")"
    case .invalidTokenResponse(let reason, _): return reason
    default: return "\(oauth)"
    }
}
// DocC migrating oauth patterns: end

// The same questions without a pattern: the properties 0.2.0 had too, which no new value breaks.
// DocC migrating oauth properties: begin
func serverCodeWithoutAPattern(of error: any Error) -> String? {
    (error as? OAuth2Error)?.serverErrorCode
}

func mustSignInAgain(_ oauth: OAuth2Error) -> Bool {
    oauth.requiresSignIn  // invalid_grant with a 4xx, or no credential or refresh token at all
}
// DocC migrating oauth properties: end

_ = (makeManager, ResetConnection(), PerTaskPause(), skipsRetries, load)
_ = (serverCode, isRefusedGrant, status, summary, serverCodeWithoutAPattern, mustSignInAgain)
