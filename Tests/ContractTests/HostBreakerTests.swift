import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager  // not @testable: the breaker is built on what an app sees
import URLTaskResilience  // the built-in codes it is told apart from
import XCTest

/// The Writing interceptors article's circuit breaker, a third party's, over real HTTP.
final class HostBreakerTests: XCTestCase {
    /// A clock the test moves: the cool-down passes without waiting for it.
    final class TestClock: @unchecked Sendable {  // `offset` is guarded by `lock`.
        private let lock = NSLock()
        private let start = ContinuousClock.now
        private var offset = Duration.zero

        var now: ContinuousClock.Instant { lock.withLock { start + offset } }
        func advance(by duration: Duration) { lock.withLock { offset += duration } }
    }

    /// A server whose `/api` answers `status()` and counts its requests.
    private func server(hits: Locked<Int>, status: @escaping @Sendable () -> Int) throws -> LoopbackServer {
        let server = try LoopbackServer()
        server.route("/api") { _ in
            hits.update { $0 += 1 }
            return .text("answer", status: status())
        }
        return server
    }

    private func status(of session: URLSession, _ url: URL) async throws -> Int {
        let (_, response) = try await session.data(from: url)
        return (response as? HTTPURLResponse)?.statusCode ?? 0
    }

    private func refusal(of session: URLSession, _ url: URL) async -> HostBreaker.HostUnavailable? {
        do {
            _ = try await session.data(from: url)
            return nil
        } catch let error as URLTaskError where error.code == .hostUnavailable {
            return error.underlying as? HostBreaker.HostUnavailable
        } catch {
            XCTFail("expected a hostUnavailable URLTaskError, got \(error)")
            return nil
        }
    }

    func testItOpensAfterTheThresholdAndRefusesWithoutTheNetwork() async throws {
        let hits = Locked(0)
        let server = try server(hits: hits) { 503 }
        defer { server.shutdown() }
        let clock = TestClock()
        let breaker = HostBreaker(threshold: 3, coolDown: .seconds(30), now: { clock.now })
        // DocC third-party breaker use: begin
        let manager = URLTaskManager(interceptors: [breaker])
        // DocC third-party breaker use: end
        let session = manager.session
        defer { session.invalidateAndCancel() }
        var decisions = breaker.decisions.subscribe().makeAsyncIterator()

        for _ in 1...3 {
            let answered = try await status(of: session, server.url("/api"))
            XCTAssertEqual(answered, 503)
        }
        // The third answer's caller heard its end only after the breaker counted it.
        let refused = await refusal(of: session, server.url("/api"))

        XCTAssertEqual(refused?.host, URLOrigin(server.url("/api")))
        XCTAssertEqual(refused?.retryAfter, .seconds(30))
        XCTAssertEqual(hits.value, 3, "the refused request never reached the server")
        let opened = await decisions.next()
        XCTAssertEqual(opened, .opened(URLOrigin(server.url("/"))!, failures: 3))
        let refusedDecision = await decisions.next()
        XCTAssertEqual(refusedDecision, .refused(URLOrigin(server.url("/"))!))
    }

    /// The breaker's own code (declared in this target, as URLTaskResilience declares
    /// `circuitOpen`) reaches the caller through both doors as a built-in code does: caught with
    /// `==` and in a `switch`, told apart from every built-in code, its words and the breaker's
    /// name in the error's description.
    func testItsOwnErrorCodeIsCaughtLikeABuiltInOne() async throws {
        let hits = Locked(0)
        let server = try server(hits: hits) { 503 }
        defer { server.shutdown() }
        let breaker = HostBreaker(threshold: 1, coolDown: .seconds(30))
        let manager = URLTaskManager(interceptors: [breaker])
        defer { manager.invalidateAndCancel() }
        _ = try await status(of: manager.session, server.url("/api"))
        let doors: [(name: String, fetch: @Sendable () async throws -> Void)] = [
            ("manager.session", { _ = try await manager.session.data(from: server.url("/api")) }),
            ("manager.data(for:)", { _ = try await manager.data(for: URLRequest(url: server.url("/api"))) }),
        ]
        for door in doors {
            do {
                try await door.fetch()
                XCTFail("\(door.name): the open circuit let the request through")
            } catch let error as URLTaskError {
                let caught: String
                switch error.code {
                case .hostUnavailable: caught = "hostUnavailable"
                case .interceptorFailed, .circuitOpen, .rateLimitQueueFull: caught = "a built-in code"
                default: caught = "another code: \(error.code)"
                }
                XCTAssertEqual(caught, "hostUnavailable", door.name)
                XCTAssertTrue(error.code == .hostUnavailable, door.name)
                XCTAssertNotEqual(error.code, .interceptorFailed, "\(door.name): the part's own error is not wrapped")
                XCTAssertEqual(error.code.description, "HostBreaker.hostUnavailable")
                XCTAssertEqual(error.component?.name, "HostBreaker", door.name)
                XCTAssertTrue(error.underlying is HostBreaker.HostUnavailable, door.name)
                XCTAssertTrue(
                    error.description.hasPrefix("Refused without sending: the host keeps failing (HostBreaker) [GET "),
                    "\(door.name): \(error.description)")
            }
        }
        XCTAssertEqual(hits.value, 1, "the refused requests never reached the server")
    }

    func testAProbeAfterTheCoolDownClosesTheCircuit() async throws {
        let hits = Locked(0)
        let failing = Locked(503)
        let server = try server(hits: hits) { failing.value }
        defer { server.shutdown() }
        let clock = TestClock()
        let breaker = HostBreaker(threshold: 2, coolDown: .seconds(10), now: { clock.now })
        let session = URLTaskManager(interceptors: [breaker]).session
        defer { session.invalidateAndCancel() }
        let url = server.url("/api")

        for _ in 1...2 { _ = try await status(of: session, url) }
        let refusedWhileOpen = await refusal(of: session, url)
        XCTAssertNotNil(refusedWhileOpen)
        clock.advance(by: .seconds(4))
        let retryAfter = await refusal(of: session, url)?.retryAfter
        XCTAssertEqual(retryAfter, .seconds(6), "still open, and says for how long")

        clock.advance(by: .seconds(6))
        failing.set(200)
        var decisions = breaker.decisions.subscribe().makeAsyncIterator()
        let probeStatus = try await status(of: session, url)
        XCTAssertEqual(probeStatus, 200, "the probe goes out")
        let probing = await decisions.next()
        XCTAssertEqual(probing, .probing(URLOrigin(url)!))
        let closed = await decisions.next()
        XCTAssertEqual(closed, .closed(URLOrigin(url)!))
        let statusWhenClosed = try await status(of: session, url)
        XCTAssertEqual(statusWhenClosed, 200, "closed: requests go out again")
        XCTAssertEqual(hits.value, 4)
        XCTAssertEqual(breaker.trackedHosts, 0, "a healthy host keeps no state")
    }

    func testAFailedProbeOpensTheCircuitAgain() async throws {
        let hits = Locked(0)
        let server = try server(hits: hits) { 500 }
        defer { server.shutdown() }
        let clock = TestClock()
        let breaker = HostBreaker(threshold: 1, coolDown: .seconds(10), now: { clock.now })
        let session = URLTaskManager(interceptors: [breaker]).session
        defer { session.invalidateAndCancel() }
        let url = server.url("/api")

        let firstStatus = try await status(of: session, url)
        XCTAssertEqual(firstStatus, 500)
        clock.advance(by: .seconds(10))
        var decisions = breaker.decisions.subscribe().makeAsyncIterator()
        let probeStatus = try await status(of: session, url)
        XCTAssertEqual(probeStatus, 500, "the probe hears the server")
        let probing = await decisions.next()
        XCTAssertEqual(probing, .probing(URLOrigin(url)!))
        let reopened = await decisions.next()
        XCTAssertEqual(reopened, .reopened(URLOrigin(url)!))
        let retryAfter = await refusal(of: session, url)?.retryAfter
        XCTAssertEqual(retryAfter, .seconds(10), "a full cool-down again")
        XCTAssertEqual(hits.value, 2)
    }

    func testHostsHaveCircuitsOfTheirOwn() async throws {
        let failingHits = Locked(0)
        let healthyHits = Locked(0)
        let failing = try server(hits: failingHits) { 502 }
        let healthy = try server(hits: healthyHits) { 200 }
        defer {
            failing.shutdown()
            healthy.shutdown()
        }
        let breaker = HostBreaker(threshold: 1, coolDown: .seconds(60))
        let session = URLTaskManager(interceptors: [breaker]).session
        defer { session.invalidateAndCancel() }

        let failingStatus = try await status(of: session, failing.url("/api"))
        XCTAssertEqual(failingStatus, 502)
        let refused = await refusal(of: session, failing.url("/api"))
        XCTAssertNotNil(refused)
        let healthyStatus = try await status(of: session, healthy.url("/api"))
        XCTAssertEqual(healthyStatus, 200, "another port is another host")
        XCTAssertEqual(breaker.trackedHosts, 1)
        XCTAssertEqual(healthyHits.value, 1)
    }

    func testATransportFailureCountsAsAFailure() async throws {
        // A port nobody listens on: the connection is refused, no response head ever comes.
        let closed = try LoopbackServer()
        let url = closed.url("/api")
        closed.shutdown()
        let breaker = HostBreaker(threshold: 2, coolDown: .seconds(60))
        let session = URLTaskManager(interceptors: [breaker]).session
        defer { session.invalidateAndCancel() }

        for _ in 1...2 {
            do {
                _ = try await session.data(from: url)
                XCTFail("nobody listens on \(url)")
            } catch let error as URLError {
                XCTAssertEqual(error.code, .cannotConnectToHost, "the transport's error reaches the caller as itself")
            }
        }
        let refusedAfterTwo = await refusal(of: session, url)
        XCTAssertNotNil(refusedAfterTwo, "two refused connections opened the circuit")
    }

    func testTheManagerChecksItGoesFirst() {
        XCTAssertEqual(HostBreaker().interceptorPlacement, .first)
    }
}
