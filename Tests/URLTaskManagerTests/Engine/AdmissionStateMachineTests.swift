import XCTest
@testable import URLTaskManager

/// ``AdmissionStateMachine`` without I/O: which reactors hear that a task's answer needed none
/// of them (their loop guards count only runs whose product was never accepted).
final class AdmissionStateMachineTests: XCTestCase {
    typealias Machine = AdmissionStateMachine

    static func id(_ raw: UInt64) -> URLTask.ID { URLTask.ID(rawValue: raw) }
    let t0 = ContinuousClock.now
    let loopGuard = URLTaskReactorConfiguration.LoopGuard(maximumRuns: 1, window: .seconds(10))

    /// A task that needs reactor `reactor`, sent with headers decided now: what the reactor decides.
    private func refused(
        _ m: inout Machine, _ raw: UInt64, reactor: Int = 0, exemptedBy: [Bool] = [false], at seconds: Int
    ) -> ReactorRunStateMachine.NeedAction {
        m.register(Self.id(raw), exemptedBy: exemptedBy)
        XCTAssertEqual(m.headersWillBeDecided(Self.id(raw)), .proceed)
        return m.transferEndedNeedingReaction(Self.id(raw), reactor: reactor, alreadyRequeued: false, now: t0 + .seconds(seconds)).need
    }

    /// A task sent with headers decided now, whose transfer ends: `answered` says no reactor needed its answer.
    private func ended(_ m: inout Machine, _ raw: UInt64, exemptedBy: [Bool] = [false], answered: Bool) {
        m.register(Self.id(raw), exemptedBy: exemptedBy)
        XCTAssertEqual(m.headersWillBeDecided(Self.id(raw)), .proceed)
        XCTAssertEqual(m.wantsToSend(Self.id(raw), host: "h", restamp: false), .send)
        _ = m.transferEnded(Self.id(raw), answered: answered)
        _ = m.finished(Self.id(raw))
    }

    func testAnAnsweredTaskUnderTheCurrentVersionKeepsTheNextRunOutOfTheGuard() {
        var m = Machine(reactors: [.refresh(loopGuard: loopGuard)], slotsPerHost: 2)
        XCTAssertEqual(refused(&m, 1, at: 0), .startRun(run: 1))
        XCTAssertNotNil(m.runFinished(reactor: 0, run: 1, succeeded: true))
        for run in 2...6 {
            ended(&m, UInt64(100 + run), answered: true)
            XCTAssertTrue(m.reactors[0].versionAccepted)
            XCTAssertEqual(refused(&m, UInt64(run), at: run), .startRun(run: run), "the token of run \(run - 1) worked")
            XCTAssertNotNil(m.runFinished(reactor: 0, run: run, succeeded: true))
        }
    }

    func testOnlyAnAnswerNoReactorNeededToHeadersOfTheCurrentVersionCounts() {
        var m = Machine(reactors: [.refresh(loopGuard: loopGuard)], slotsPerHost: nil)
        // Headers decided before run 1, answered after it.
        m.register(Self.id(50), exemptedBy: [false])
        XCTAssertEqual(m.headersWillBeDecided(Self.id(50)), .proceed)
        XCTAssertEqual(m.wantsToSend(Self.id(50), host: "h", restamp: false), .send)
        XCTAssertEqual(refused(&m, 1, at: 0), .startRun(run: 1))
        XCTAssertNotNil(m.runFinished(reactor: 0, run: 1, succeeded: true))
        _ = m.transferEnded(Self.id(50), answered: true)
        XCTAssertFalse(m.reactors[0].versionAccepted, "an answer to headers older than version 1")
        ended(&m, 51, answered: false)
        XCTAssertFalse(m.reactors[0].versionAccepted, "a transfer that ended without an answer (or not sent after all)")
        XCTAssertEqual(refused(&m, 2, at: 1), .startRun(run: 2), "version 1 refused: 1 of 1")
        XCTAssertNotNil(m.runFinished(reactor: 0, run: 2, succeeded: true))
        XCTAssertEqual(refused(&m, 3, at: 2), .refuseLoop(runs: 1), "version 2 refused too")
    }

    func testAReactorHearsOnlyOfTheTasksItDoesNotExempt() {
        var m = Machine(
            reactors: [.refresh(loopGuard: loopGuard), .singleFlight(loopGuard: loopGuard, afterwards: .sendAgain)], slotsPerHost: 2)
        ended(&m, 1, exemptedBy: [true, false], answered: true)
        XCTAssertFalse(m.reactors[0].versionAccepted, "exempt: its stamps are not recorded")
        XCTAssertTrue(m.reactors[1].versionAccepted, "a reactor that does not hold new tasks still judges its runs")
        ended(&m, 2, exemptedBy: [false, true], answered: true)
        XCTAssertTrue(m.reactors[0].versionAccepted)
    }

    // MARK: Reported credential versions

    func testHeadersOlderThanAReportedVersionAreInterceptedAgainBeforeTheyLeave() {
        var m = Machine(reactors: [.refresh(loopGuard: nil)], slotsPerHost: 4)
        m.register(Self.id(1), exemptedBy: [false])
        XCTAssertEqual(m.headersWillBeDecided(Self.id(1)), .proceed)
        XCTAssertEqual(
            m.wantsToSend(Self.id(1), host: "h", restamp: false, reported: [0: .init(sent: 2, current: 3)]), .reintercept,
            "the reactor's own version moved on outside any run")
        XCTAssertEqual(m.wantsToSend(Self.id(1), host: "h", restamp: false, reported: [0: .init(sent: 3, current: 3)]), .send)
        XCTAssertEqual(m.busyHosts, 1)
    }

    func testASlotHandedOverIsJudgedAgainWithFreshReadingsAndPassedOnIfStale() {
        var m = Machine(reactors: [.refresh(loopGuard: nil)], slotsPerHost: 1)
        for raw: UInt64 in 1...3 {
            m.register(Self.id(raw), exemptedBy: [false])
            XCTAssertEqual(m.headersWillBeDecided(Self.id(raw)), .proceed)
        }
        XCTAssertEqual(m.wantsToSend(Self.id(1), host: "h", restamp: false, reported: [0: .init(sent: 5, current: 5)]), .send)
        XCTAssertEqual(
            m.wantsToSend(Self.id(2), host: "h", restamp: false, reported: [0: .init(sent: 5, current: 5)]), .waitForSlot(generation: 1))
        XCTAssertEqual(
            m.wantsToSend(Self.id(3), host: "h", restamp: false, reported: [0: .init(sent: 5, current: 5)]), .waitForSlot(generation: 2))
        // Task 1 ends: task 2 is handed the slot, judged by what the engine last heard (version 5).
        let handed = m.transferEnded(Self.id(1))
        XCTAssertEqual(handed.map(\.0), [Self.id(2)])
        XCTAssertEqual(handed.map(\.1), [.send])
        // The app renewed the token meanwhile (version 6): task 2's fresh reading makes it stale,
        // and the slot passes on to task 3 in the same transition.
        let (decision, passedOn) = m.slotHandedOver(Self.id(2), reported: [0: .init(sent: 5, current: 6)])
        XCTAssertEqual(decision, .reintercept)
        XCTAssertEqual(passedOn.map(\.0), [Self.id(3)])
        XCTAssertEqual(passedOn.map(\.1), [.reintercept], "task 3's headers carry version 5 too: the engine now knows 6")
        XCTAssertEqual(m.busyHosts, 0, "no task holds the slot: both go back to their interceptors")
    }
}
