import XCTest
@testable import URLTaskManager

/// ``ReactorStateMachine``: single flight, joining, the gate, late requeues, the loop guard.
final class ReactorStateMachineTests: XCTestCase {
    typealias Machine = ReactorStateMachine

    static func id(_ raw: UInt64) -> URLTask.ID { URLTask.ID(rawValue: raw) }
    let t0 = ContinuousClock.now

    func testTheFirstTaskStartsARunAndOthersJoinIt() {
        var m = Machine(loopGuard: nil)
        XCTAssertFalse(m.isRunning)
        XCTAssertNil(m.runningRun)
        XCTAssertEqual(m.taskNeedsReaction(Self.id(1), sentUnder: m.stamp, now: t0), .startRun(run: 1))
        XCTAssertTrue(m.isRunning)
        XCTAssertEqual(m.runningRun, 1)
        XCTAssertEqual(m.taskNeedsReaction(Self.id(2), sentUnder: m.stamp, now: t0), .wait(run: 1))
        XCTAssertEqual(m.taskNeedsReaction(Self.id(3), sentUnder: Machine.Stamp(), now: t0), .wait(run: 1))
        XCTAssertEqual(m.runFinished(run: 1, succeeded: true), Machine.RunEnd(waiters: [Self.id(1), Self.id(2), Self.id(3)], gated: []))
        XCTAssertFalse(m.isRunning)
        XCTAssertEqual(m.version, 1)
    }

    func testTheGateHoldsNewTasksOnlyWhileARunIsGoing() {
        var m = Machine(loopGuard: nil)
        XCTAssertFalse(m.gate(Self.id(9)), "idle: nothing to wait for")
        _ = m.taskNeedsReaction(Self.id(1), sentUnder: m.stamp, now: t0)
        XCTAssertTrue(m.gate(Self.id(7)))
        XCTAssertTrue(m.gate(Self.id(8)))
        XCTAssertEqual(m.runFinished(run: 1, succeeded: false), Machine.RunEnd(waiters: [Self.id(1)], gated: [Self.id(7), Self.id(8)]))
        XCTAssertFalse(m.gate(Self.id(9)))
        XCTAssertEqual(m.version, 0, "a failed run is not a new version")
    }

    func testALateTaskIsRequeuedWithoutRunningAgain() {
        var m = Machine(loopGuard: nil)
        let before = m.stamp
        _ = m.taskNeedsReaction(Self.id(1), sentUnder: before, now: t0)
        _ = m.runFinished(run: 1, succeeded: true)
        XCTAssertEqual(m.taskNeedsReaction(Self.id(2), sentUnder: before, now: t0), .requeueNow, "sent before run 1 ended")
        XCTAssertFalse(m.isRunning)
        XCTAssertEqual(m.taskNeedsReaction(Self.id(3), sentUnder: m.stamp, now: t0), .startRun(run: 2), "sent after: the work is needed again")
    }

    func testALateTaskAfterAFailedRunFailsWithoutRunningAgain() {
        var m = Machine(loopGuard: nil)
        let before = m.stamp
        _ = m.taskNeedsReaction(Self.id(1), sentUnder: before, now: t0)
        _ = m.runFinished(run: 1, succeeded: false)
        XCTAssertEqual(m.taskNeedsReaction(Self.id(2), sentUnder: before, now: t0), .failNow)
        XCTAssertEqual(m.taskNeedsReaction(Self.id(3), sentUnder: m.stamp, now: t0), .startRun(run: 2))
    }

    func testAFinishedRunIdIsStale() {
        var m = Machine(loopGuard: nil)
        _ = m.taskNeedsReaction(Self.id(1), sentUnder: m.stamp, now: t0)
        XCTAssertNil(m.runFinished(run: 2, succeeded: true), "a run that never started")
        XCTAssertNotNil(m.runFinished(run: 1, succeeded: true))
        XCTAssertNil(m.runFinished(run: 1, succeeded: true), "finished twice")
        XCTAssertEqual(m.taskNeedsReaction(Self.id(2), sentUnder: m.stamp, now: t0), .startRun(run: 2))
        XCTAssertNil(m.runFinished(run: 1, succeeded: false), "run 1 ending again must not end run 2")
        XCTAssertEqual(m.runningRun, 2)
        XCTAssertEqual(m.version, 1)
        XCTAssertEqual(m.runFinished(run: 2, succeeded: true)?.waiters, [Self.id(2)])
        XCTAssertEqual(m.version, 2)
    }

    func testRemoveTakesACancelledTaskOutOfTheRun() {
        var m = Machine(loopGuard: nil)
        XCTAssertFalse(m.remove(Self.id(1)), "idle")
        _ = m.taskNeedsReaction(Self.id(1), sentUnder: m.stamp, now: t0)
        _ = m.taskNeedsReaction(Self.id(2), sentUnder: m.stamp, now: t0)
        _ = m.gate(Self.id(3))
        _ = m.gate(Self.id(4))
        XCTAssertTrue(m.remove(Self.id(1)), "the task that started the run")
        XCTAssertTrue(m.remove(Self.id(4)), "a gated task")
        XCTAssertFalse(m.remove(Self.id(4)), "twice")
        XCTAssertFalse(m.remove(Self.id(9)), "unknown")
        XCTAssertTrue(m.isRunning, "the run goes on without the task that started it")
        XCTAssertEqual(m.runFinished(run: 1, succeeded: true), Machine.RunEnd(waiters: [Self.id(2)], gated: [Self.id(3)]))
    }

    func testTheLoopGuardRefusesTooManyRunsInItsWindow() {
        var m = Machine(loopGuard: .init(maximumRuns: 2, window: .seconds(10)))
        for run in 1...2 {
            XCTAssertEqual(m.taskNeedsReaction(Self.id(UInt64(run)), sentUnder: m.stamp, now: t0 + .seconds(run)), .startRun(run: run))
            _ = m.runFinished(run: run, succeeded: true)
        }
        XCTAssertEqual(m.taskNeedsReaction(Self.id(3), sentUnder: m.stamp, now: t0 + .seconds(3)), .refuseLoop(runs: 2))
        XCTAssertFalse(m.isRunning, "a refused task starts nothing")
        XCTAssertEqual(m.taskNeedsReaction(Self.id(4), sentUnder: m.stamp, now: t0 + .seconds(11.5)), .startRun(run: 3),
                       "run 1 left the window, run 2 is still in it")
        _ = m.runFinished(run: 3, succeeded: true)
        XCTAssertEqual(m.taskNeedsReaction(Self.id(5), sentUnder: m.stamp, now: t0 + .seconds(12)), .refuseLoop(runs: 2))
        // A task that is merely late is requeued whatever the guard says: no run is started.
        XCTAssertEqual(m.taskNeedsReaction(Self.id(6), sentUnder: Machine.Stamp(), now: t0 + .seconds(12)), .requeueNow)
    }
}
