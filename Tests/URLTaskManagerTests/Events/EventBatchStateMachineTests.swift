import XCTest
@testable import URLTaskManager

/// ``EventBatchStateMachine``'s actions, without I/O.
final class EventBatchStateMachineTests: XCTestCase {
    func testTheFirstEventSchedulesOneFlushAndTheFlushTakesTheBatchInOrder() {
        var machine = EventBatchStateMachine<Int>()
        XCTAssertEqual(action(machine.emitted(1)), "scheduleFlush")
        XCTAssertEqual(action(machine.emitted(2)), "none")
        XCTAssertEqual(action(machine.emitted(3)), "none")
        XCTAssertEqual(machine.flushDue(), [1, 2, 3])
        XCTAssertEqual(machine.flushDue(), [], "a second flush finds nothing")
        XCTAssertEqual(action(machine.emitted(4)), "scheduleFlush", "the next event starts a new batch")
        XCTAssertEqual(machine.flushDue(), [4])
    }

    func testFinishingTakesThePendingEventsAndDropsLaterOnes() {
        var machine = EventBatchStateMachine<Int>()
        _ = machine.emitted(1)
        _ = machine.emitted(2)
        XCTAssertEqual(action(machine.finished()), "yieldThenEnd [1, 2]")
        XCTAssertEqual(machine.flushDue(), [], "the flush scheduled before finishing finds nothing")
        XCTAssertEqual(action(machine.emitted(3)), "none")
        XCTAssertEqual(machine.flushDue(), [])
        XCTAssertEqual(action(machine.finished()), "none", "a second finish does nothing")
    }

    func testFinishingWithNothingPendingStillEndsTheStreamsOnce() {
        var machine = EventBatchStateMachine<Int>()
        XCTAssertEqual(action(machine.finished()), "yieldThenEnd []")
        XCTAssertEqual(action(machine.finished()), "none")
        _ = machine.emitted(1)
        _ = machine.emitted(2)
        XCTAssertEqual(machine.flushDue(), [], "nothing is gathered after the end")
        XCTAssertEqual(action(machine.finished()), "none")
    }

    private func action(_ action: EventBatchStateMachine<Int>.FinishAction) -> String {
        switch action {
        case .yieldThenEnd(let events): "yieldThenEnd \(events)"
        case .none: "none"
        }
    }

    private func action(_ action: EventBatchStateMachine<Int>.EmitAction) -> String {
        switch action {
        case .scheduleFlush: "scheduleFlush"
        case .none: "none"
        }
    }
}
