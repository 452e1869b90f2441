import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskResilience
import XCTest
import TestSupport

/// ``RetryReactor`` and ``RateLimiter`` read one `Retry-After` alike (``RetryAfter``), over HTTP.
/// In 0.2.0 an overflowing integer made the reactor wait its cap while the limiter ignored it,
/// and an HTTP-date in the year -5000 made the reactor wait its cap.
final class RetryAfterAgreementTests: XCTestCase {
    private var server: LoopbackServer!

    override func setUpWithError() throws {
        server = try LoopbackServer()
    }

    override func tearDown() {
        server.shutdown()
    }

    /// A 429 once, with `retryAfter`, then "ok".
    private func route(_ path: String, retryAfter: String) {
        let calls = CallCounter()
        server.route(path) { _ in
            calls.increment() == 1 ? ServerResponse.status(429).with { $0.headers["Retry-After"] = retryAfter } : .text("ok")
        }
    }

    private func manager(cap: Duration, limiter: RateLimiter) -> URLTaskManager {
        let retry = RetryReactor(
            policy: RetryPolicy(backoff: .init(base: .milliseconds(10), jitter: 0), maximumRetryAfter: cap))
        return URLTaskManager(interceptors: [limiter], reactors: [retry])
    }

    /// An integer beyond `Int64`: both wait their cap (300 ms here), and the limiter says so.
    func testAnOverflowingIntegerIsEachPartsCap() async throws {
        route("/huge", retryAfter: "99999999999999999999")
        let limiter = RateLimiter(policy: .init(rate: 1_000, burst: 10, maximumPause: .milliseconds(300)))
        let paused = Latch<Duration>("the limiter paused the host")
        let reader = Task {
            for await event in limiter.events() {
                if case .paused(_, let duration, _) = event { _ = paused.fulfill(duration) }
            }
        }
        defer { reader.cancel() }
        let manager = manager(cap: .milliseconds(300), limiter: limiter)
        defer { manager.invalidateAndCancel() }
        let result = await fetched(manager.session, URLRequest(url: server.url("/huge")))
        XCTAssertEqual(result.text, "ok")
        let pause = try await paused.wait(timeout: .seconds(5))
        XCTAssertEqual(pause, .milliseconds(300), "the limiter's cap")
        let requests = server.requests(path: "/huge")
        XCTAssertEqual(requests.count, 2)
        XCTAssertGreaterThanOrEqual(requests[0].arrivedAt.duration(to: requests[1].arrivedAt), .milliseconds(290), "the reactor's cap")
    }

    /// A date in the year -5000 is no `Retry-After`: the reactor backs off (10 ms), the limiter
    /// does not pause (its cap, 5 s, would delay the retry).
    func testAnAbsurdDateIsRefusedByBoth() async throws {
        for (index, value) in ["Sun, 06 Nov -5000 08:49:37 GMT", "Tue, 31 Feb 2095 00:00:00 GMT", "-30"].enumerated() {
            let path = "/absurd\(index)"
            route(path, retryAfter: value)
            let limiter = RateLimiter(policy: .init(rate: 1_000, burst: 10, maximumPause: .seconds(5)))
            let manager = manager(cap: .seconds(5), limiter: limiter)
            defer { manager.invalidateAndCancel() }
            let result = await fetched(manager.session, URLRequest(url: server.url(path)))
            XCTAssertEqual(result.text, "ok", value)
            let requests = server.requests(path: path)
            XCTAssertEqual(requests.count, 2, value)
            XCTAssertLessThan(requests[0].arrivedAt.duration(to: requests[1].arrivedAt), .seconds(2), "waited a cap for \(value)")
        }
    }
}
