import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskResilience
import TestSupport

/// ``RetryReactor`` over real HTTP, and ``RetryPolicy``'s arithmetic.
final class RetryReactorTests: XCTestCase {
    typealias Kit = ReactorTestKit

    private var server: LoopbackServer!

    override func setUp() async throws {
        server = try LoopbackServer()
    }

    override func tearDown() async throws {
        server.shutdown()
    }

    /// Fast, deterministic back-off for tests that are not about timing.
    private static let quick = RetryPolicy(backoff: .init(base: .milliseconds(10), maximum: .milliseconds(50), jitter: 0))

    /// Answers `first` to the first request and 200 "ok" afterwards.
    private func route(_ path: String, first: ServerResponse) {
        let calls = Kit.Counter()
        server.route(path) { _ in calls.increment() == 1 ? first : .text("ok") }
    }

    private func gapBetweenAttempts(_ path: String) throws -> Duration {
        let requests = server.requests(path: path)
        XCTAssertEqual(requests.count, 2)
        guard requests.count == 2 else { throw XCTSkip("no second attempt") }
        return requests[0].arrivedAt.duration(to: requests[1].arrivedAt)
    }

    // MARK: Over HTTP

    func testA503WithRetryAfterOneSecondIsRetriedAboutASecondLaterAndSucceeds() async throws {
        route("/busy", first: ServerResponse(status: 503, headers: ["Retry-After": "1"]))
        let manager = URLTaskManager(reactors: [RetryReactor()])
        let result = await Kit.fetch(manager.session, server.url("/busy"))
        XCTAssertEqual(result.status, 200)
        XCTAssertEqual(result.text, "ok")
        let gap = try gapBetweenAttempts("/busy")
        XCTAssertGreaterThanOrEqual(gap, .milliseconds(900))
        XCTAssertLessThan(gap, .seconds(3))
    }

    func testAnHTTPDateRetryAfterIsHonoured() async throws {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        // Whole seconds: two seconds from now is between one and two seconds away.
        let date = formatter.string(from: Date().addingTimeInterval(2))
        route("/dated", first: ServerResponse(status: 429, headers: ["Retry-After": date]))
        let manager = URLTaskManager(reactors: [RetryReactor()])
        let result = await Kit.fetch(manager.session, server.url("/dated"))
        XCTAssertEqual(result.status, 200)
        let gap = try gapBetweenAttempts("/dated")
        XCTAssertGreaterThanOrEqual(gap, .milliseconds(900))
        XCTAssertLessThan(gap, .seconds(3))
    }

    func testAPOSTIsNotRetriedByDefault() async throws {
        route("/order", first: .text("busy", status: 503))
        let manager = URLTaskManager(reactors: [RetryReactor(policy: Self.quick)])
        var request = URLRequest(url: server.url("/order"))
        request.httpMethod = "POST"
        request.httpBody = Data("pay once".utf8)
        let result = await Kit.fetch(manager.session, request)
        XCTAssertEqual(result.status, 503)
        XCTAssertEqual(result.text, "busy")
        XCTAssertEqual(server.requestCount(path: "/order"), 1)
    }

    func testAPUTIsRetriedWithItsBody() async throws {
        route("/doc", first: .status(502))
        let manager = URLTaskManager(reactors: [RetryReactor(policy: Self.quick)])
        var request = URLRequest(url: server.url("/doc"))
        request.httpMethod = "PUT"
        request.httpBody = Data("the document".utf8)
        let result = await Kit.fetch(manager.session, request)
        XCTAssertEqual(result.status, 200)
        XCTAssertEqual(server.requests(path: "/doc").map(\.bodyText), ["the document", "the document"])
    }

    func testRetriesStopAtTheAttemptLimitAndTheCallerGetsTheLastResponse() async throws {
        let calls = Kit.Counter()
        server.route("/down") { _ in .text("attempt \(calls.increment())", status: 500) }
        let manager = URLTaskManager(reactors: [RetryReactor(policy: Self.quick)])
        let result = await Kit.fetch(manager.session, server.url("/down"))
        XCTAssertEqual(result.status, 500)
        XCTAssertEqual(result.text, "attempt 3", "the last response, body included")
        XCTAssertEqual(server.requestCount(path: "/down"), 3)
    }

    func testARetryableTransportErrorIsRetriedThenDeliveredAsIs() async throws {
        let closed = try LoopbackServer()
        let url = closed.url("/gone")
        closed.shutdown()
        let attempts = Kit.Counter()
        let manager = URLTaskManager(interceptors: [CountAttempts(counter: attempts)], reactors: [RetryReactor(policy: Self.quick)])
        let result = await Kit.fetch(manager.session, url)
        XCTAssertEqual(result.urlErrorCode, .cannotConnectToHost, result.label)
        XCTAssertEqual(attempts.value, 3)
    }

    func testCancellingDuringARetryWaitEndsAtOnceWithCancelled() async throws {
        server.route("/later") { _ in ServerResponse(status: 503, headers: ["Retry-After": "30"]) }
        let manager = URLTaskManager(reactors: [RetryReactor()])
        let task = Kit.start(manager.session, server.url("/later"))
        _ = try await server.waitForRequests(path: "/later", count: 1)
        let cancelled = ContinuousClock.now
        task.cancel()
        let result = await task.value
        XCTAssertTrue(Kit.isCancelled(result), result.label)
        XCTAssertLessThan(cancelled.duration(to: .now), .seconds(1))
        XCTAssertEqual(server.requestCount(path: "/later"), 1)
    }

    private struct CountAttempts: URLTaskInterceptor {
        let counter: Kit.Counter

        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            counter.increment()
            return .execute
        }
    }

    // MARK: The policy

    private func response(_ status: Int, _ headers: [String: String] = [:]) -> URLTaskOutcome {
        .response(
            HTTPURLResponse(url: URL(string: "https://example.com")!, statusCode: status, httpVersion: "HTTP/1.1", headerFields: headers)!)
    }

    private func request(_ method: String) -> URLRequest {
        var request = URLRequest(url: URL(string: "https://example.com")!)
        request.httpMethod = method
        return request
    }

    func testWhatIsRetriedByDefault() {
        let policy = RetryPolicy()
        for status in [408, 429, 500, 502, 503, 504] {
            XCTAssertTrue(policy.shouldRetry(request("GET"), attempt: 1, after: response(status)), "\(status)")
        }
        for status in [200, 304, 400, 401, 403, 404, 501] {
            XCTAssertFalse(policy.shouldRetry(request("GET"), attempt: 1, after: response(status)), "\(status)")
        }
        for method in ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE", "get"] {
            XCTAssertTrue(policy.shouldRetry(request(method), attempt: 1, after: response(503)), method)
        }
        for method in ["POST", "PATCH", "CONNECT"] {
            XCTAssertFalse(policy.shouldRetry(request(method), attempt: 1, after: response(503)), method)
        }
        for code: URLError.Code in [
            .timedOut, .networkConnectionLost, .cannotConnectToHost, .notConnectedToInternet, .dnsLookupFailed, .cannotFindHost,
        ] {
            XCTAssertTrue(policy.shouldRetry(request("GET"), attempt: 1, after: .failure(URLError(code))), "\(code)")
        }
        for code: URLError.Code in [.cancelled, .badURL, .secureConnectionFailed, .serverCertificateUntrusted] {
            XCTAssertFalse(policy.shouldRetry(request("GET"), attempt: 1, after: .failure(URLError(code))), "\(code)")
        }
        XCTAssertTrue(policy.shouldRetry(request("GET"), attempt: 2, after: response(503)))
        XCTAssertFalse(policy.shouldRetry(request("GET"), attempt: 3, after: response(503)), "3 attempts in all")
        XCTAssertTrue(RetryPolicy(retryableMethods: ["POST"]).shouldRetry(request("POST"), attempt: 1, after: response(503)))
    }

    func testBackoffGrowsIsCappedAndJitterOnlyShortens() {
        let backoff = RetryPolicy.Backoff(base: .milliseconds(100), multiplier: 2, maximum: .milliseconds(500), jitter: 0.5)
        XCTAssertEqual(backoff.delay(forRetry: 1, random: 0), .milliseconds(100))
        XCTAssertEqual(backoff.delay(forRetry: 2, random: 0), .milliseconds(200))
        XCTAssertEqual(backoff.delay(forRetry: 3, random: 0), .milliseconds(400))
        XCTAssertEqual(backoff.delay(forRetry: 4, random: 0), .milliseconds(500))
        XCTAssertEqual(backoff.delay(forRetry: 40, random: 0), .milliseconds(500))
        XCTAssertEqual(backoff.delay(forRetry: 2, random: 0.999_999).components.seconds, 0)
        XCTAssertGreaterThan(backoff.delay(forRetry: 2, random: 0.999_999), .milliseconds(100))
        let policy = RetryPolicy(backoff: backoff)
        for _ in 0..<100 {
            let delay = policy.delay(afterAttempt: 2, outcome: response(503))
            XCTAssertGreaterThan(delay, .milliseconds(100))
            XCTAssertLessThanOrEqual(delay, .milliseconds(200))
        }
    }

    func testRetryAfterWinsAndIsCapped() {
        let now = Date(timeIntervalSince1970: 784_111_777)  // Sun, 06 Nov 1994 08:49:37 GMT
        let policy = RetryPolicy(maximumRetryAfter: .seconds(10))
        XCTAssertEqual(policy.delay(afterAttempt: 1, outcome: response(503, ["Retry-After": "3"]), now: now), .seconds(3))
        XCTAssertEqual(policy.delay(afterAttempt: 1, outcome: response(503, ["Retry-After": "3600"]), now: now), .seconds(10))
        XCTAssertEqual(
            policy.delay(afterAttempt: 1, outcome: response(429, ["Retry-After": "Sun, 06 Nov 1994 08:49:42 GMT"]), now: now), .seconds(5))
        let ignoring = RetryPolicy(backoff: .init(base: .milliseconds(100), jitter: 0), honorsRetryAfter: false)
        XCTAssertEqual(ignoring.delay(afterAttempt: 1, outcome: response(503, ["Retry-After": "3"]), now: now), .milliseconds(100))
    }

    func testRetryAfterParsesSecondsAndEveryHTTPDateForm() {
        let now = Date(timeIntervalSince1970: 784_111_777)  // Sun, 06 Nov 1994 08:49:37 GMT
        XCTAssertEqual(RetryPolicy.retryAfter("120", now: now), .seconds(120))
        XCTAssertEqual(RetryPolicy.retryAfter(" 0 ", now: now), .zero)
        XCTAssertEqual(RetryPolicy.retryAfter("Sun, 06 Nov 1994 08:49:47 GMT", now: now), .seconds(10), "IMF-fixdate")
        XCTAssertEqual(RetryPolicy.retryAfter("Sunday, 06-Nov-94 08:49:47 GMT", now: now), .seconds(10), "RFC 850")
        XCTAssertEqual(RetryPolicy.retryAfter("Sun Nov  6 08:49:47 1994", now: now), .seconds(10), "asctime")
        XCTAssertEqual(RetryPolicy.retryAfter("Sun, 06 Nov 1994 08:00:00 GMT", now: now), .zero, "a past date: no wait")
        XCTAssertNil(RetryPolicy.retryAfter("-5", now: now))
        XCTAssertNil(RetryPolicy.retryAfter("1.5", now: now))
        XCTAssertNil(RetryPolicy.retryAfter("soon", now: now))
        XCTAssertNil(RetryPolicy.retryAfter("", now: now))
    }
}
