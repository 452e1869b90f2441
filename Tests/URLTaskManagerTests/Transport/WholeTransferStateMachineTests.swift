import XCTest

@testable import URLTaskManager

/// Every transition of ``WholeTransferStateMachine``, without I/O: a cancel at each point of a
/// whole transfer, and the refused challenge that sends the request again.
final class WholeTransferStateMachineTests: XCTestCase {
    typealias Machine = WholeTransferStateMachine

    func testACancelBeforeTheCallSendsNothing() {
        var m = Machine()
        XCTAssertEqual(m.cancel(), .none, "nothing to cancel yet")
        XCTAssertEqual(m.willCall(), .endCancelled)
        XCTAssertEqual(m.cancel(), .none)
    }

    /// While the async call runs, a cancel stops its inner task, never its Swift task; the
    /// `cancelled` end that follows is reported, not taken for a refused challenge.
    func testACancelDuringTheCallCancelsTheInnerTaskAndItsEndIsReported() {
        var m = Machine()
        XCTAssertEqual(m.willCall(), .call)
        XCTAssertEqual(m.cancel(), .cancelInnerTask)
        XCTAssertEqual(m.innerTaskNotFound(), .cancelInnerTask, "not made yet: look again")
        XCTAssertEqual(m.cancel(), .none, "a second cancel does nothing")
        XCTAssertEqual(m.callEnded(refusedChallenge: true), .report)
        XCTAssertEqual(m.innerTaskNotFound(), .none, "ended: stop looking")
    }

    func testARefusedChallengeSendsAgainAndACancelThenStopsTheResentRequest() {
        var m = Machine()
        XCTAssertEqual(m.willCall(), .call)
        XCTAssertEqual(m.callEnded(refusedChallenge: true), .sendAgain)
        XCTAssertEqual(m.cancel(), .cancelWork)
        m.resentEnded()
        XCTAssertEqual(m.cancel(), .none)
    }

    /// A cancel looking for the inner task while the call turned into a resend stops the resend.
    func testALookupThatFindsTheResendStopsIt() {
        var m = Machine()
        XCTAssertEqual(m.willCall(), .call)
        XCTAssertEqual(m.callEnded(refusedChallenge: true), .sendAgain)
        XCTAssertEqual(m.innerTaskNotFound(), .cancelWork)
    }

    func testAnEndWithoutACancelIsReported() {
        var m = Machine()
        XCTAssertEqual(m.willCall(), .call)
        XCTAssertEqual(m.callEnded(refusedChallenge: false), .report)
        XCTAssertEqual(m.cancel(), .none, "ended: nothing to stop")
    }
}
