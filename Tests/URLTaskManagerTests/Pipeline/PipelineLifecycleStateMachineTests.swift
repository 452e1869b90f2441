import XCTest
@testable import URLTaskManager

/// ``PipelineLifecycleStateMachine``: when tasks are accepted, and when the inner session may
/// be released.
final class PipelineLifecycleStateMachineTests: XCTestCase {
    typealias Machine = PipelineLifecycleStateMachine

    func testFinishingWaitsForTheLastTask() {
        var m = Machine()
        XCTAssertEqual(m.taskStarted(), .run)
        XCTAssertEqual(m.taskStarted(), .run)
        XCTAssertEqual(m.finishRequested(), .none, "two tasks still run")
        XCTAssertEqual(m.taskStarted(), .run, "a task the session accepted before invalidating still runs")
        XCTAssertEqual(m.transferStarting(), .run, "and is sent")
        XCTAssertEqual(m.transferStarted(), .none)
        XCTAssertEqual(m.taskEnded(), .none)
        XCTAssertEqual(m.taskEnded(), .none)
        XCTAssertFalse(m.isInvalidated)
        XCTAssertEqual(m.taskEnded(), .finish, "the last task ended: release the inner session")
        XCTAssertTrue(m.isInvalidated)
        XCTAssertEqual(m.taskStarted(), .refuseInvalidated)
        XCTAssertEqual(m.finishRequested(), .none, "finishing twice does nothing")
        XCTAssertEqual(m.cancelRequested(), .none, "nothing is left to cancel")
    }

    func testFinishingAnIdlePipelineReleasesAtOnce() {
        var m = Machine()
        XCTAssertEqual(m.taskStarted(), .run)
        XCTAssertEqual(m.taskEnded(), .none)
        XCTAssertEqual(m.finishRequested(), .finish)
        XCTAssertEqual(m.transferStarting(), .refuseInvalidated)
    }

    /// A task cancelled while it was being sent ends before its transfer exists (caught once in
    /// CI: "a transfer started after the inner session was invalidated"): finishing then waits
    /// for that transfer, whatever the order of the ending, the finish and the handover.
    func testFinishingWaitsForATransferWhoseTaskAlreadyEnded() {
        var idle = Machine()
        XCTAssertEqual(idle.taskStarted(), .run)
        XCTAssertEqual(idle.transferStarting(), .run)
        XCTAssertEqual(idle.taskEnded(), .none, "cancelled while being sent")
        XCTAssertEqual(idle.finishRequested(), .none, "a transfer is still being handed over")
        XCTAssertFalse(idle.isInvalidated)
        XCTAssertEqual(idle.transferStarted(), .finish, "it exists: now the inner session may go")
        XCTAssertTrue(idle.isInvalidated)

        var finishing = Machine()
        XCTAssertEqual(finishing.taskStarted(), .run)
        XCTAssertEqual(finishing.finishRequested(), .none)
        XCTAssertEqual(finishing.transferStarting(), .run)
        XCTAssertEqual(finishing.taskEnded(), .none, "the last task ended, its transfer not handed over yet")
        XCTAssertFalse(finishing.isInvalidated)
        XCTAssertEqual(finishing.transferStarted(), .finish)
    }

    func testCancelWaitsForTransfersBeingHandedOver() {
        var m = Machine()
        XCTAssertEqual(m.taskStarted(), .run)
        XCTAssertEqual(m.taskStarted(), .run)
        XCTAssertEqual(m.transferStarting(), .run)
        XCTAssertEqual(m.transferStarting(), .run)
        XCTAssertEqual(
            m.cancelRequested(), .cancelHeldTasks(inner: .none), "two inner tasks are being created: the inner session must stay valid")
        XCTAssertEqual(m.taskStarted(), .refuseCancelled)
        XCTAssertEqual(m.transferStarting(), .refuseCancelled, "nothing new is sent")
        XCTAssertEqual(m.transferStarted(), .none)
        XCTAssertFalse(m.isInvalidated)
        XCTAssertEqual(m.transferStarted(), .abandon, "the last one exists: abandon the inner session now")
        XCTAssertTrue(m.isInvalidated)
        XCTAssertEqual(m.taskEnded(), .none, "tasks ending after the cancel change nothing")
        XCTAssertEqual(m.cancelRequested(), .none)
    }

    func testCancelWithNothingBeingHandedOverCancelsAtOnce() {
        var m = Machine()
        XCTAssertEqual(m.taskStarted(), .run)
        XCTAssertEqual(m.cancelRequested(), .cancelHeldTasks(inner: .abandon))
        XCTAssertEqual(m.taskEnded(), .none)
        XCTAssertEqual(m.taskStarted(), .refuseCancelled, "a cancelled session's late tasks end cancelled, as the session reports them")
        XCTAssertTrue(m.isCancelled)
    }

    func testCancelWhileFinishingCancels() {
        var m = Machine()
        XCTAssertEqual(m.taskStarted(), .run)
        XCTAssertEqual(m.finishRequested(), .none)
        XCTAssertEqual(
            m.cancelRequested(), .cancelHeldTasks(inner: .abandon), "invalidateAndCancel() after finishTasksAndInvalidate() still abandons")
        XCTAssertEqual(m.taskEnded(), .none, "and the inner session is not released twice")
    }
}
