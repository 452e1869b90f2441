import XCTest
@testable import URLTaskManager

/// ``BatchStateMachine``: members, the earliest deadline and its timer generations.
final class BatchStateMachineTests: XCTestCase {
    typealias Machine = BatchStateMachine

    static func id(_ raw: UInt64) -> URLTask.ID { URLTask.ID(rawValue: raw) }
    let t0 = ContinuousClock.now

    func testMembersAreReleasedTogetherInArrivalOrder() {
        var m = Machine()
        XCTAssertEqual(m.count, 0)
        XCTAssertEqual(m.releaseAll(), [], "releasing an empty batch")
        for raw: UInt64 in [3, 1, 2] {
            XCTAssertEqual(m.hold(Self.id(raw), deadline: nil), .none, "no deadline, no timer")
        }
        XCTAssertEqual(m.count, 3)
        XCTAssertEqual(m.releaseAll(), [Self.id(3), Self.id(1), Self.id(2)])
        XCTAssertEqual(m.count, 0)
        XCTAssertEqual(m.releaseAll(), [])
    }

    func testATimerIsArmedOnlyWhenTheEarliestDeadlineMovesEarlier() {
        var m = Machine()
        XCTAssertEqual(m.hold(Self.id(1), deadline: nil), .none)
        XCTAssertEqual(
            m.hold(Self.id(2), deadline: t0 + .seconds(5)), .armTimer(deadline: t0 + .seconds(5), generation: 1),
            "the first deadline, even after a member without one")
        XCTAssertEqual(m.hold(Self.id(3), deadline: t0 + .seconds(9)), .none, "later than the earliest")
        XCTAssertEqual(m.hold(Self.id(4), deadline: t0 + .seconds(5)), .none, "equal to the earliest")
        XCTAssertEqual(m.hold(Self.id(5), deadline: nil), .none)
        XCTAssertEqual(m.hold(Self.id(6), deadline: t0 + .seconds(2)), .armTimer(deadline: t0 + .seconds(2), generation: 2))
    }

    func testOnlyTheCurrentGenerationsTimerReleases() {
        var m = Machine()
        _ = m.hold(Self.id(1), deadline: t0 + .seconds(5))  // generation 1
        _ = m.hold(Self.id(2), deadline: t0 + .seconds(1))  // generation 2
        XCTAssertEqual(m.timerFired(generation: 1), [], "outdated: the deadline moved earlier")
        XCTAssertEqual(m.count, 2)
        XCTAssertEqual(m.timerFired(generation: 2), [Self.id(1), Self.id(2)])
        XCTAssertEqual(m.timerFired(generation: 2), [], "fires once")
    }

    func testAReleaseOutdatesTheTimersOfTheBatchItEmptied() {
        var m = Machine()
        guard case .armTimer(_, let first) = m.hold(Self.id(1), deadline: t0 + .seconds(1)) else { return XCTFail("expected a timer") }
        XCTAssertEqual(m.releaseAll(), [Self.id(1)])
        XCTAssertEqual(m.hold(Self.id(2), deadline: nil), .none)
        XCTAssertEqual(m.timerFired(generation: first), [], "the old batch's timer must not release the new one")
        guard case .armTimer(_, let second) = m.hold(Self.id(3), deadline: t0 + .seconds(3)) else { return XCTFail("expected a timer") }
        XCTAssertNotEqual(first, second)
        XCTAssertEqual(m.timerFired(generation: second), [Self.id(2), Self.id(3)])
    }

    func testRemove() {
        var m = Machine()
        XCTAssertFalse(m.remove(Self.id(1)), "from an empty batch")
        _ = m.hold(Self.id(1), deadline: nil)
        _ = m.hold(Self.id(2), deadline: nil)
        _ = m.hold(Self.id(3), deadline: nil)
        XCTAssertTrue(m.remove(Self.id(2)))
        XCTAssertFalse(m.remove(Self.id(2)), "twice")
        XCTAssertFalse(m.remove(Self.id(9)), "never held")
        XCTAssertEqual(m.count, 2)
        XCTAssertEqual(m.releaseAll(), [Self.id(1), Self.id(3)])
    }

    func testRemovingTheLastMemberOutdatesItsTimer() {
        var m = Machine()
        guard case .armTimer(_, let generation) = m.hold(Self.id(1), deadline: t0 + .milliseconds(300)) else {
            return XCTFail("expected a timer")
        }
        XCTAssertTrue(m.remove(Self.id(1)))
        XCTAssertEqual(m.count, 0)
        // A new batch without a deadline (a custom interceptor's `.hold(for: nil)`).
        XCTAssertEqual(m.hold(Self.id(2), deadline: nil), .none)
        XCTAssertEqual(m.timerFired(generation: generation), [], "the cancelled member's timer released a batch it was not part of")
        XCTAssertEqual(m.count, 1)
    }

    func testAHoldDecidedBeforeAFlushIsReleasedAtOnce() {
        var m = Machine()
        let before = m.flushes
        XCTAssertEqual(m.hold(Self.id(1), deadline: nil, flushesSeen: before), .none)
        XCTAssertEqual(m.flush(), [Self.id(1)])
        XCTAssertEqual(m.flushes, before + 1)
        // Task 2's interceptor began deciding before the flush; its hold lands after it.
        XCTAssertEqual(m.hold(Self.id(2), deadline: t0 + .seconds(1), flushesSeen: before), .releaseNow)
        XCTAssertEqual(m.count, 0, "a task released at once does not join")
        XCTAssertEqual(m.hold(Self.id(3), deadline: nil, flushesSeen: m.flushes), .none, "decided after the flush: held")
        XCTAssertEqual(m.count, 1)
        XCTAssertEqual(m.flush(), [Self.id(3)])
        XCTAssertEqual(m.flush(), [], "flushing an empty batch")
    }

    func testOnlyAFlushReleasesLateDeciders() {
        var m = Machine()
        let seen = m.flushes
        _ = m.hold(Self.id(1), deadline: nil, flushesSeen: seen)
        XCTAssertEqual(m.releaseAll(), [Self.id(1)], "a release by size (`.release`)")
        guard case .armTimer(_, let generation) = m.hold(Self.id(2), deadline: t0 + .seconds(1), flushesSeen: seen) else {
            return XCTFail("a task deciding during a size or window release starts the next batch")
        }
        XCTAssertEqual(m.timerFired(generation: generation), [Self.id(2)], "a window release")
        XCTAssertEqual(m.hold(Self.id(3), deadline: nil, flushesSeen: seen), .none)
        XCTAssertEqual(m.count, 1)
    }
}
