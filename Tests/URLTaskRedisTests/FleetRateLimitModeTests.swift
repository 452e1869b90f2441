import Foundation
import XCTest
@testable import URLTaskRedis

/// The Redis-or-fallback mode machine, the in-process line and the script's reply, without I/O.
final class FleetRateLimitModeTests: XCTestCase {
    typealias Mode = FleetRateLimitMode
    let start = ContinuousClock.now

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    func testSharedAsksRedisAndAnAnswerChangesNothing() {
        var mode = Mode(probeDelay: .milliseconds(100), maximumProbeDelay: .seconds(1))
        XCTAssertTrue(mode.isShared)
        XCTAssertEqual(mode.requestArrived(now: at(0)), .shared)
        XCTAssertEqual(mode.redisAnswered(), .none)
        XCTAssertEqual(mode.requestArrived(now: at(1)), .shared)
    }

    /// A failure falls back once (one event, however many requests fail together); requests go
    /// local until the probe delay passed; the first after it probes, the others stay local.
    func testAFailureFallsBackAndOneRequestProbesAfterTheDelay() {
        var mode = Mode(probeDelay: .milliseconds(100), maximumProbeDelay: .seconds(1))
        XCTAssertEqual(mode.redisFailed(now: at(0)), .fellBack(probeIn: .milliseconds(100)))
        XCTAssertEqual(mode.redisFailed(now: at(1)), .none, "a second request failing at once announces nothing")
        XCTAssertFalse(mode.isShared)
        XCTAssertEqual(mode.requestArrived(now: at(50)), .local)
        XCTAssertEqual(mode.requestArrived(now: at(99)), .local)
        XCTAssertEqual(mode.requestArrived(now: at(100)), .probe)
        XCTAssertEqual(mode.requestArrived(now: at(101)), .local, "one probe at a time")
        XCTAssertEqual(mode.redisAnswered(), .rejoined)
        XCTAssertTrue(mode.isShared)
        XCTAssertEqual(mode.requestArrived(now: at(102)), .shared)
    }

    /// Each failed probe doubles the wait before the next, up to the maximum.
    func testFailedProbesBackOffUpToTheMaximum() {
        var mode = Mode(probeDelay: .milliseconds(100), maximumProbeDelay: .milliseconds(300))
        _ = mode.redisFailed(now: at(0))
        XCTAssertEqual(mode.requestArrived(now: at(100)), .probe)
        XCTAssertEqual(mode.redisFailed(now: at(110)), .none)
        XCTAssertEqual(mode.requestArrived(now: at(309)), .local)
        XCTAssertEqual(mode.requestArrived(now: at(310)), .probe, "200 ms after the failed probe")
        XCTAssertEqual(mode.redisFailed(now: at(310)), .none)
        XCTAssertEqual(mode.requestArrived(now: at(609)), .local)
        XCTAssertEqual(mode.requestArrived(now: at(610)), .probe, "300 ms: the maximum, not 400")
        XCTAssertEqual(mode.redisFailed(now: at(610)), .none)
        XCTAssertEqual(mode.requestArrived(now: at(910)), .probe)
    }

    /// A probe cancelled before Redis answered hands the probe to the next request at once.
    func testAnAbandonedProbeLetsTheNextRequestProbe() {
        var mode = Mode(probeDelay: .milliseconds(100), maximumProbeDelay: .seconds(1))
        _ = mode.redisFailed(now: at(0))
        XCTAssertEqual(mode.requestArrived(now: at(150)), .probe)
        mode.probeAbandoned(now: at(160))
        XCTAssertEqual(mode.requestArrived(now: at(161)), .probe)
        XCTAssertEqual(mode.requestArrived(now: at(162)), .local, "one probe at a time")
        XCTAssertEqual(mode.redisFailed(now: at(180)), .none)
        XCTAssertEqual(mode.requestArrived(now: at(379)), .local)
        XCTAssertEqual(mode.requestArrived(now: at(380)), .probe, "the back-off doubled after the failed probe")
    }

    /// A request sent before the fall back that Redis still answers brings the shared bucket back.
    func testALateAnswerWhileLocalRejoins() {
        var mode = Mode(probeDelay: .seconds(1), maximumProbeDelay: .seconds(1))
        _ = mode.redisFailed(now: at(0))
        XCTAssertEqual(mode.redisAnswered(), .rejoined)
        XCTAssertEqual(mode.requestArrived(now: at(1)), .shared)
        XCTAssertEqual(mode.redisFailed(now: at(2)), .fellBack(probeIn: .seconds(1)))
    }

    /// The script's reply: go, a wait, a pause's wait; another shape is a protocol violation.
    func testTheScriptsReplyIsRead() throws {
        XCTAssertEqual(try FleetRateLimitScripts.answer(from: .array([.integer(0), .integer(0)])), .go)
        XCTAssertEqual(
            try FleetRateLimitScripts.answer(from: .array([.integer(20), .integer(0)])), .wait(.milliseconds(20), paused: false))
        XCTAssertEqual(
            try FleetRateLimitScripts.answer(from: .array([.integer(900), .integer(1)])), .wait(.milliseconds(900), paused: true))
        XCTAssertThrowsError(try FleetRateLimitScripts.answer(from: .integer(0))) { error in
            XCTAssertEqual((error as? RedisError)?.kind, .protocolViolation)
        }
    }

    /// The line lets one request per host at a time, in arrival order; a cancelled waiter leaves
    /// at once without losing the place of those behind it; an empty line keeps nothing.
    func testTheHostLineIsFirstInFirstOutAndCancellable() async throws {
        let line = FleetHostLine()
        try await line.enter("a")
        try await line.enter("b")  // another host does not wait
        let order = FleetOrder()
        let second = Task {
            try await line.enter("a")
            order.append("second")
            line.leave("a")
        }
        await order.waitForQueued(line, host: "a", count: 1)
        let cancelled = Task { try await line.enter("a") }
        await order.waitForQueued(line, host: "a", count: 2)
        let third = Task {
            try await line.enter("a")
            order.append("third")
            line.leave("a")
        }
        await order.waitForQueued(line, host: "a", count: 3)
        cancelled.cancel()
        do {
            try await cancelled.value
            XCTFail("a cancelled waiter does not get the line")
        } catch is CancellationError {}
        line.leave("a")
        try await second.value
        try await third.value
        XCTAssertEqual(order.all, ["second", "third"])
        line.leave("b")
        XCTAssertEqual(line.hostCount, 0)
    }
}

/// Order of events in the line test, and a wait for the line's length (yielding, no clock).
final class FleetOrder: @unchecked Sendable {  // `items` is guarded by `lock`.
    private let lock = NSLock()
    private var items: [String] = []

    var all: [String] { lock.withLock { items } }

    func append(_ item: String) { lock.withLock { items.append(item) } }

    func waitForQueued(_ line: FleetHostLine, host: String, count: Int) async {
        while line.queuedCount(host) < count { await Task.yield() }
    }
}
