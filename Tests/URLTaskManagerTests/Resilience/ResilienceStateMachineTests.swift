import XCTest
@testable import URLTaskManager
@testable import URLTaskResilience

/// The resilience state machines (sharing has its own: `SharedTransferStateMachineTests`), driven event by event with explicit time: no I/O.
final class ResilienceStateMachineTests: XCTestCase {
    typealias Instant = ContinuousClock.Instant
    let t0 = ContinuousClock.now

    // MARK: Circuit breaker

    func testBreakerOpensAfterThresholdWithinWindowOnly() {
        var machine = breaker()
        XCTAssertEqual(machine.outcome(of: id(1), failed: true, now: t0), .none)
        XCTAssertEqual(machine.outcome(of: id(2), failed: true, now: t0 + .seconds(11)), .none, "the first fell out of the window")
        XCTAssertEqual(machine.outcome(of: id(3), failed: false, now: t0 + .seconds(12)), .none)
        XCTAssertEqual(machine.outcome(of: id(4), failed: true, now: t0 + .seconds(12)), .none)
        XCTAssertEqual(machine.outcome(of: id(5), failed: true, now: t0 + .seconds(13)), .opened(failures: 3))
        XCTAssertEqual(machine.requestArrives(id(6), now: t0 + .seconds(14)), .reject(retryAfter: .seconds(4)))
    }

    func testBreakerHalfOpenLetsOneProbeThroughAndItsOutcomeDecides() {
        var machine = breaker()
        for n in 1...3 { _ = machine.outcome(of: id(UInt64(n)), failed: true, now: t0) }
        let later = t0 + .seconds(5)
        XCTAssertEqual(machine.requestArrives(id(10), now: later), .probe)
        XCTAssertEqual(machine.requestArrives(id(11), now: later), .reject(retryAfter: .seconds(60)), "one probe at a time")
        XCTAssertEqual(machine.requestArrives(id(10), now: later), .probe, "the probe requeued passes again")
        XCTAssertEqual(machine.outcome(of: id(11), failed: true, now: later), .none, "only the probe's outcome counts")
        XCTAssertEqual(machine.outcome(of: id(10), failed: true, now: later), .reopened)
        XCTAssertEqual(machine.requestArrives(id(12), now: later + .seconds(5)), .probe)
        XCTAssertEqual(machine.outcome(of: id(12), failed: false, now: later + .seconds(5)), .closed)
        XCTAssertTrue(machine.isIdle(at: later + .seconds(5)))
        XCTAssertEqual(machine.requestArrives(id(13), now: later + .seconds(5)), .pass)
    }

    func testBreakerUnansweredProbeIsReplacedAfterProbeTimeout() {
        var machine = breaker()
        for n in 1...3 { _ = machine.outcome(of: id(UInt64(n)), failed: true, now: t0) }
        XCTAssertEqual(machine.requestArrives(id(10), now: t0 + .seconds(5)), .probe)
        XCTAssertEqual(machine.requestArrives(id(11), now: t0 + .seconds(65)), .probe)
        XCTAssertEqual(machine.outcome(of: id(10), failed: false, now: t0 + .seconds(66)), .none, "the abandoned probe no longer decides")
    }

    // MARK: Token bucket

    func testBucketSpendsBurstThenReleasesInArrivalOrderAtTheRate() {
        var bucket = TokenBucketStateMachine(rate: 10, burst: 2, maximumQueueLength: 3, now: t0)
        XCTAssertEqual(bucket.arrive(bucketWaiter(1), now: t0), .go)
        XCTAssertEqual(bucket.arrive(bucketWaiter(2), now: t0), .go)
        XCTAssertEqual(bucket.arrive(bucketWaiter(3), now: t0), .wait(position: 1, wakeAt: t0 + .milliseconds(100)))
        XCTAssertEqual(bucket.arrive(bucketWaiter(4), now: t0), .wait(position: 2, wakeAt: t0 + .milliseconds(100)))
        XCTAssertEqual(bucket.arrive(bucketWaiter(5), now: t0), .wait(position: 3, wakeAt: t0 + .milliseconds(100)))
        XCTAssertEqual(bucket.arrive(bucketWaiter(6), now: t0), .refuse(queued: 3))
        XCTAssertEqual(bucket.tick(now: t0 + .milliseconds(50)).released, [])
        let first = bucket.tick(now: t0 + .milliseconds(100))
        XCTAssertEqual(first.released, [bucketWaiter(3)])
        XCTAssertEqual(first.wakeAt, t0 + .milliseconds(200))
        XCTAssertTrue(bucket.leave(bucketWaiter(4)))
        XCTAssertFalse(bucket.leave(bucketWaiter(4)))
        XCTAssertEqual(bucket.tick(now: t0 + .milliseconds(200)), .init(released: [bucketWaiter(5)], wakeAt: nil))
        XCTAssertEqual(bucket.arrive(bucketWaiter(7), now: t0 + .milliseconds(200)), .wait(position: 1, wakeAt: t0 + .milliseconds(300)))
    }

    func testBucketPauseHoldsEveryoneUntilItEnds() {
        var bucket = TokenBucketStateMachine(rate: 100, burst: 5, maximumQueueLength: nil, now: t0)
        XCTAssertEqual(bucket.pause(for: .seconds(2), now: t0), nil, "nobody waits yet")
        XCTAssertEqual(bucket.arrive(bucketWaiter(1), now: t0 + .seconds(1)), .wait(position: 1, wakeAt: t0 + .seconds(2)))
        XCTAssertEqual(
            bucket.pause(for: .milliseconds(500), now: t0 + .seconds(1)), t0 + .seconds(2), "a shorter pause does not cut a longer one")
        XCTAssertEqual(bucket.tick(now: t0 + .milliseconds(1999)).released, [])
        XCTAssertEqual(bucket.tick(now: t0 + .seconds(2)).released, [bucketWaiter(1)])
    }

    /// A token given back (its request joined a shared transfer) releases the next in line at
    /// once, never fills the bucket past its burst, and does nothing during a pause.
    func testBucketRefundReleasesTheNextInLineAndNeverExceedsTheBurst() {
        var bucket = TokenBucketStateMachine(rate: 10, burst: 2, maximumQueueLength: nil, now: t0)
        XCTAssertEqual(bucket.arrive(bucketWaiter(1), now: t0), .go)
        XCTAssertEqual(bucket.arrive(bucketWaiter(2), now: t0), .go)
        XCTAssertEqual(bucket.arrive(bucketWaiter(3), now: t0), .wait(position: 1, wakeAt: t0 + .milliseconds(100)))
        XCTAssertEqual(bucket.refund(now: t0 + .milliseconds(1)), .init(released: [bucketWaiter(3)], wakeAt: nil))
        XCTAssertEqual(bucket.refund(now: t0 + .milliseconds(2)).released, [])
        XCTAssertEqual(bucket.refund(now: t0 + .milliseconds(3)).released, [])
        XCTAssertEqual(bucket.arrive(bucketWaiter(4), now: t0 + .milliseconds(3)), .go)
        XCTAssertEqual(bucket.arrive(bucketWaiter(5), now: t0 + .milliseconds(3)), .go)
        XCTAssertEqual(
            bucket.arrive(bucketWaiter(6), now: t0 + .milliseconds(3)), .wait(position: 1, wakeAt: t0 + .milliseconds(103)),
            "two refunds past a full bucket gave nothing beyond the burst")
        XCTAssertEqual(bucket.pause(for: .seconds(1), now: t0 + .milliseconds(4)), t0 + .milliseconds(1_004))
        XCTAssertEqual(bucket.refund(now: t0 + .milliseconds(5)).released, [], "a pause holds everyone")
    }

    // MARK: Offline hold

    func testOfflineProbesPerHostAndReleasesEveryoneOnSuccess() {
        var machine = OfflineHoldStateMachine()
        let (a, b, c) = (offline(1), offline(2), offline(3))
        XCTAssertEqual(machine.held(a, host: "h1"), .startProbing)
        XCTAssertEqual(machine.held(b, host: "h1"), .wait)
        XCTAssertEqual(machine.held(c, host: "h2"), .startProbing, "hosts are probed apart")
        XCTAssertEqual(machine.probeFailed(host: "h1"), 1)
        XCTAssertEqual(machine.probeFailed(host: "h1"), 2)
        XCTAssertEqual(machine.probeSucceeded(host: "h1"), [a, b])
        XCTAssertEqual(machine.probeFailed(host: "h1"), nil, "no longer probed")
        XCTAssertEqual(machine.left(a), .none)
        XCTAssertEqual(machine.left(c), .stopProbing(host: "h2"))
        XCTAssertEqual(machine.probedHosts, [])
    }

    // MARK: Helpers

    private func bucketWaiter(_ n: UInt64) -> TokenBucketStateMachine.Waiter { .init(rawValue: n) }
    private func offline(_ n: UInt64) -> OfflineHoldStateMachine.Waiter { .init(rawValue: n) }
    private func id(_ n: UInt64) -> URLTask.ID { URLTask.ID(rawValue: n) }
    private func breaker() -> CircuitBreakerStateMachine {
        CircuitBreakerStateMachine(failureThreshold: 3, window: .seconds(10), coolDown: .seconds(5), probeTimeout: .seconds(60))
    }
}
