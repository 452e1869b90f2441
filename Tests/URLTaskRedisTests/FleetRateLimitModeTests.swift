import Foundation
import XCTest
@testable import URLTaskRedis

/// The Redis-or-fallback mode machine (the fall back, the probes, the local bucket's empty start
/// and the rejoin's grace), the in-process line and the script's reply, without I/O.
final class FleetRateLimitModeTests: XCTestCase {
    typealias Mode = FleetRateLimitMode
    let start = ContinuousClock.now

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    func testSharedAsksRedisAndAnAnswerChangesNothing() {
        var mode = Mode(probeDelay: .milliseconds(100), maximumProbeDelay: .seconds(1))
        XCTAssertTrue(mode.isShared)
        XCTAssertFalse(mode.needsLocalTurn(now: at(0)))
        XCTAssertEqual(mode.requestArrived(now: at(0), hasLocalTurn: false), .shared)
        XCTAssertEqual(mode.redisAnswered(now: at(0)), .none)
        XCTAssertEqual(mode.requestArrived(now: at(1), hasLocalTurn: false), .shared)
    }

    /// A failure falls back once (one event, however many requests fail together); a request
    /// takes a local turn, and goes on it until the probe delay passed; the first with a local
    /// turn after it probes, the others keep to the local bucket.
    func testAFailureFallsBackAndOneRequestProbesAfterTheDelay() {
        var mode = Mode(probeDelay: .milliseconds(100), maximumProbeDelay: .seconds(1), localInterval: .milliseconds(20))
        XCTAssertEqual(mode.redisFailed(now: at(0), phase: 0), .fellBack(probeIn: .milliseconds(100)))
        XCTAssertEqual(mode.redisFailed(now: at(1), phase: 0), .none, "a second request failing at once announces nothing")
        XCTAssertFalse(mode.isShared)
        XCTAssertTrue(mode.needsLocalTurn(now: at(1)))
        XCTAssertEqual(mode.requestArrived(now: at(50), hasLocalTurn: false), .local)
        XCTAssertEqual(mode.requestArrived(now: at(50), hasLocalTurn: true), .go)
        XCTAssertEqual(mode.requestArrived(now: at(99), hasLocalTurn: true), .go)
        XCTAssertEqual(mode.requestArrived(now: at(100), hasLocalTurn: false), .local, "the probe has its local turn first")
        XCTAssertEqual(mode.requestArrived(now: at(100), hasLocalTurn: true), .probe)
        XCTAssertEqual(mode.requestArrived(now: at(101), hasLocalTurn: false), .local, "one probe at a time")
        XCTAssertEqual(mode.requestArrived(now: at(101), hasLocalTurn: true), .go)
        XCTAssertEqual(mode.redisAnswered(now: at(102)), .rejoined)
        XCTAssertTrue(mode.isShared)
    }

    /// Each failed probe doubles the wait before the next, up to the maximum.
    func testFailedProbesBackOffUpToTheMaximum() {
        var mode = Mode(probeDelay: .milliseconds(100), maximumProbeDelay: .milliseconds(300))
        _ = mode.redisFailed(now: at(0), phase: 0)
        XCTAssertEqual(mode.requestArrived(now: at(100), hasLocalTurn: true), .probe)
        XCTAssertEqual(mode.redisFailed(now: at(110), phase: 0), .none)
        XCTAssertEqual(mode.requestArrived(now: at(309), hasLocalTurn: true), .go)
        XCTAssertEqual(mode.requestArrived(now: at(310), hasLocalTurn: true), .probe, "200 ms after the failed probe")
        XCTAssertEqual(mode.redisFailed(now: at(310), phase: 0), .none)
        XCTAssertEqual(mode.requestArrived(now: at(609), hasLocalTurn: true), .go)
        XCTAssertEqual(mode.requestArrived(now: at(610), hasLocalTurn: true), .probe, "300 ms: the maximum, not 400")
        XCTAssertEqual(mode.redisFailed(now: at(610), phase: 0), .none)
        XCTAssertEqual(mode.requestArrived(now: at(910), hasLocalTurn: true), .probe)
    }

    /// A probe cancelled before Redis answered hands the probe to the next request at once.
    func testAnAbandonedProbeLetsTheNextRequestProbe() {
        var mode = Mode(probeDelay: .milliseconds(100), maximumProbeDelay: .seconds(1))
        _ = mode.redisFailed(now: at(0), phase: 0)
        XCTAssertEqual(mode.requestArrived(now: at(150), hasLocalTurn: true), .probe)
        mode.probeAbandoned(now: at(160))
        XCTAssertEqual(mode.requestArrived(now: at(161), hasLocalTurn: true), .probe)
        XCTAssertEqual(mode.requestArrived(now: at(162), hasLocalTurn: true), .go, "one probe at a time")
        XCTAssertEqual(mode.redisFailed(now: at(180), phase: 0), .none)
        XCTAssertEqual(mode.requestArrived(now: at(379), hasLocalTurn: true), .go)
        XCTAssertEqual(mode.requestArrived(now: at(380), hasLocalTurn: true), .probe, "the back-off doubled after the failed probe")
    }

    /// A request sent before the fall back that Redis still answers brings the shared bucket back.
    func testALateAnswerWhileLocalRejoins() {
        var mode = Mode(probeDelay: .seconds(1), maximumProbeDelay: .seconds(1))
        _ = mode.redisFailed(now: at(0), phase: 0)
        XCTAssertEqual(mode.redisAnswered(now: at(1)), .rejoined)
        XCTAssertTrue(mode.isShared)
        XCTAssertEqual(mode.requestArrived(now: at(1), hasLocalTurn: true), .shared)
        XCTAssertEqual(mode.redisFailed(now: at(2), phase: 0), .fellBack(probeIn: .seconds(1)))
    }

    /// After a fall back from the shared bucket, the first local turn comes when an empty local
    /// bucket would give one (its burst of local intervals), plus the phase's share of one
    /// interval: processes that fall back together, with their own phases, start apart.
    func testTheFirstLocalTurnWaitsForAnEmptyBucketAtItsPhase() {
        func firstTurn(phase: Double) -> ContinuousClock.Instant? {
            var mode = Mode(
                probeDelay: .milliseconds(250), maximumProbeDelay: .seconds(5), localInterval: .milliseconds(80), localBurst: 2)
            _ = mode.redisFailed(now: at(0), phase: phase)
            guard case .wait(let until) = mode.requestArrived(now: at(1), hasLocalTurn: false) else { return nil }
            XCTAssertEqual(mode.requestArrived(now: until - .milliseconds(1), hasLocalTurn: false), .wait(until: until))
            XCTAssertEqual(mode.requestArrived(now: until, hasLocalTurn: false), .local)
            return until
        }
        XCTAssertEqual(firstTurn(phase: 0), at(160), "two local intervals: the local burst of 2, from empty")
        XCTAssertEqual(firstTurn(phase: 0.5), at(200))
        XCTAssertEqual(firstTurn(phase: 0.25), at(180), "another phase, another start: not in lockstep")
        XCTAssertEqual(firstTurn(phase: 7), at(240), "a phase past 1 counts as 1")
        XCTAssertEqual(firstTurn(phase: .nan), at(160), "and one that is not a number as 0")
        // A local burst below 1 counts as 1.
        var small = Mode(probeDelay: .milliseconds(250), maximumProbeDelay: .seconds(5), localInterval: .milliseconds(160), localBurst: 0)
        _ = small.redisFailed(now: at(0), phase: 0)
        XCTAssertEqual(small.requestArrived(now: at(0), hasLocalTurn: false), .wait(until: at(160)))
    }

    /// Redis answered again: for the longest back-off and one empty local bucket's fill after,
    /// a request takes a local turn before it asks Redis (the other processes may still be on
    /// their own); then Redis alone decides again.
    func testARejoinKeepsToTheLocalShareUntilEveryProcessHasProbed() {
        var mode = Mode(
            probeDelay: .milliseconds(100), maximumProbeDelay: .seconds(1), localInterval: .milliseconds(100), localBurst: 2)
        XCTAssertEqual(mode.rejoinGrace, .milliseconds(1_300), "1 s of back-off, 200 ms to fill, one interval")
        _ = mode.redisFailed(now: at(0), phase: 0)
        XCTAssertEqual(mode.requestArrived(now: at(300), hasLocalTurn: true), .probe)
        XCTAssertEqual(mode.redisAnswered(now: at(310)), .rejoined)
        XCTAssertEqual(mode.redisAnswered(now: at(311)), .none, "rejoined once")
        XCTAssertTrue(mode.isShared)
        XCTAssertTrue(mode.needsLocalTurn(now: at(320)))
        XCTAssertEqual(mode.requestArrived(now: at(320), hasLocalTurn: false), .local, "the local turn first")
        XCTAssertEqual(mode.requestArrived(now: at(320), hasLocalTurn: true), .shared, "then Redis")
        XCTAssertEqual(mode.requestArrived(now: at(1_609), hasLocalTurn: false), .local)
        XCTAssertFalse(mode.needsLocalTurn(now: at(1_610)))
        XCTAssertEqual(mode.requestArrived(now: at(1_610), hasLocalTurn: false), .shared, "the grace is over")
        XCTAssertEqual(mode.requestArrived(now: at(1_611), hasLocalTurn: false), .shared)
        XCTAssertFalse(mode.needsLocalTurn(now: at(1_611)))
    }

    /// Redis gone again during the grace: back to local, without a new empty start (the local
    /// bucket was in use throughout); gone again once the grace is over: a new empty start.
    func testAFailureDuringTheGraceGoesOnWithTheLocalBucket() {
        var mode = Mode(
            probeDelay: .milliseconds(100), maximumProbeDelay: .seconds(1), localInterval: .milliseconds(100), localBurst: 1)
        _ = mode.redisFailed(now: at(0), phase: 0)
        XCTAssertEqual(mode.requestArrived(now: at(50), hasLocalTurn: false), .wait(until: at(100)))
        XCTAssertEqual(mode.redisAnswered(now: at(200)), .rejoined)
        XCTAssertEqual(mode.redisFailed(now: at(300), phase: 0.5), .fellBack(probeIn: .milliseconds(100)))
        XCTAssertFalse(mode.isShared)
        XCTAssertEqual(mode.requestArrived(now: at(300), hasLocalTurn: false), .local, "no new empty start")
        XCTAssertEqual(mode.requestArrived(now: at(400), hasLocalTurn: true), .probe)
        XCTAssertEqual(mode.redisAnswered(now: at(410)), .rejoined)
        XCTAssertEqual(mode.requestArrived(now: at(410 + 1_200), hasLocalTurn: false), .shared, "1.2 s of grace")
        XCTAssertEqual(mode.redisFailed(now: at(2_000), phase: 0.5), .fellBack(probeIn: .milliseconds(100)))
        XCTAssertEqual(mode.requestArrived(now: at(2_000), hasLocalTurn: false), .wait(until: at(2_150)), "from shared: empty again")
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

extension FleetRateLimitModeTests {
    /// A bounded line: a caller that would wait behind `maximumQueued` others does not join;
    /// without a bound, or at the head, nobody is refused; 0 refuses everyone who would wait.
    func testTheHostLineRefusesPastItsBound() async throws {
        let line = FleetHostLine()
        let order = FleetOrder()
        let head = try await line.enter("a", refusingPast: 0)
        XCTAssertEqual(head, .head, "the head never waits")
        let zero = try await line.enter("a", refusingPast: 0)
        XCTAssertEqual(zero, .refused(queued: 0))
        let waiting = Task { try await line.enter("a", refusingPast: 1) }
        await order.waitForQueued(line, host: "a", count: 1)
        let refused = try await line.enter("a", refusingPast: 1)
        XCTAssertEqual(refused, .refused(queued: 1))
        let unbounded = Task { try await line.enter("a", refusingPast: nil) }
        await order.waitForQueued(line, host: "a", count: 2)
        line.leave("a")
        let second = try await waiting.value
        XCTAssertEqual(second, .head)
        line.leave("a")
        let third = try await unbounded.value
        XCTAssertEqual(third, .head)
        line.leave("a")
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
