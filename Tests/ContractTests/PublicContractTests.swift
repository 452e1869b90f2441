import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
import URLTaskManager  // not @testable: what is built here, an app could build
import URLTaskResilience

/// What a part of an app's own needs to do what the built-in resilience parts do: publish typed
/// decisions (``DecisionEvents``) and keep state per host as URLSession pools connections
/// (``URLOrigin``), on public API alone. The parts below are a third party's.
final class PublicContractTests: XCTestCase {
    /// A per-host failure counter, as an app could write it: the interceptor side says what is
    /// sent (only when someone listens), the observer side counts each outcome against its origin
    /// (the manager finds the observer in the interceptor).
    // DocC host failure counter: begin
    final class HostFailureCounter: URLTaskInterceptor, URLTaskOutcomeObserver, @unchecked Sendable {  // `failures` is guarded by `lock`.
        enum Decision: Sendable, Equatable {
            case sending(URLOrigin)
            case failed(URLOrigin, failures: Int)
            case succeeded(URLOrigin)
        }

        let events = DecisionEvents<Decision>()
        private let lock = NSLock()
        private var failures: [URLOrigin: Int] = [:]

        func failures(of url: URL) -> Int { URLOrigin(url).map { origin in lock.withLock { failures[origin] ?? 0 } } ?? 0 }

        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            if events.isListening, let origin = URLOrigin(task.request.url) { events.emit(.sending(origin)) }
            return .execute
        }

        func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
            guard let origin = URLOrigin(task.request.url) else { return }
            guard (outcome.statusCode ?? 500) >= 500 else {
                events.emit(.succeeded(origin))
                return
            }
            let count = lock.withLock {
                failures[origin, default: 0] += 1
                return failures[origin, default: 0]
            }
            events.emit(.failed(origin, failures: count))
        }
    }
    // DocC host failure counter: end

    /// A metrics observer, as an app could write it: neither an interceptor nor a reactor.
    // DocC status counter: begin
    final class StatusCounter: URLTaskOutcomeObserver, @unchecked Sendable {  // `counts` is guarded by `lock`.
        private let lock = NSLock()
        private var counts: [Int: Int] = [:]

        var snapshot: [Int: Int] { lock.withLock { counts } }

        func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
            guard let status = outcome.statusCode else { return }
            lock.withLock { counts[status, default: 0] += 1 }
        }
    }
    // DocC status counter: end

    /// Given on its own, the metrics observer counts every attempt (the 503s the retry takes
    /// too) by the time the caller has its answer, beside the breaker found among the
    /// interceptors.
    func testAMetricsObserverGivenOnItsOwnCountsEveryAttempt() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let calls = Locked(0)
        server.route("/flaky") { _ in
            calls.update {
                $0 += 1; return $0
            } < 3 ? ServerResponse(status: 503, headers: ["Retry-After": "0"]) : .text("ok")
        }
        let metrics = StatusCounter()
        let breaker = CircuitBreaker()
        // DocC observers: begin
        let manager = URLTaskManager(interceptors: [breaker], reactors: [RetryReactor()], observers: [metrics])
        // DocC observers: end
        defer { manager.invalidateAndCancel() }

        let (data, _) = try await manager.session.data(from: server.url("/flaky"))

        XCTAssertEqual(String(decoding: data, as: UTF8.self), "ok")
        XCTAssertEqual(metrics.snapshot, [503: 2, 200: 1])
        XCTAssertFalse(breaker.isOpen(for: server.url("/flaky")))
    }

    /// Each outcome is published, in order, to a reader subscribed before; two ports of one
    /// host are two origins; the streams end when the part finishes them.
    func testAThirdPartyPerHostCounterPublishesItsDecisions() async throws {
        let first = try LoopbackServer()
        let second = try LoopbackServer()
        defer {
            first.shutdown()
            second.shutdown()
        }
        for server in [first, second] {
            server.route("/fail") { _ in .status(503) }
            server.route("/ok") { _ in .text("fine") }
        }
        let counter = HostFailureCounter()
        XCTAssertFalse(counter.events.isListening, "nobody subscribed yet")
        let reader = counter.events.subscribe()
        XCTAssertTrue(counter.events.isListening)
        let manager = URLTaskManager(interceptors: [counter])

        for url in [first.url("/fail"), first.url("/fail"), second.url("/fail"), first.url("/ok")] {
            _ = try? await manager.session.data(for: URLRequest(url: url))
        }
        counter.events.finish()
        var received: [HostFailureCounter.Decision] = []
        for await decision in reader { received.append(decision) }

        let a = try XCTUnwrap(URLOrigin(first.url("/")))
        let b = try XCTUnwrap(URLOrigin(second.url("/")))
        XCTAssertNotEqual(a, b, "another port is another origin")
        XCTAssertEqual(a.description, "http://127.0.0.1:\(first.port)")
        XCTAssertEqual(
            received,
            [
                .sending(a), .failed(a, failures: 1), .sending(a), .failed(a, failures: 2), .sending(b), .failed(b, failures: 1),
                .sending(a), .succeeded(a),
            ])
        XCTAssertEqual(counter.failures(of: first.url("/other")), 2)
        XCTAssertEqual(counter.failures(of: second.url("/fail")), 1)
        XCTAssertFalse(counter.events.isListening, "the finished stream let go of its reader")
    }

    /// A reader subscribed later sees only what is emitted after it; one that stops reading
    /// stops being a listener; the streams end when the owner is released.
    func testReadersEachGetTheirOwnStreamAndTheStreamsEndWithTheOwner() async throws {
        var events: DecisionEvents<Int>? = DecisionEvents<Int>()
        events?.emit(0)  // nobody reads: goes nowhere
        let early = events!.subscribe()
        events?.emit(1)
        let late = events!.subscribe(bufferingNewest: 1)
        events?.emit(2)
        events?.emit(3)
        events = nil
        var fromEarly: [Int] = []
        for await value in early { fromEarly.append(value) }
        var fromLate: [Int] = []
        for await value in late { fromLate.append(value) }
        XCTAssertEqual(fromEarly, [1, 2, 3])
        XCTAssertEqual(fromLate, [3], "a reader that fell behind keeps its newest events")
    }

    /// What counts as one origin: scheme and host ignoring case, the default port made
    /// explicit; paths, queries and users do not count.
    func testURLOriginEquality() throws {
        func origin(_ string: String) -> URLOrigin? { URLOrigin(URL(string: string)) }
        XCTAssertEqual(origin("http://H:80/a"), origin("http://h/b"))
        XCTAssertEqual(origin("HTTPS://Example.com/x?q=1"), origin("https://example.com:443/y"))
        XCTAssertEqual(origin("https://user@example.com/x"), origin("https://example.com"))
        XCTAssertNotEqual(origin("http://example.com"), origin("https://example.com"))
        XCTAssertNotEqual(origin("http://example.com"), origin("http://example.com:8080"))
        XCTAssertNotEqual(origin("https://example.com"), origin("https://api.example.com"))
        XCTAssertEqual(origin("http://H:80/a")?.description, "http://h:80")
        XCTAssertEqual(origin("https://Example.com")?.description, "https://example.com:443")
        XCTAssertEqual(origin("ws://example.com/socket")?.description, "ws://example.com:0")
        XCTAssertNil(origin("/relative/path"))
        XCTAssertNil(URLOrigin(nil))
        XCTAssertEqual(Set([origin("http://h/1"), origin("http://H:80/2"), origin("http://h:81/3")]).count, 2)
    }
}
