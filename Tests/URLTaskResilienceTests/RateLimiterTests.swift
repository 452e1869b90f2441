import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskResilience
import TestSupport

/// ``RateLimiter`` over real HTTP on 127.0.0.1, with short real durations and event waits.
final class RateLimiterTests: XCTestCase {
    typealias Kit = ResilienceTestKit

    /// 5 requests at 10 a second, burst 1: sent in arrival order, about 100 ms apart.
    func testRequestsGoInArrivalOrderAtTheRate() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/r") { _ in .text("ok") }
        let limiter = RateLimiter(policy: .init(rate: 10, burst: 1))
        let events = Kit.Events(limiter.events())
        let manager = URLTaskManager(interceptors: [limiter])
        var calls: [Task<Fetched, Never>] = []
        let started = ContinuousClock.now
        for index in 0..<5 {
            var request = URLRequest(url: server.url("/r?i=\(index)"))
            request.setValue("\(index)", forHTTPHeaderField: "X-Index")
            calls.append(Task { await fetched(manager.session, request) })
            // The next one arrives only after this one is in line (or sent).
            if index == 0 {
                _ = try await server.waitForRequests(path: "/r", count: 1)
            } else {
                try await events.wait("in line", count: index) { if case .delayed = $0 { return true } else { return false } }
            }
        }
        for call in calls {
            let result = await call.value
            XCTAssertEqual(result.status, 200)
        }
        let elapsed = started.duration(to: .now)
        let requests = server.requests(path: "/r")
        XCTAssertEqual(requests.map { $0.headers["x-index"] }, ["0", "1", "2", "3", "4"])
        // The k-th request leaves no earlier than k tokens' time after the first arrived (a
        // lower bound that load cannot break: a request may reach the server late, never early).
        for (index, request) in requests.enumerated() {
            XCTAssertGreaterThanOrEqual(started.duration(to: request.arrivedAt), .milliseconds(100 * index - 5), "request \(index) early")
        }
        XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(380))
        try await events.wait("4 released", count: 4) { if case .released = $0 { return true } else { return false } }
        XCTAssertEqual(events.count { if case .released = $0 { return true } else { return false } }, 4)
    }

    /// A 429 with `Retry-After: 1` pauses that host for a second; another host goes on.
    func testRetryAfterPausesOnlyThatHost() async throws {
        let busy = try LoopbackServer()
        let other = try LoopbackServer()
        defer {
            busy.shutdown()
            other.shutdown()
        }
        let first = ManagedFlag(true)
        busy.route("/b") { _ in
            if first.value {
                first.value = false
                return ServerResponse(status: 429, headers: ["Retry-After": "1"])
            }
            return .text("ok")
        }
        other.route("/o") { _ in .text("other") }
        let limiter = RateLimiter(policy: .init(rate: 100, burst: 10))
        let events = Kit.Events(limiter.events())
        let manager = URLTaskManager(interceptors: [limiter])
        let refused = await fetched(manager.session, URLRequest(url: busy.url("/b")))
        XCTAssertEqual(refused.status, 429, "the limiter only observes: the caller gets the 429")
        try await events.wait("paused") { if case .paused(_, .seconds(1), 429) = $0 { return true } else { return false } }

        let pausedAt = ContinuousClock.now
        let waiting = Task { await fetched(manager.session, URLRequest(url: busy.url("/b"))) }
        let elsewhere = await fetched(manager.session, URLRequest(url: other.url("/o")))
        XCTAssertEqual(elsewhere.text, "other")
        let resumed = await waiting.value
        XCTAssertEqual(resumed.text, "ok")
        XCTAssertGreaterThan(pausedAt.duration(to: .now), .milliseconds(850), "Retry-After honoured")
        let otherArrival = try XCTUnwrap(other.requests(path: "/o").first?.arrivedAt)
        let resumedArrival = try XCTUnwrap(busy.requests(path: "/b").last?.arrivedAt)
        XCTAssertLessThan(otherArrival, resumedArrival, "another host is not paused")
    }

    /// The wait counts toward `timeoutInterval` (URLError.timedOut), and a cancelled waiter leaves
    /// at once without losing the place of those behind it.
    func testWaitingTimesOutAtTimeoutIntervalAndCancellationIsImmediate() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/s") { request in .text(request.headers["x-name"] ?? "-") }
        // One token every 2 seconds: every wait below is far shorter than a turn.
        let limiter = RateLimiter(policy: .init(rate: 0.5, burst: 1))
        let events = Kit.Events(limiter.events())
        let manager = URLTaskManager(interceptors: [limiter])
        func request(_ name: String, timeout: TimeInterval = 10) -> URLRequest {
            var request = URLRequest(url: server.url("/s"))
            request.timeoutInterval = timeout
            request.setValue(name, forHTTPHeaderField: "X-Name")
            return request
        }
        let first = await fetched(manager.session, request("first"))
        XCTAssertEqual(first.text, "first")

        let started = ContinuousClock.now
        let impatient = await fetched(manager.session, request("impatient", timeout: 0.2))
        XCTAssertEqual(impatient.urlErrorCode, .timedOut)
        XCTAssertLessThan(started.duration(to: .now), .milliseconds(1_500), "failed at its timeout, not at its turn")

        let cancelled = Task { await fetched(manager.session, request("cancelled")) }
        try await events.wait("in line", count: 2) { if case .delayed = $0 { return true } else { return false } }
        let next = Task { await fetched(manager.session, request("next")) }
        try await events.wait("behind it", count: 3) { if case .delayed = $0 { return true } else { return false } }
        let cancelledAt = ContinuousClock.now
        cancelled.cancel()
        let cancelledResult = await cancelled.value
        XCTAssertEqual(cancelledResult.urlErrorCode, .cancelled)
        XCTAssertLessThan(cancelledAt.duration(to: .now), .milliseconds(1_000), "cancellation while waiting is immediate, not at its turn")
        let nextResult = await next.value
        XCTAssertEqual(nextResult.text, "next")
        XCTAssertEqual(server.requests(path: "/s").map { $0.headers["x-name"] }, ["first", "next"])
    }
}
