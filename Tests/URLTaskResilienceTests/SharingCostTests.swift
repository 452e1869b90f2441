import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2
import URLTaskResilience
import TestSupport

/// Issue 38, item 4: requests that send nothing cost nothing. A request that joins a shared
/// transfer takes no rate-limit token, and a different `timeoutInterval` does not stop two
/// requests sharing; each caller still leaves at its own timeout. Over real HTTP on 127.0.0.1.
final class SharingCostTests: XCTestCase {
    typealias Kit = ResilienceTestKit

    private static var verbose: Bool { ParityLog.isVerbose }

    private static func ms(_ duration: Duration) -> Int { Int(duration / .milliseconds(1)) }

    /// The README's `recommendedManager(auth:)`, part for part (Sources/Examples/Resilience.swift),
    /// with a token that stays valid: no refresh is involved.
    private static func recommendedManager(origin: URL) -> (URLTaskManager, RateLimiter, CoalescingInterceptor) {
        let auth = OAuth2Authenticator(
            origins: [origin],
            store: InMemoryCredentialStore(
                OAuth2Credential(accessToken: "token", refreshToken: "r", expiresAt: Date().addingTimeInterval(3_600))),
            refresh: { _ in OAuth2Credential(accessToken: "token", refreshToken: "r", expiresAt: Date().addingTimeInterval(3_600)) })
        let breaker = CircuitBreaker(policy: .init(exempts: { auth.isTokenRequest($0) }))
        let limiter = RateLimiter(policy: .init(rate: 20, burst: 10))
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(
            interceptors: [breaker, BearerInterceptor(authenticator: auth), coalescing, limiter],
            reactors: [OAuth2RefreshReactor(authenticator: auth), OfflineHold(), RetryReactor()]
        )
        return (manager, limiter, coalescing)
    }

    /// The figure: 20 identical concurrent GETs of an answer that takes the server 300 ms,
    /// through the recommended stack, reach the server at most twice and all end within 1.0 s
    /// (before: 3 server hits, 1 s: the 10 requests beyond the burst waited for tokens that the
    /// 9 listeners had taken). The listeners' tokens went back: 10 GETs of another path of the
    /// same host, made right after, all go without waiting.
    func testTwentyIdenticalGETsThroughTheRecommendedStackReachTheServerOnceAndTakeNoTokens() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/catalog") { _ in ServerResponse.text("catalog").with { $0.delay = .milliseconds(300) } }
        server.route("/other") { _ in .text("other") }
        let (manager, limiter, coalescing) = Self.recommendedManager(origin: server.baseURL)
        let limits = Kit.Events(limiter.events())
        let sharing = Kit.Events(coalescing.events())

        let started = ContinuousClock.now
        let results = await withTaskGroup(of: Fetched.self) { group in
            for _ in 0..<20 { group.addTask { await fetched(manager.session, URLRequest(url: server.url("/catalog"))) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        let elapsed = started.duration(to: .now)
        let hits = server.requestCount(path: "/catalog")
        let delayed = limits.count { if case .delayed = $0 { return true } else { return false } }
        let joined = sharing.count { if case .joined = $0 { return true } else { return false } }
        if Self.verbose {
            print("20 identical GETs: \(hits) server hit(s), \(Self.ms(elapsed)) ms, \(delayed) waited for a token, \(joined) joined")
        }
        XCTAssertEqual(results.filter { $0.text == "catalog" }.count, 20, results.map(\.label).joined(separator: ", "))
        XCTAssertLessThanOrEqual(hits, 2, "listeners send nothing")
        XCTAssertLessThan(elapsed, .milliseconds(1_000), "no caller waits for a token a listener took")

        // Whatever the listeners took was given back: the burst is there for the next requests.
        let before = limits.count { if case .delayed = $0 { return true } else { return false } }
        let others = await withTaskGroup(of: Fetched.self) { group in
            for n in 0..<10 { group.addTask { await fetched(manager.session, URLRequest(url: server.url("/other?n=\(n)"))) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        XCTAssertEqual(others.filter { $0.text == "other" }.count, 10)
        XCTAssertEqual(
            limits.count { if case .delayed = $0 { return true } else { return false } }, before,
            "10 requests right after go without waiting: the listeners took no token")
    }

    /// The same GET with two different timeouts is one transfer (before: two server hits), and
    /// each caller gets the whole answer.
    func testTheSameGETWithAnotherTimeoutSharesTheTransfer() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = Gate()
        let body = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 13) })
        server.route("/doc") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return ServerResponse(body: .data(body))
        }
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(interceptors: [coalescing])
        let events = Kit.Events(coalescing.events())
        var short = URLRequest(url: server.url("/doc"))
        short.timeoutInterval = 5
        var long = URLRequest(url: server.url("/doc"))
        long.timeoutInterval = 10
        let first = Task { await fetched(manager.session, short) }
        try await events.wait("the first started") { if case .started = $0 { return true } else { return false } }
        let second = Task { await fetched(manager.session, long) }
        try await events.wait("the other timeout joined") { if case .joined = $0 { return true } else { return false } }
        gate.open()
        for result in [await first.value, await second.value] {
            guard case .response(200, _, let received) = result else { return XCTFail(result.label) }
            XCTAssertTrue(received == body, "the whole answer")
        }
        XCTAssertEqual(server.requestCount(path: "/doc"), 1)
    }

    /// A listener whose timeout is shorter than the answer's delay leaves at its own timeout with
    /// the `URLError` a plain session gives, and the transfer goes on for the sender, which gets
    /// the answer: one server hit.
    func testAListenerWithAShorterTimeoutLeavesAtItsOwnAndTheSenderGetsTheAnswer() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = Gate()
        defer { gate.open() }
        server.route("/slow") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return .text("done")
        }
        server.route("/plain") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return .text("done")
        }
        // What a plain session gives when one second passes without an answer.
        var plainRequest = URLRequest(url: server.url("/plain"))
        plainRequest.timeoutInterval = 1
        let plain = await fetched(URLSession(configuration: .ephemeral), plainRequest)

        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(interceptors: [coalescing])
        let events = Kit.Events(coalescing.events())
        var patient = URLRequest(url: server.url("/slow"))
        patient.timeoutInterval = 10
        var impatient = URLRequest(url: server.url("/slow"))
        impatient.timeoutInterval = 1
        let sender = Task { await fetched(manager.session, patient) }
        try await events.wait("the patient one started") { if case .started = $0 { return true } else { return false } }
        let started = ContinuousClock.now
        let listener = await fetched(manager.session, impatient)
        let waited = started.duration(to: .now)
        if Self.verbose { print("the impatient listener left after \(Self.ms(waited)) ms: \(listener.label)") }
        XCTAssertEqual(
            events.count { if case .joined = $0 { return true } else { return false } }, 1, "it listened to the patient one's transfer")
        XCTAssertEqual(listener.urlErrorCode, .timedOut)
        XCTAssertEqual(listener.urlErrorCode, plain.urlErrorCode)
        XCTAssertEqual(
            Set(((listener.error as? URLError)?.userInfo ?? [:]).keys), Set(((plain.error as? URLError)?.userInfo ?? [:]).keys),
            "the same error as a plain session's")
        XCTAssertGreaterThanOrEqual(waited, .milliseconds(900), "at its own timeout")
        XCTAssertLessThan(waited, .seconds(5), "not the sender's")

        gate.open()
        let answered = await sender.value
        XCTAssertEqual(answered.text, "done", "the transfer went on for the sender")
        XCTAssertEqual(server.requestCount(path: "/slow"), 1)
        XCTAssertEqual(events.count { if case .left(_, true) = $0 { return true } else { return false } }, 0)
    }

    /// The other order: the sender's timeout is the shorter one. It leaves at its own timeout;
    /// the listener, willing to wait longer, is not failed then and gets the answer: one hit.
    func testASenderWithAShorterTimeoutLeavesAndTheListenerGetsTheAnswer() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = Gate()
        defer { gate.open() }
        server.route("/slow") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return .text("done")
        }
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(interceptors: [coalescing])
        let events = Kit.Events(coalescing.events())
        var impatient = URLRequest(url: server.url("/slow"))
        impatient.timeoutInterval = 1
        var patient = URLRequest(url: server.url("/slow"))
        patient.timeoutInterval = 10
        let started = ContinuousClock.now
        let sender = Task { await fetched(manager.session, impatient) }
        try await events.wait("the impatient one started") { if case .started = $0 { return true } else { return false } }
        let listener = Task { await fetched(manager.session, patient) }
        try await events.wait("the patient one joined") { if case .joined = $0 { return true } else { return false } }
        let left = await sender.value
        let waited = started.duration(to: .now)
        XCTAssertEqual(left.urlErrorCode, .timedOut)
        XCTAssertGreaterThanOrEqual(waited, .milliseconds(900), "at its own timeout")
        try await events.wait("the sender left, the transfer went on") {
            if case .left(_, false) = $0 { return true } else { return false }
        }

        gate.open()
        let answered = await listener.value
        XCTAssertEqual(answered.text, "done", "not failed by the sender's timeout")
        XCTAssertEqual(server.requestCount(path: "/slow"), 1)
    }
}
