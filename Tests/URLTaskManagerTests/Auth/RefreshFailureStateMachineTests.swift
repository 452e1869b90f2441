import Foundation
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2

/// Every transition of ``RefreshFailureStateMachine``, without I/O.
final class RefreshFailureStateMachineTests: XCTestCase {
    struct Down: Error {}

    private let t0 = ContinuousClock.now

    private func starts(_ decision: RefreshFailureStateMachine.RefreshDecision) -> Bool {
        if case .start = decision { return true }
        return false
    }

    private func reports(_ action: RefreshFailureStateMachine.FailureAction) -> Bool {
        if case .report = action { return true }
        return false
    }

    func testATemporaryFailureHoldsRefreshesForTheBackoffAndReportsOncePerEpisode() {
        var m = RefreshFailureStateMachine(backoff: .seconds(5))
        XCTAssertTrue(starts(m.mayStartRefresh(at: t0)))
        XCTAssertTrue(reports(m.refreshFailed(Down(), requiresSignIn: false, at: t0)), "the episode's first failure is reported")
        XCTAssertFalse(starts(m.mayStartRefresh(at: t0 + .seconds(4))), "within the back-off: fail without a refresh")
        XCTAssertTrue(starts(m.mayStartRefresh(at: t0 + .seconds(5))), "after it: try again")
        XCTAssertFalse(reports(m.refreshFailed(Down(), requiresSignIn: false, at: t0 + .seconds(5))), "same episode: not again")
        XCTAssertFalse(starts(m.mayStartRefresh(at: t0 + .seconds(9))), "the back-off restarts at the new failure")
        XCTAssertNil(m.rejection)
        m.refreshSucceeded()
        XCTAssertTrue(starts(m.mayStartRefresh(at: t0 + .seconds(9))))
        XCTAssertTrue(reports(m.refreshFailed(Down(), requiresSignIn: false, at: t0 + .seconds(9))), "a new episode")
    }

    func testARejectionLastsUntilTheCredentialChangesAndIsReportedEvenWithinAnEpisode() {
        var m = RefreshFailureStateMachine(backoff: .seconds(5))
        _ = m.refreshFailed(Down(), requiresSignIn: false, at: t0)
        XCTAssertTrue(reports(m.refreshFailed(Down(), requiresSignIn: true, at: t0 + .seconds(6))), "now the user must sign in")
        XCTAssertNotNil(m.rejection)
        XCTAssertFalse(starts(m.mayStartRefresh(at: t0 + .seconds(3600))), "no back-off ends a rejection")
        XCTAssertFalse(reports(m.refreshFailed(Down(), requiresSignIn: true, at: t0 + .seconds(7))))
        m.credentialReplaced()
        XCTAssertNil(m.rejection)
        XCTAssertTrue(starts(m.mayStartRefresh(at: t0 + .seconds(7))))
        XCTAssertTrue(reports(m.refreshFailed(Down(), requiresSignIn: true, at: t0 + .seconds(8))))
    }
}
