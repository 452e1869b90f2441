import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskOAuth2
@testable import URLTaskResilience

/// The stack the README recommends, exactly as it shows it (the block below is the README's, which
/// `ReadmeTests` checks), with its defaults untouched, against a server doing what servers do in
/// their first ten minutes: each script is one of issue 38's, over real HTTP on 127.0.0.1, with the
/// outcome each caller must see. The "before" figures in each test's comment are 0.3's, measured
/// with the same script.
final class RecommendedStackTests: XCTestCase {
    // README resilience: begin
    func recommendedManager(auth: OAuth2Authenticator) -> URLTaskManager {
        let breaker = CircuitBreaker(policy: .init(exempts: { auth.isTokenRequest($0) }))
        let limiter = RateLimiter(policy: .init(rate: 20, burst: 10))
        let coalescing = CoalescingInterceptor()
        return URLTaskManager(
            // the manager checks the order: a wrong one stops at init, naming the parts and an order that works
            interceptors: [breaker, BearerInterceptor(authenticator: auth), coalescing, limiter],
            reactors: [OAuth2RefreshReactor(authenticator: auth), OfflineHold(), RetryReactor()]
        )
    }
    // README resilience: end

    /// An authenticator for the API at `origin` whose token is good for an hour, from `tokens`.
    private func authenticator(_ tokens: OAuthServer, origin: URL? = nil) -> OAuth2Authenticator {
        OAuth2Authenticator(
            origins: [origin ?? tokens.baseURL], tokenEndpoint: OAuth2TokenEndpoint(url: tokens.tokenURL, clientID: "tests"),
            store: InMemoryCredentialStore(tokens.credential(access: "good", expiresIn: 3600)))
    }

    private static func elapsed(since start: ContinuousClock.Instant) -> Duration { start.duration(to: .now) }

    /// A flaky endpoint: three requests, each answered `503` with `Retry-After: 1` twice, then
    /// `200`. All three end 200, nine answers in all, and the host is never shut. Before: 1 of 3
    /// ended 200 (the breaker counted every retried attempt, opened on the sixth for 30 s and
    /// refused the retries).
    func testAFlakyEndpointThatAsksForAPauseEndsInThreeSuccesses() async throws {
        let api = try OAuthServer(access: "good")
        defer { api.shutdown() }
        let answers = LockedBox<[String: Int]>([:])
        api.server.route(prefix: "/flaky/") { request in
            let count = answers.withLock {
                $0[request.path, default: 0] += 1; return $0[request.path]!
            }
            return count <= 2 ? ServerResponse(status: 503, headers: ["Retry-After": "1"]) : .text("ok")
        }
        let manager = recommendedManager(auth: authenticator(api))
        defer { manager.invalidateAndCancel() }

        let started = ContinuousClock.now
        let calls = (1...3).map { n in Task { await fetched(manager.session, URLRequest(url: api.server.url("/flaky/\(n)"))) } }
        var results: [Fetched] = []
        for call in calls { results.append(await call.value) }
        let took = Self.elapsed(since: started)

        XCTAssertEqual(results.map(\.label), ["200", "200", "200"])
        XCTAssertEqual(
            api.server.requestCount(path: "/flaky/1") + api.server.requestCount(path: "/flaky/2")
                + api.server.requestCount(path: "/flaky/3"), 9)
        XCTAssertLessThan(took, .seconds(6), "two one-second pauses each, not a 30 s circuit")
        let after = await fetched(manager.session, URLRequest(url: api.server.url("/flaky/1")))
        XCTAssertEqual(after.status, 200, "the host stays open")
        if ParityLog.isVerbose { print("[stack] flaky endpoint: \(results.map(\.label)) in \(took)") }
    }

    /// A 2 s outage: three GETs made while the backend is down (timeout 10 s) end 200 within 2.5 s
    /// of its return, and a GET made 0.5 s after the return ends 200. (0.3 passed this script,
    /// the circuit closed beforehand and three failures under its threshold of 5; the issue's
    /// failure came with more requests: see the next test.)
    func testThreeGETsMadeDuringAShortOutageEndAfterItAsTheyWouldHaveBefore() async throws {
        try await outage(gets: 3)
    }

    /// The same outage with six GETs: all end 200 within 2.5 s of the return, and the GET after
    /// it too. Before: the hold kept them, the breaker counted the hold's six connection failures,
    /// opened for 30 s, and refused the six held requests and the later GET with the server back.
    func testSixGETsMadeDuringAShortOutageAreNotRefusedWhenTheHostIsBack() async throws {
        try await outage(gets: 6)
    }

    private func outage(gets: Int) async throws {
        let tokens = try OAuthServer(access: "good")
        defer { tokens.shutdown() }
        let first = try LoopbackServer()
        let port = first.port
        let manager = recommendedManager(auth: authenticator(tokens, origin: first.baseURL))
        defer { manager.invalidateAndCancel() }
        first.route("/up") { _ in .text("up") }
        let warm = await fetched(manager.session, URLRequest(url: first.url("/up")))
        XCTAssertEqual(warm.status, 200)
        let urls = (1...gets).map { first.url("/item/\($0)") }
        let late = first.url("/item/late")
        first.shutdown()

        let calls = urls.map { url in
            Task {
                var request = URLRequest(url: url)
                request.timeoutInterval = 10
                let result = await fetched(manager.session, request)
                return (result, ContinuousClock.now)
            }
        }
        // The outage lasts 2 s (the script's length, not a wait for a result).
        try await Task.sleep(for: .seconds(2))
        let back = try LoopbackServer(configuration: .init(port: port))
        defer { back.shutdown() }
        back.route(prefix: "/item/") { request in .text(request.path) }
        let returned = ContinuousClock.now

        try await Task.sleep(for: .milliseconds(500))
        let after = await fetched(manager.session, URLRequest(url: late))
        var ends: [Duration] = []
        for (call, url) in zip(calls, urls) {
            let (result, end) = await call.value
            XCTAssertEqual(result.text, url.path, result.label)
            ends.append(returned.duration(to: end))
        }
        XCTAssertEqual(after.text, "/item/late", after.label)
        for end in ends { XCTAssertLessThan(end, .milliseconds(2_500), "ended \(end) after the return") }
        if ParityLog.isVerbose {
            print("[stack] 2 s outage, \(gets) GETs: held GETs ended \(ends) after the return; the later GET: \(after.label)")
        }
    }

    /// The breaker still protects: alone, with its defaults, facing a host that answers 500 to
    /// everything, it lets 5 requests through, then refuses without sending.
    func testTheBreakerAloneStillShutsAHostThatAlwaysFails() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/down") { _ in .status(500) }
        let manager = URLTaskManager(interceptors: [CircuitBreaker(health: HostHealth())])
        defer { manager.invalidateAndCancel() }

        var labels: [String] = []
        for _ in 0..<8 {
            let result = await fetched(manager.session, URLRequest(url: server.url("/down")))
            labels.append(result.taskError?.code == .circuitOpen ? "open" : result.label)
        }
        XCTAssertEqual(labels, ["500", "500", "500", "500", "500", "open", "open", "open"])
        XCTAssertEqual(server.requestCount(path: "/down"), 5)
    }

    /// A host that stays down: a held request fails just before its timeout (2 s) with the
    /// original `URLError`, as a plain session would have failed it, only later.
    func testAHostThatStaysDownFailsHeldRequestsJustBeforeTheirTimeoutWithTheOriginalError() async throws {
        let tokens = try OAuthServer(access: "good")
        defer { tokens.shutdown() }
        let api = try LoopbackServer()
        let manager = recommendedManager(auth: authenticator(tokens, origin: api.baseURL))
        defer { manager.invalidateAndCancel() }
        let url = api.url("/gone")
        api.shutdown()

        var request = URLRequest(url: url)
        request.timeoutInterval = 2
        let started = ContinuousClock.now
        let result = await fetched(manager.session, request)
        let took = Self.elapsed(since: started)

        XCTAssertEqual(result.urlErrorCode, .cannotConnectToHost, result.label)
        XCTAssertGreaterThan(took, .milliseconds(1_500), "held until just before its timeout")
        XCTAssertLessThan(took, .seconds(2), "failed before its timeout, with the original error")
    }
}
