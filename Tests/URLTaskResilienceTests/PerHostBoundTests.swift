import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest

@testable import URLTaskManager
@testable import URLTaskResilience
import TestSupport

/// A rate limiter and a circuit breaker keep state for at most `maximumHosts` hosts, over real
/// HTTP (each server on its own port is a host): past the bound the least recently used host is
/// forgotten and starts afresh, which is the documented trade-off; a host with waiting requests
/// is never forgotten. (0.2.0 kept every host forever: 200,000 hosts, +147 MiB; the figures are
/// the `hosts` benchmark's.)
final class PerHostBoundTests: XCTestCase {
    private var servers: [LoopbackServer] = []

    override func setUpWithError() throws {
        servers = try (0..<4).map { _ in try LoopbackServer() }
        for server in servers {
            server.route("/ok") { _ in .text("ok") }
            server.route("/fail") { _ in .status(503) }
        }
    }

    override func tearDown() {
        for server in servers { server.shutdown() }
        servers = []
    }

    /// A bucket that would make the next request wait 1,000 s is forgotten once two other hosts
    /// were used after it: the request goes at once, with a fresh bucket. Until then, the host's
    /// own bucket holds it.
    func testTheLimiterForgetsTheLeastRecentlyUsedHostPastItsBound() async throws {
        let limiter = RateLimiter(policy: .init(rate: 0.001, burst: 1, maximumQueueLength: 0, maximumHosts: 2))
        let manager = URLTaskManager(interceptors: [limiter])
        defer { manager.invalidateAndCancel() }
        let (a, b, c) = (servers[0], servers[1], servers[2])

        let first = await fetched(manager.session, URLRequest(url: a.url("/ok")))
        XCTAssertEqual(first.status, 200)
        let refused = await fetched(manager.session, URLRequest(url: a.url("/ok")))
        XCTAssertEqual(refused.taskError?.code, .rateLimitQueueFull, "the host's own bucket is empty: \(refused)")

        for server in [b, c] {
            let result = await fetched(manager.session, URLRequest(url: server.url("/ok")))
            XCTAssertEqual(result.status, 200)
        }
        XCTAssertLessThanOrEqual(limiter.rememberedHostCount, 2)
        let again = await fetched(manager.session, URLRequest(url: a.url("/ok")))
        XCTAssertEqual(again.status, 200, "the least recently used host was not forgotten: \(again)")
        XCTAssertEqual(a.requestCount(path: "/ok"), 2)
    }

    /// Failures of a host are forgotten with its circuit once more hosts than the bound failed
    /// after it: two failures 30 s apart in the window no longer open it. Within the bound they
    /// do.
    func testTheBreakerForgetsTheLeastRecentlyUsedCircuitPastItsBound() async throws {
        for (bound, opens) in [(4, true), (2, false)] {
            let breaker = CircuitBreaker(policy: .init(failureThreshold: 2, window: .seconds(60), maximumHosts: bound))
            let manager = URLTaskManager(interceptors: [breaker])
            defer { manager.invalidateAndCancel() }
            let (a, b, c) = (servers[0], servers[1], servers[2])
            _ = await fetched(manager.session, URLRequest(url: a.url("/fail")))
            for server in [b, c] { _ = await fetched(manager.session, URLRequest(url: server.url("/fail"))) }
            _ = await fetched(manager.session, URLRequest(url: a.url("/fail")))
            XCTAssertEqual(breaker.isOpen(for: a.url("/fail")), opens, "bound \(bound)")
            XCTAssertLessThanOrEqual(breaker.rememberedHostCount, bound)
        }
    }

    /// A host whose request waits in line is never forgotten, whatever the bound: the waiting
    /// request is released by its own bucket's timer, in order.
    func testAHostWithAWaitingRequestIsKeptPastTheBound() async throws {
        let limiter = RateLimiter(policy: .init(rate: 5, burst: 1, maximumHosts: 1))
        let events = ResilienceTestKit.Events(limiter.events())
        let manager = URLTaskManager(interceptors: [limiter])
        defer { manager.invalidateAndCancel() }
        let (a, b, c) = (servers[0], servers[1], servers[2])
        _ = await fetched(manager.session, URLRequest(url: a.url("/ok")))
        let waiting = Task { await fetched(manager.session, URLRequest(url: a.url("/ok"))) }
        try await events.wait("a request in line") { if case .delayed = $0 { return true } else { return false } }
        for server in [b, c] {
            let result = await fetched(manager.session, URLRequest(url: server.url("/ok")))
            XCTAssertEqual(result.status, 200)
        }
        let released = await waiting.value
        XCTAssertEqual(released.status, 200, "the waiting request was lost with its host")
        try await events.wait("released") { if case .released = $0 { return true } else { return false } }
    }
}
