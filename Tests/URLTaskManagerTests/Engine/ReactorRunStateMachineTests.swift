import XCTest
@testable import URLTaskManager

/// ``ReactorRunStateMachine``: single flight, joining, the gate, late requeues, the loop guard (it
/// counts runs whose product was refused, not runs).
final class ReactorRunStateMachineTests: XCTestCase {
    typealias Machine = ReactorRunStateMachine

    static func id(_ raw: UInt64) -> URLTask.ID { URLTask.ID(rawValue: raw) }
    let t0 = ContinuousClock.now

    func testTheFirstTaskStartsARunAndOthersJoinIt() {
        var m = Machine(loopGuard: nil)
        XCTAssertFalse(m.isRunning)
        XCTAssertNil(m.currentRun)
        XCTAssertEqual(m.taskNeedsReaction(Self.id(1), sentUnder: m.stamp, now: t0), .startRun(run: 1))
        XCTAssertTrue(m.isRunning)
        XCTAssertEqual(m.currentRun, 1)
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
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(3), sentUnder: m.stamp, now: t0), .startRun(run: 2), "sent after: the work is needed again")
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
        XCTAssertEqual(m.currentRun, 2)
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

    func testTheLoopGuardCountsOnlyRunsThatFollowASuccess() {
        var m = Machine(loopGuard: .init(maximumRuns: 2, window: .seconds(10)))
        XCTAssertEqual(m.taskNeedsReaction(Self.id(1), sentUnder: m.stamp, now: t0), .startRun(run: 1))
        _ = m.runFinished(run: 1, succeeded: false)
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(2), sentUnder: m.stamp, now: t0 + .seconds(1)), .startRun(run: 2), "after a failure: not counted")
        _ = m.runFinished(run: 2, succeeded: true)
        for run in 3...4 {
            XCTAssertEqual(
                m.taskNeedsReaction(Self.id(UInt64(run)), sentUnder: m.stamp, now: t0 + .seconds(run)), .startRun(run: run), "counted")
            _ = m.runFinished(run: run, succeeded: true)
        }
        XCTAssertEqual(m.taskNeedsReaction(Self.id(5), sentUnder: m.stamp, now: t0 + .seconds(5)), .refuseLoop(runs: 2))
        XCTAssertFalse(m.isRunning, "a refused task starts nothing")
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(6), sentUnder: m.stamp, now: t0 + .seconds(13.5)), .startRun(run: 5),
            "run 3 left the window, run 4 is still in it")
        _ = m.runFinished(run: 5, succeeded: true)
        XCTAssertEqual(m.taskNeedsReaction(Self.id(7), sentUnder: m.stamp, now: t0 + .seconds(14)), .refuseLoop(runs: 2))
        // A task that is merely late is requeued whatever the guard says: no run is started.
        XCTAssertEqual(m.taskNeedsReaction(Self.id(8), sentUnder: Machine.Stamp(), now: t0 + .seconds(14)), .requeueNow)
    }

    /// Tokens revoked again and again: every refreshed token works for a while, so no run
    /// counts, however many fall within the window.
    func testRunsWhoseProductWasAcceptedNeverTripTheGuard() {
        var m = Machine(loopGuard: .init(maximumRuns: 2, window: .seconds(10)))
        for run in 1...20 {
            let now = t0 + .milliseconds(100 * run)
            XCTAssertEqual(m.taskNeedsReaction(Self.id(UInt64(run)), sentUnder: m.stamp, now: now), .startRun(run: run), "run \(run)")
            _ = m.runFinished(run: run, succeeded: true)
            XCTAssertFalse(m.versionAccepted, "a new version starts unaccepted")
            m.outcomeAccepted(sentUnder: m.stamp)
            XCTAssertTrue(m.versionAccepted)
        }
    }

    /// A token endpoint whose tokens the API always refuses: no answer is ever accepted, so
    /// every run after a success counts, and the guard trips after `maximumRuns`. Acceptances
    /// of older headers, or arriving while the run that replaces them is going, do not count.
    func testRunsWithoutAcceptanceTripTheGuardAfterMaximumRuns() {
        var m = Machine(loopGuard: .init(maximumRuns: 2, window: .seconds(10)))
        let before = m.stamp
        XCTAssertEqual(m.taskNeedsReaction(Self.id(1), sentUnder: m.stamp, now: t0), .startRun(run: 1), "follows no success")
        m.outcomeAccepted(sentUnder: before)
        XCTAssertTrue(m.versionAccepted, "version 0 worked until now")
        _ = m.runFinished(run: 1, succeeded: true)
        XCTAssertFalse(m.versionAccepted, "version 1 is new: it has not been accepted yet")
        m.outcomeAccepted(sentUnder: before)
        XCTAssertFalse(m.versionAccepted, "an answer to headers older than version 1 says nothing of it")
        for run in 2...3 {
            XCTAssertEqual(
                m.taskNeedsReaction(Self.id(UInt64(run)), sentUnder: m.stamp, now: t0 + .seconds(run)), .startRun(run: run), "counted")
            _ = m.runFinished(run: run, succeeded: true)
        }
        XCTAssertEqual(m.taskNeedsReaction(Self.id(4), sentUnder: m.stamp, now: t0 + .seconds(4)), .refuseLoop(runs: 2))
        XCTAssertFalse(m.isRunning)
    }

    /// An accepted answer ends the streak: after a refused credential or two, a token that
    /// works resets the count (and ends a tripped guard at once); the window still lets runs
    /// without acceptance leave it.
    func testAnAcceptedAnswerEndsTheStreakAndTheWindowStillApplies() {
        var m = Machine(loopGuard: .init(maximumRuns: 2, window: .seconds(10)))
        _ = m.taskNeedsReaction(Self.id(1), sentUnder: m.stamp, now: t0)
        _ = m.runFinished(run: 1, succeeded: true)
        for run in 2...3 {
            _ = m.taskNeedsReaction(Self.id(UInt64(run)), sentUnder: m.stamp, now: t0 + .seconds(run))
            _ = m.runFinished(run: run, succeeded: true)
        }
        XCTAssertEqual(m.taskNeedsReaction(Self.id(4), sentUnder: m.stamp, now: t0 + .seconds(4)), .refuseLoop(runs: 2), "tripped")
        m.outcomeAccepted(sentUnder: m.stamp)
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(5), sentUnder: m.stamp, now: t0 + .seconds(5)), .startRun(run: 4),
            "version 3 worked after all: the refusal that starts run 4 is new, and ends the streak")
        _ = m.runFinished(run: 4, succeeded: true)
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(6), sentUnder: m.stamp, now: t0 + .seconds(6)), .startRun(run: 5), "version 4 refused: 1 of 2")
        _ = m.runFinished(run: 5, succeeded: true)
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(7), sentUnder: m.stamp, now: t0 + .seconds(17)), .startRun(run: 6),
            "version 5 refused, but run 5 left the window: 1 of 2")
        _ = m.runFinished(run: 6, succeeded: true)
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(8), sentUnder: m.stamp, now: t0 + .seconds(18)), .startRun(run: 7), "version 6 refused: 2 of 2")
        _ = m.runFinished(run: 7, succeeded: true)
        XCTAssertEqual(m.taskNeedsReaction(Self.id(9), sentUnder: m.stamp, now: t0 + .seconds(19)), .refuseLoop(runs: 2))
    }

    func testWithoutALoopGuardAcceptanceIsNotTracked() {
        var m = Machine(loopGuard: nil)
        _ = m.taskNeedsReaction(Self.id(1), sentUnder: m.stamp, now: t0)
        _ = m.runFinished(run: 1, succeeded: true)
        m.outcomeAccepted(sentUnder: m.stamp)
        XCTAssertFalse(m.versionAccepted)
        XCTAssertFalse(m.guardsLoops)
    }

    func testATaskRequeuedOnceWithCurrentHeadersIsDeliveredNotRefreshedAgain() {
        var m = Machine(loopGuard: nil)
        XCTAssertEqual(m.taskNeedsReaction(Self.id(1), sentUnder: m.stamp, now: t0), .startRun(run: 1))
        _ = m.runFinished(run: 1, succeeded: true)
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(1), sentUnder: m.stamp, alreadyRequeued: true, now: t0), .deliverNow,
            "resent with the new headers and refused again: the server's answer stands")
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(2), sentUnder: Machine.Stamp(), alreadyRequeued: true, now: t0), .requeueNow,
            "headers older than the latest run: still just late")
        XCTAssertFalse(m.isRunning)
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(3), sentUnder: m.stamp, now: t0), .startRun(run: 2), "a task not yet requeued still starts a run")
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(1), sentUnder: Machine.Stamp(version: 1), alreadyRequeued: true, now: t0), .wait(run: 2),
            "a run already going is joined: it will produce newer headers")
    }

    func testHeadersOutdatedByTheReactorsOwnVersionAreLateWithoutARun() {
        var m = Machine(loopGuard: nil)
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(1), sentUnder: m.stamp, reported: .init(sent: 3, current: 4), now: t0), .requeueNow,
            "the credential changed outside any run (a sign-in, an early renewal): no run needed")
        XCTAssertFalse(m.isRunning)
        XCTAssertEqual(
            m.taskNeedsReaction(Self.id(2), sentUnder: m.stamp, reported: .init(sent: 4, current: 4), now: t0), .startRun(run: 1))
    }

    // MARK: Lateness, decided in one place

    func testLatenessWeighsRunsAndReportedVersionsInOnePlace() {
        var m = Machine(loopGuard: nil)
        let before = m.stamp
        XCTAssertEqual(m.lateness(of: before), .current)
        _ = m.taskNeedsReaction(Self.id(1), sentUnder: before, now: t0)
        _ = m.runFinished(run: 1, succeeded: false)
        XCTAssertEqual(m.lateness(of: before), .failedSince, "only a failed run ended since")
        _ = m.taskNeedsReaction(Self.id(2), sentUnder: m.stamp, now: t0)
        _ = m.runFinished(run: 2, succeeded: true)
        XCTAssertEqual(m.lateness(of: before), .succeededSince, "a success since wins over the failure")
        XCTAssertEqual(m.lateness(of: m.stamp), .current)
    }

    func testAReportedVersionIsRememberedForTasksJudgedLater() {
        var m = Machine(loopGuard: nil)
        // Task 1's headers carry version 7; the reactor reports 7 as current.
        let first = m.record(.init(sent: 7, current: 7), in: m.stamp)
        XCTAssertEqual(first.reported, 7)
        XCTAssertEqual(m.lateness(of: first), .current)
        // Another task's reading shows the credential renewed outside any run (version 8): task 1,
        // judged later without calling the reactor (a slot handed over), is late.
        _ = m.record(.init(sent: 8, current: 8), in: m.stamp)
        XCTAssertEqual(m.reportedVersion, 8)
        XCTAssertEqual(m.lateness(of: first), .succeededSince)
        // An older reading never lowers what the engine knows.
        _ = m.record(.init(sent: 6, current: 6), in: m.stamp)
        XCTAssertEqual(m.reportedVersion, 8)
    }
}
