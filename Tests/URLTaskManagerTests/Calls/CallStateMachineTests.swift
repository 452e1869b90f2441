import XCTest
@testable import URLTaskManager

/// ``CallStateMachine``, without I/O: every event in every state, and the action it returns.
/// The continuation is an `Int`; the pipeline task's handle is a double that counts its cancels.
///
/// The machine's states are private, so each test reaches a state by the events that lead
/// there, then sends one event and checks the action, and then checks the state it left by the
/// answers to the events that follow.
///
/// Eleven pairs are `preconditionFailure`s, each a misuse by ``Call`` that cannot happen (and
/// that a test cannot run without stopping the process): `attach` once the continuation was
/// handed over (starting, running, cancelling, ended); `started` before the continuation was
/// (idle, cancelled idle) or twice (running); `ended` before the task was started (idle,
/// cancelled idle). They are listed here and nowhere tested.
final class CallStateMachineTests: XCTestCase {
    typealias Machine = CallStateMachine<Int>

    // MARK: Reaching each state

    /// Made, nothing handed over.
    private func idle() -> Machine { Machine() }

    /// Cancelled before the continuation was handed over.
    private func cancelledIdle() -> Machine {
        var machine = Machine()
        XCTAssertTrue(isNone(machine.cancelled()))
        return machine
    }

    /// The continuation `continuation` is here; no handle yet.
    private func starting(_ continuation: Int = 1) -> Machine {
        var machine = Machine()
        XCTAssertTrue(isStart(machine.attach(continuation)))
        return machine
    }

    /// The pipeline task runs under `handle`.
    private func running(_ continuation: Int = 1, _ handle: CancelCountingHandle) -> Machine {
        var machine = starting(continuation)
        XCTAssertTrue(isNone(machine.started(handle)))
        return machine
    }

    /// Answered `cancelled` while starting: the handle has not arrived.
    private func cancelling(_ continuation: Int = 1) -> Machine {
        var machine = starting(continuation)
        XCTAssertEqual(answeredCancelled(machine.cancelled())?.continuation, continuation)
        return machine
    }

    /// Answered with the task's end.
    private func ended(_ continuation: Int = 1) -> Machine {
        var machine = starting(continuation)
        XCTAssertEqual(answered(machine.ended()), continuation)
        return machine
    }

    // MARK: idle

    func testIdleAttachStarts() {
        var machine = idle()
        XCTAssertTrue(isStart(machine.attach(7)))
        // Now starting: a cancel answers with the continuation, and no handle to stop.
        let cancel = answeredCancelled(machine.cancelled())
        XCTAssertEqual(cancel?.continuation, 7)
        XCTAssertNil(cancel?.stop)
    }

    func testIdleCancelledWaitsForTheContinuation() {
        var machine = idle()
        XCTAssertTrue(isNone(machine.cancelled()), "no continuation to answer yet")
        // Now cancelled idle: the continuation, when it comes, is answered at once.
        XCTAssertEqual(answeredCancelledAtAttach(machine.attach(3)), 3)
    }

    // MARK: cancelled idle

    func testCancelledIdleAttachAnswersCancelledAndStartsNothing() {
        var machine = cancelledIdle()
        XCTAssertEqual(answeredCancelledAtAttach(machine.attach(5)), 5)
        // Now ended: nothing is left to do.
        let handle = CancelCountingHandle()
        XCTAssertTrue(isNone(machine.started(handle)))
        XCTAssertTrue(isNone(machine.cancelled()))
        XCTAssertNil(answered(machine.ended()))
        XCTAssertEqual(handle.cancels, 0)
    }

    func testCancelledIdleCancelledAgainDoesNothing() {
        var machine = cancelledIdle()
        XCTAssertTrue(isNone(machine.cancelled()))
        XCTAssertEqual(answeredCancelledAtAttach(machine.attach(2)), 2, "still cancelled idle")
    }

    // MARK: starting

    func testStartingStartedRuns() {
        var machine = starting(4)
        let handle = CancelCountingHandle()
        XCTAssertTrue(isNone(machine.started(handle)))
        // Now running: a cancel stops that handle.
        let cancel = answeredCancelled(machine.cancelled())
        XCTAssertEqual(cancel?.continuation, 4)
        XCTAssertTrue(cancel?.stop as? CancelCountingHandle === handle)
        XCTAssertEqual(handle.cancels, 0, "the machine stops nothing itself: the call does")
    }

    func testStartingCancelledAnswersAtOnceAndCancelsTheHandleWhenItArrives() {
        var machine = starting(6)
        let cancel = answeredCancelled(machine.cancelled())
        XCTAssertEqual(cancel?.continuation, 6)
        XCTAssertNil(cancel?.stop, "no handle yet")
        // Now cancelling: the handle, when it comes, is to be cancelled.
        let handle = CancelCountingHandle()
        XCTAssertTrue(machine.started(handle).cancelled === handle)
    }

    func testStartingEndedAnswers() {
        var machine = starting(8)
        XCTAssertEqual(answered(machine.ended()), 8, "an interceptor answered or failed it while it started")
        // Now ended: the handle that then arrives is left alone, and a cancel comes too late.
        let handle = CancelCountingHandle()
        XCTAssertTrue(isNone(machine.started(handle)))
        XCTAssertTrue(isNone(machine.cancelled()))
    }

    // MARK: running

    func testRunningCancelledAnswersAndStopsTheTask() {
        let handle = CancelCountingHandle()
        var machine = running(9, handle)
        let cancel = answeredCancelled(machine.cancelled())
        XCTAssertEqual(cancel?.continuation, 9)
        XCTAssertTrue(cancel?.stop as? CancelCountingHandle === handle)
        // Now ended: the task's end, which follows the cancel, answers nothing.
        XCTAssertNil(answered(machine.ended()))
        XCTAssertTrue(isNone(machine.cancelled()))
    }

    func testRunningEndedAnswers() {
        let handle = CancelCountingHandle()
        var machine = running(10, handle)
        XCTAssertEqual(answered(machine.ended()), 10)
        // Now ended: a cancel that comes after has nothing to answer or stop.
        XCTAssertTrue(isNone(machine.cancelled()))
        XCTAssertNil(answered(machine.ended()))
    }

    // MARK: cancelling

    func testCancellingStartedCancelsTheHandle() {
        var machine = cancelling(11)
        let handle = CancelCountingHandle()
        XCTAssertTrue(machine.started(handle).cancelled === handle)
        // Now ended.
        XCTAssertTrue(isNone(machine.cancelled()))
        XCTAssertNil(answered(machine.ended()))
    }

    func testCancellingCancelledAgainDoesNothing() {
        var machine = cancelling(12)
        XCTAssertTrue(isNone(machine.cancelled()))
        let handle = CancelCountingHandle()
        XCTAssertTrue(machine.started(handle).cancelled === handle, "still cancelling")
    }

    /// The task ended while the caller's cancel was being answered and before the handle came
    /// back: the caller was answered already, and the handle is still cancelled when it comes
    /// (a cancel of an ended task does nothing).
    func testCancellingEndedAnswersNothing() {
        var machine = cancelling(13)
        XCTAssertNil(answered(machine.ended()))
        let handle = CancelCountingHandle()
        XCTAssertTrue(machine.started(handle).cancelled === handle, "still cancelling")
    }

    // MARK: ended

    func testEndedStartedDoesNothing() {
        var machine = ended(14)
        let handle = CancelCountingHandle()
        XCTAssertTrue(isNone(machine.started(handle)))
        XCTAssertNil(answered(machine.ended()), "still ended")
    }

    func testEndedCancelledDoesNothing() {
        var machine = ended(15)
        XCTAssertTrue(isNone(machine.cancelled()))
        XCTAssertTrue(isNone(machine.started(CancelCountingHandle())), "still ended")
    }

    func testEndedEndedDoesNothing() {
        var machine = ended(16)
        XCTAssertNil(answered(machine.ended()))
        XCTAssertTrue(isNone(machine.cancelled()), "still ended")
    }

    /// Whatever the order of the three parties, the continuation is answered exactly once.
    func testEveryOrderAnswersTheContinuationExactlyOnce() {
        enum Event: CaseIterable { case cancel, started, ended }
        func orders(_ events: [Event]) -> [[Event]] {
            guard !events.isEmpty else { return [[]] }
            return events.indices.flatMap { index in
                var rest = events
                let first = rest.remove(at: index)
                return orders(rest).map { [first] + $0 }
            }
        }
        // The handle comes after the continuation, and the end after the handle was asked for:
        // `attach` is first, and `ended` may not come before it.
        for order in orders(Event.allCases) {
            for cancelFirst in [false, true] {
                var machine = Machine()
                var answers = 0
                var cancels = 0
                let handle = CancelCountingHandle()
                if cancelFirst { XCTAssertTrue(isNone(machine.cancelled())) }
                if case .answerCancelled = machine.attach(1) { answers += 1 }
                for event in order {
                    switch event {
                    case .cancel:
                        if case .answerCancelled(_, let stop) = machine.cancelled() {
                            answers += 1
                            if stop != nil { cancels += 1 }
                        }
                    case .started:
                        if case .cancel = machine.started(handle) { cancels += 1 }
                    case .ended:
                        if case .answer = machine.ended() { answers += 1 }
                    }
                }
                XCTAssertEqual(answers, 1, "\(cancelFirst ? "cancel, " : "")attach, \(order)")
                XCTAssertLessThanOrEqual(cancels, 1, "\(order)")
            }
        }
    }

    // MARK: Reading the actions

    private func isStart(_ action: Machine.AttachAction) -> Bool {
        if case .start = action { true } else { false }
    }

    /// The continuation `attach` answers `cancelled`, if it does.
    private func answeredCancelledAtAttach(_ action: Machine.AttachAction) -> Int? {
        if case .answerCancelled(let continuation) = action { continuation } else { nil }
    }

    private func isNone(_ action: Machine.StartedAction) -> Bool {
        if case .none = action { true } else { false }
    }

    private func isNone(_ action: Machine.CancelAction) -> Bool {
        if case .none = action { true } else { false }
    }

    /// The continuation a cancel answers and the handle it stops, if it answers.
    private func answeredCancelled(_ action: Machine.CancelAction) -> (continuation: Int, stop: (any PipelineTaskHandle)?)? {
        if case .answerCancelled(let continuation, let stop) = action { (continuation, stop) } else { nil }
    }

    /// The continuation the end answers, if it does.
    private func answered(_ action: Machine.EndAction) -> Int? {
        if case .answer(let continuation) = action { continuation } else { nil }
    }
}

extension CallStateMachine.StartedAction {
    /// The handle to cancel, as the double it is in these tests.
    fileprivate var cancelled: CancelCountingHandle? {
        if case .cancel(let handle) = self { handle as? CancelCountingHandle } else { nil }
    }
}

/// A pipeline task's handle that counts its cancels.
private final class CancelCountingHandle: PipelineTaskHandle {
    private let count = LockedState(0)

    var cancels: Int { count.withLock { $0 } }

    func cancel() {
        count.withLock { $0 += 1 }
    }
}
