import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
import TestSupport

/// With a reactor that holds new tasks, the manager hands URLSession at most
/// `maximumRequestsInFlightPerHost` requests per host and queues the rest itself, so none
/// waits inside URLSession with headers a refresh may replace. Over real HTTP.
final class ConnectionLimitTests: XCTestCase {
    typealias Kit = ReactorTestKit

    /// Never reacts; only its configuration (it holds new tasks) matters here.
    struct IdleAuthReactor: URLTaskReactor {
        var configuration: URLTaskReactorConfiguration { .authentication }
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { false }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
    }

    /// Counts the requests the server is answering at once.
    final class Concurrency: @unchecked Sendable {  // all state is guarded by `lock`.
        private let lock = NSLock()
        private var current = 0
        private var peak = 0

        var maximum: Int { lock.withLock { peak } }
        func enter() {
            lock.withLock {
                current += 1; peak = max(peak, current)
            }
        }
        func leave() { lock.withLock { current -= 1 } }
    }

    private var server: LoopbackServer!

    override func setUp() async throws {
        server = try LoopbackServer()
    }

    override func tearDown() async throws {
        server.shutdown()
    }

    /// Each answer takes the server 30 ms of "work", so requests overlap when the client lets them.
    private func routeSlowAnswers(_ concurrency: Concurrency) {
        let thinking = Gate()  // never opened: its timeout is the server's think time
        server.route("/work") { _ in
            concurrency.enter()
            defer { concurrency.leave() }
            _ = thinking.wait(timeout: .milliseconds(30))
            return .text("done")
        }
    }

    func testAtMostTheLimitIsInFlightPerHostAndEveryRequestCompletes() async throws {
        let limited = Concurrency()
        routeSlowAnswers(limited)
        let manager = URLTaskManager(reactors: [IdleAuthReactor()], options: .init(maximumRequestsInFlightPerHost: 2))
        let url = server.url("/work")
        let results = await Kit.storm(manager.session, count: 12) { _ in URLRequest(url: url) }
        XCTAssertEqual(Kit.tally(results), ["200": 12])
        XCTAssertEqual(limited.maximum, 2, "never more than the limit, and the limit is used")
        XCTAssertEqual(manager.pipeline.engine.busyHosts, 0, "every slot was given back")
    }

    func testWithoutAHoldingReactorURLSessionQueuesAsUsual() async throws {
        let unlimited = Concurrency()
        routeSlowAnswers(unlimited)
        let manager = URLTaskManager(options: .init(maximumRequestsInFlightPerHost: 2))
        XCTAssertNil(manager.pipeline.engine.slotsPerHost, "nothing can make a queued request stale")
        let url = server.url("/work")
        let results = await Kit.storm(manager.session, count: 12) { _ in URLRequest(url: url) }
        XCTAssertEqual(Kit.tally(results), ["200": 12])
        XCTAssertGreaterThan(unlimited.maximum, 2, "the control: URLSession's own limit applies")
    }

    func testCancellingARequestWaitingForAConnectionEndsItAtOnceAndLeaksNoSlot() async throws {
        let gate = Gate()
        server.route("/blocked") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return .text("finally")
        }
        server.route("/next") { _ in .text("next") }
        let manager = URLTaskManager(reactors: [IdleAuthReactor()], options: .init(maximumRequestsInFlightPerHost: 1))
        let slots = manager.pipeline.engine
        XCTAssertEqual(slots.slotsPerHost, 1)

        let first = Kit.start(manager.session, server.url("/blocked"))
        _ = try await server.waitForRequests(path: "/blocked", count: 1)
        let queued = Kit.start(manager.session, server.url("/next"))
        let deadline = ContinuousClock.now.advanced(by: .seconds(5))
        while slots.waitingForSlot == 0, ContinuousClock.now < deadline { await Task.yield() }
        XCTAssertEqual(slots.waitingForSlot, 1, "the second request waits for the only slot")

        queued.cancel()
        let cancelled = await queued.value
        XCTAssertTrue(Kit.isCancelled(cancelled), cancelled.label)
        XCTAssertFalse(gate.isOpen, "it ended while the first request still held the slot")
        // The caller hears of the cancel first; the queue entry goes right after.
        let left = ContinuousClock.now.advanced(by: .seconds(5))
        while slots.waitingForSlot != 0, ContinuousClock.now < left { await Task.yield() }
        XCTAssertEqual(slots.waitingForSlot, 0, "the cancelled request left the queue")

        gate.open()
        let firstResult = await first.value
        XCTAssertEqual(firstResult.status, 200)
        let after = await Kit.fetch(manager.session, server.url("/next"))
        XCTAssertEqual(after.status, 200, "the slot came back")
        XCTAssertEqual(server.requests(path: "/next").count, 1, "the cancelled request never went out")
        XCTAssertEqual(slots.busyHosts, 0)
    }
}
