import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskOAuth2
@testable import URLTaskResilience
import TestSupport

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

    /// A token expiring under load: 100 concurrent GETs, at the README limiter's 20 a second in
    /// bursts of 10 (the schedule needs 4.5 s), while a 3 s token expires in the middle of the
    /// queue. Every GET ends 200 within the schedule plus 0.3 s, with one token request (the one
    /// expiry crossed), and the limiter charged exactly what reached the server. Before (0.3):
    /// 6.1 s; each refresh sent the queued requests back through the interceptors, where the
    /// limiter charged them again and put them at the back of its line.
    func testAHundredGETsWhileATokenExpiresMidQueueEndWithinTheLimitersSchedule() async throws {
        try await hundredGETsWhileATokenExpiresMidQueue(door: .session)
    }

    /// The same through the manager's own `data(for:)`.
    func testAHundredGETsThroughTheMethodsWhileATokenExpiresMidQueueEndWithinTheLimitersSchedule() async throws {
        try await hundredGETsWhileATokenExpiresMidQueue(door: .methods)
    }

    private func hundredGETsWhileATokenExpiresMidQueue(door: Door) async throws {
        let figures = try await expiringUnderLoad(gets: 100, tokenLifetime: 3, door: door)
        XCTAssertEqual(figures.labels, ["200": 100])
        XCTAssertLessThan(figures.took, figures.schedule + .milliseconds(300), "the limiter's schedule plus 0.3 s")
        XCTAssertEqual(figures.tokenRequests, 1, "one token request per expiry crossed")
        XCTAssertEqual(figures.charged - figures.refunded, figures.sent, "limiter passes = requests sent")
    }

    /// 200 GETs across two expiries of a 4 s token: they take the limiter's schedule (9.5 s at 20
    /// a second after a burst of 10) plus at most 10 %, with two token requests. Before (0.3):
    /// with 10 s tokens 200 GETs took 14.2 s, the server idle for 4 s after the refresh.
    func testTwoHundredGETsAcrossTwoExpiriesTakeTheRatesTimePlusAtMostTenPercent() async throws {
        let figures = try await expiringUnderLoad(gets: 200, tokenLifetime: 4, door: .session)
        XCTAssertEqual(figures.labels, ["200": 200])
        XCTAssertLessThan(figures.took, figures.schedule * 1.1, "the rate's time plus at most 10 %")
        XCTAssertEqual(figures.tokenRequests, 2, "one token request per expiry crossed")
        XCTAssertEqual(figures.charged - figures.refunded, figures.sent, "limiter passes = requests sent")
    }

    /// The limiters' "sent after waiting" notes come only with requests sent: each one right
    /// after a `sent` event of its task, and those whose turn was kept across the refresh say so.
    /// Before, the note was added when the turn came, also for requests the refresh then sent to
    /// the back of the line.
    func testTheLimitersSentNotesComeOnlyWithRequestsSent() async throws {
        let events = LockedBox<[URLTaskEvent]>([])
        let figures = try await expiringUnderLoad(gets: 60, tokenLifetime: 1, door: .session, events: events)
        XCTAssertEqual(figures.labels, ["200": 60])
        var byTask: [URLTask.ID: [URLTaskEvent.Kind]] = [:]
        for event in events.withLock({ $0 }) { byTask[event.task, default: []].append(event.kind) }
        var notes = 0
        var kept = 0
        for (task, kinds) in byTask {
            for (index, kind) in kinds.enumerated() {
                guard case .annotated("rate-limit", let value) = kind, value.hasPrefix("sent") else { continue }
                notes += 1
                if value.hasSuffix("its turn kept across a token refresh") { kept += 1 }
                guard index > 0, case .sent = kinds[index - 1] else {
                    XCTFail("task \(task): '\(value)' without a send before it: \(kinds)")
                    continue
                }
            }
        }
        XCTAssertGreaterThan(notes, 0, "requests waited for their turn")
        XCTAssertGreaterThan(kept, 0, "requests kept their turn across the refresh")
        if ParityLog.isVerbose { print("[stack] sent notes: \(notes), \(kept) of them kept across the refresh") }
    }

    enum Door { case session, methods }

    struct UnderLoad {
        var labels: [String: Int]
        var took: Duration
        /// What the README's limiter (20 a second, bursts of 10) needs for the GETs.
        var schedule: Duration
        var tokenRequests: Int
        /// API requests the server received (401s included).
        var sent: Int
        var unauthorized: Int
        var charged: Int
        var refunded: Int
    }

    /// `gets` concurrent GETs through the README's stack while the server's access tokens live
    /// `tokenLifetime` seconds (the first one issued as the GETs start).
    private func expiringUnderLoad(
        gets: Int, tokenLifetime: Int, door: Door, events: LockedBox<[URLTaskEvent]>? = nil
    ) async throws -> UnderLoad {
        let api = try OAuthServer(access: "good")
        defer { api.shutdown() }
        api.setExpiresIn(tokenLifetime)
        let issued = Date()
        api.expireAccessTokens(after: .seconds(tokenLifetime))
        let auth = OAuth2Authenticator(
            origins: [api.baseURL], tokenEndpoint: OAuth2TokenEndpoint(url: api.tokenURL, clientID: "tests"),
            store: InMemoryCredentialStore(
                OAuth2Credential(
                    accessToken: "good", refreshToken: api.currentRefresh, expiresAt: issued.addingTimeInterval(Double(tokenLifetime)),
                    issuedAt: issued)))
        let manager = recommendedManager(auth: auth)
        defer { manager.invalidateAndCancel() }
        let limiter = try XCTUnwrap(manager.pipeline.interceptors.lazy.compactMap { $0 as? RateLimiter }.first)
        // Every task's events up to its `completed`, when asked for.
        let allCompleted = Latch<Void>("every task completed")
        let listener = events.map { events in
            let stream = manager.events(bufferingNewest: 100_000)
            return Task {
                var completed = 0
                for await event in stream {
                    events.withLock { $0.append(event) }
                    if case .completed = event.kind { completed += 1 }
                    if completed == gets { _ = allCompleted.fulfill(()) }
                }
            }
        }
        defer { listener?.cancel() }

        let started = ContinuousClock.now
        let results = await withTaskGroup(of: Fetched.self) { group in
            for n in 1...gets {
                let request = URLRequest(url: api.apiURL("/item/\(n)"))
                group.addTask {
                    switch door {
                    case .session: await fetched(manager.session, request)
                    case .methods: await fetched(manager, request)
                    }
                }
            }
            var results: [Fetched] = []
            for await result in group { results.append(result) }
            return results
        }
        let took = Self.elapsed(since: started)
        if listener != nil { try await allCompleted.wait(timeout: .seconds(10)) }
        let passes = limiter.passes
        let figures = UnderLoad(
            labels: Dictionary(results.map { ($0.urlErrorCode.map { "URLError \($0.rawValue)" } ?? $0.label, 1) }, uniquingKeysWith: +),
            took: took,
            schedule: .seconds(Double(gets - limiter.policy.burst) / limiter.policy.rate), tokenRequests: api.tokenRequestCount,
            sent: api.apiRequests.count, unauthorized: api.unauthorizedCount, charged: passes.charged, refunded: passes.refunded)
        if ParityLog.isVerbose {
            print(
                "[stack] \(gets) GETs, \(tokenLifetime) s tokens, \(door): \(figures.labels) in \(took) (schedule \(figures.schedule)); "
                    + "\(figures.tokenRequests) token requests, \(figures.unauthorized) 401s; limiter charged \(passes.charged), "
                    + "gave back \(passes.refunded), \(figures.sent) sent")
        }
        return figures
    }
}
