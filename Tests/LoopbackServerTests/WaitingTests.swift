import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest

/// `waitForRequests`, `Gate` and shutdown while requests are held: the synchronisation features.
final class WaitingTests: ServerAndClientTestCase {
    func testWaitReturnsWhenConcurrentRequestsArriveWhileHeldOnAGate() async throws {
        let gate = Gate()
        server.route("/held") { _ in
            gate.wait(timeout: .seconds(10))
            return .text("released")
        }
        let client = self.client!
        let url = server.url("/held")
        let responses = Task {
            try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<4 {
                    group.addTask { String(decoding: try await client.get(url).0, as: UTF8.self) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
        }
        let arrived = try await server.waitForRequests(path: "/held", count: 4)
        XCTAssertEqual(arrived.count, 4)
        XCTAssertEqual(Set(arrived.map(\.connectionID)).count, 4, "each held request occupies its own connection")
        XCTAssertFalse(gate.isOpen)
        gate.open()
        let bodies = try await responses.value
        XCTAssertEqual(bodies, Array(repeating: "released", count: 4))
    }

    func testWaitReturnsFirstRequestsAndCountsOnlyThePath() async throws {
        server.route(prefix: "/") { _ in .status(204) }
        _ = try await client.get(server.url("/other"))
        _ = try await client.get(server.url("/x?i=1"))
        _ = try await client.get(server.url("/x?i=2"))
        let first = try await server.waitForRequests(path: "/x", count: 1)
        XCTAssertEqual(first.map(\.query), ["i=1"])
        let any = try await server.waitForRequests(count: 3)
        XCTAssertEqual(any.map(\.path), ["/other", "/x", "/x"])
    }

    func testWaitTimesOutWithTypedError() async throws {
        server.route("/once") { _ in .text("ok") }
        _ = try await client.get(server.url("/once"))
        let clock = ContinuousClock()
        let start = clock.now
        do {
            _ = try await server.waitForRequests(path: "/once", count: 2, timeout: .milliseconds(200))
            XCTFail("expected a timeout")
        } catch let error as LoopbackServerError {
            XCTAssertEqual(error, .timeout(path: "/once", expected: 2, received: 1))
        }
        XCTAssertGreaterThanOrEqual(clock.now - start, .milliseconds(200))
    }

    func testWaitIsCancellable() async throws {
        let server = self.server!
        let waiter = Task { try await server.waitForRequests(path: "/never", count: 1, timeout: .seconds(30)) }
        waiter.cancel()
        do {
            _ = try await waiter.value
            XCTFail("expected cancellation")
        } catch {
            XCTAssertTrue(error is CancellationError, "\(error)")
        }
    }

    func testGateHoldsResponseUntilOpened() async throws {
        let gate = Gate()
        let handlerFinished = Gate()
        server.route("/gated") { _ in
            let opened = gate.wait(timeout: .seconds(10))
            handlerFinished.open()
            return .text(opened ? "opened" : "timed out")
        }
        let client = self.client!
        let url = server.url("/gated")
        let response = Task { try await client.get(url) }
        _ = try await server.waitForRequests(path: "/gated", count: 1)
        XCTAssertFalse(handlerFinished.isOpen, "the handler must still be parked on the gate")
        gate.open()
        let (data, _) = try await response.value
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "opened")
    }

    func testGateTimesOut() {
        let gate = Gate()
        XCTAssertFalse(gate.wait(timeout: .milliseconds(20)))
        gate.open()
        XCTAssertTrue(gate.wait(timeout: .zero))
    }

    func testShutdownDoesNotHangOnBlockedHandlerAndFailsWaiters() async throws {
        let gate = Gate()
        server.route("/stuck") { _ in
            gate.wait(timeout: .seconds(20))
            return .text("never seen")
        }
        let client = self.client!
        let server = self.server!
        let url = server.url("/stuck")
        let response = Task { try await client.get(url) }
        _ = try await server.waitForRequests(path: "/stuck", count: 1)
        let pending = Task { try await server.waitForRequests(path: "/other", count: 1) }

        let clock = ContinuousClock()
        let start = clock.now
        server.shutdown()
        server.shutdown()
        XCTAssertLessThan(clock.now - start, .seconds(2))

        do {
            _ = try await pending.value
            XCTFail("expected shutDown")
        } catch let error as LoopbackServerError {
            XCTAssertEqual(error, .shutDown)
        }
        do {
            _ = try await response.value
            XCTFail("the held request should fail once the server is gone")
        } catch {
            // Expected: the connection was shut down under the client.
        }
        gate.open()
    }
}
