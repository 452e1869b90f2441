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
        XCTAssertEqual(machine.taskEnded(verdict: .failure, now: t0, mark: 0), .none)
        XCTAssertEqual(machine.taskEnded(verdict: .failure, now: t0 + .seconds(11), mark: 0), .none, "the first fell out of the window")
        XCTAssertEqual(machine.taskEnded(verdict: .success, now: t0 + .seconds(12), mark: 0), .none)
        XCTAssertEqual(machine.taskEnded(verdict: .failure, now: t0 + .seconds(12), mark: 0), .none)
        XCTAssertEqual(machine.taskEnded(verdict: .failure, now: t0 + .seconds(13), mark: 0), .opened(failures: 3))
        XCTAssertEqual(machine.requestArrives(id(6), now: t0 + .seconds(14), mark: 0), .reject(retryAfter: .seconds(4)))
    }

    /// Enough failures, but fewer than the ratio of the tasks that ended: a busy host with a few
    /// failures stays in use; a pause (`Retry-After`) counts for nothing.
    func testBreakerOpensOnlyAtTheFailureRatioAndIgnoresPauses() {
        var machine = breaker(ratio: 0.5)
        for _ in 0..<4 { XCTAssertEqual(machine.taskEnded(verdict: .success, now: t0, mark: 0), .none) }
        for _ in 0..<3 { XCTAssertEqual(machine.taskEnded(verdict: .failure, now: t0, mark: 0), .none) }
        XCTAssertEqual(machine.taskEnded(verdict: .pause, now: t0, mark: 0), .none)
        XCTAssertEqual(machine.taskEnded(verdict: .failure, now: t0, mark: 0), .opened(failures: 4), "4 of 8 ended tasks failed")
    }

    func testBreakerHalfOpenLetsOneProbeThroughAndItsOutcomeDecidesWithAGrowingCoolDown() {
        var machine = breaker()
        for _ in 1...3 { _ = machine.taskEnded(verdict: .failure, now: t0, mark: 0) }
        let later = t0 + .seconds(5)
        XCTAssertEqual(machine.requestArrives(id(10), now: later, mark: 0), .probe)
        XCTAssertEqual(machine.requestArrives(id(11), now: later, mark: 0), .reject(retryAfter: .seconds(60)), "one probe at a time")
        XCTAssertEqual(machine.requestArrives(id(10), now: later, mark: 0), .probe, "the probe requeued passes again")
        XCTAssertEqual(machine.attemptEnded(id(11), verdict: .failure, now: later, mark: 0), .none, "only the probe's outcome counts")
        XCTAssertEqual(machine.attemptEnded(id(10), verdict: .failure, now: later, mark: 0), .reopened(coolDown: .seconds(10)))
        XCTAssertEqual(machine.requestArrives(id(12), now: later + .seconds(9), mark: 0), .reject(retryAfter: .seconds(1)))
        XCTAssertEqual(machine.requestArrives(id(12), now: later + .seconds(10), mark: 0), .probe)
        XCTAssertEqual(
            machine.attemptEnded(id(12), verdict: .failure, now: later + .seconds(10), mark: 0), .reopened(coolDown: .seconds(20)))
        XCTAssertEqual(machine.requestArrives(id(13), now: later + .seconds(30), mark: 0), .probe)
        XCTAssertEqual(
            machine.attemptEnded(id(13), verdict: .pause, now: later + .seconds(30), mark: 0), .reopened(coolDown: .seconds(20)),
            "a pause does not grow the cool-down")
        XCTAssertEqual(machine.requestArrives(id(14), now: later + .seconds(50), mark: 0), .probe)
        XCTAssertEqual(machine.attemptEnded(id(14), verdict: .success, now: later + .seconds(50), mark: 0), .closed)
        XCTAssertTrue(machine.isIdle(at: later + .seconds(50)))
        XCTAssertEqual(machine.requestArrives(id(15), now: later + .seconds(50), mark: 0), .pass)
    }

    func testBreakerCoolDownStopsGrowingAtItsMaximum() {
        var machine = CircuitBreakerStateMachine(
            failureThreshold: 1, failureRatio: 0, window: .seconds(10), coolDown: .seconds(40), maximumCoolDown: .seconds(60),
            probeTimeout: .seconds(60))
        XCTAssertEqual(machine.taskEnded(verdict: .failure, now: t0, mark: 0), .opened(failures: 1))
        XCTAssertEqual(machine.requestArrives(id(1), now: t0 + .seconds(40), mark: 0), .probe)
        XCTAssertEqual(machine.attemptEnded(id(1), verdict: .failure, now: t0 + .seconds(40), mark: 0), .reopened(coolDown: .seconds(60)))
    }

    /// An open circuit closes as soon as the host answered another part's probe (its answer mark
    /// grew since the circuit opened).
    func testBreakerClosesWhenTheHostAnsweredAnotherPartsProbe() {
        var machine = breaker()
        for _ in 1...3 { _ = machine.taskEnded(verdict: .failure, now: t0, mark: 7) }
        XCTAssertEqual(machine.requestArrives(id(1), now: t0 + .seconds(1), mark: 7), .reject(retryAfter: .seconds(4)))
        XCTAssertEqual(machine.requestArrives(id(2), now: t0 + .seconds(1), mark: 8), .closedByAnswer)
        XCTAssertEqual(machine.requestArrives(id(3), now: t0 + .seconds(1), mark: 8), .pass)
    }

    func testBreakerUnansweredProbeIsReplacedAfterProbeTimeout() {
        var machine = breaker()
        for _ in 1...3 { _ = machine.taskEnded(verdict: .failure, now: t0, mark: 0) }
        XCTAssertEqual(machine.requestArrives(id(10), now: t0 + .seconds(5), mark: 0), .probe)
        XCTAssertEqual(machine.requestArrives(id(11), now: t0 + .seconds(65), mark: 0), .probe)
        XCTAssertEqual(
            machine.attemptEnded(id(10), verdict: .success, now: t0 + .seconds(66), mark: 0), .none, "the abandoned probe no longer decides"
        )
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
    private func breaker(ratio: Double = 0) -> CircuitBreakerStateMachine {
        CircuitBreakerStateMachine(
            failureThreshold: 3, failureRatio: ratio, window: .seconds(10), coolDown: .seconds(5), maximumCoolDown: .seconds(60),
            probeTimeout: .seconds(60))
    }
}
