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

    /// Issue 38: a token endpoint that could not be reached (no connection made) is no refusal.
    /// It starts no back-off (the next refresh goes out at once, so the first one after the
    /// endpoint is back reaches it), it is reported once per episode, and a success ends it.
    func testAnUnreachableEndpointStartsNoBackoffAndTheNextRefreshGoesOut() {
        var m = RefreshFailureStateMachine(backoff: .seconds(5))
        XCTAssertTrue(reports(m.refreshFailed(URLError(.cannotConnectToHost), requiresSignIn: false, at: t0)), "the episode's first")
        XCTAssertTrue(starts(m.mayStartRefresh(at: t0 + .milliseconds(1))), "no back-off: the next refresh goes out at once")
        XCTAssertNil(m.rejection)
        for code: URLError.Code in [
            .cannotFindHost, .dnsLookupFailed, .notConnectedToInternet, .networkConnectionLost, .cannotConnectToHost,
        ] {
            XCTAssertFalse(reports(m.refreshFailed(URLError(code), requiresSignIn: false, at: t0 + .seconds(1))), "\(code): same episode")
            XCTAssertTrue(starts(m.mayStartRefresh(at: t0 + .seconds(1))), "\(code): still no back-off")
        }
        m.refreshSucceeded()
        XCTAssertTrue(starts(m.mayStartRefresh(at: t0 + .seconds(2))))
        XCTAssertTrue(
            reports(m.refreshFailed(URLError(.cannotConnectToHost), requiresSignIn: false, at: t0 + .seconds(2))), "a new episode")
    }

    /// Between an outage and a refusal: a refusal after the endpoint is back (a 5xx, a token
    /// request timed out by a hung endpoint) backs off, in the same episode; an unreachable
    /// endpoint after a back-off ended does not keep one; a rejection still ends the session.
    func testARefusalStillBacksOffAndAnOutageDoesNotExtendIt() {
        var m = RefreshFailureStateMachine(backoff: .seconds(5))
        _ = m.refreshFailed(URLError(.cannotConnectToHost), requiresSignIn: false, at: t0)
        XCTAssertFalse(reports(m.refreshFailed(Down(), requiresSignIn: false, at: t0 + .seconds(1))), "same episode")
        XCTAssertFalse(starts(m.mayStartRefresh(at: t0 + .seconds(2))), "a refusal backs off")
        XCTAssertFalse(reports(m.refreshFailed(URLError(.cannotConnectToHost), requiresSignIn: false, at: t0 + .seconds(6))))
        XCTAssertTrue(starts(m.mayStartRefresh(at: t0 + .seconds(6))), "could not connect: no back-off")
        _ = m.refreshFailed(URLError(.timedOut), requiresSignIn: false, at: t0 + .seconds(7))
        XCTAssertFalse(starts(m.mayStartRefresh(at: t0 + .seconds(8))), "a hung endpoint's timeout is a refusal")
        _ = m.refreshFailed(URLError(.cannotConnectToHost), requiresSignIn: false, at: t0 + .seconds(12))
        XCTAssertTrue(reports(m.refreshFailed(Down(), requiresSignIn: true, at: t0 + .seconds(12))), "now the user must sign in")
        XCTAssertFalse(reports(m.refreshFailed(URLError(.cannotConnectToHost), requiresSignIn: false, at: t0 + .seconds(13))))
        XCTAssertNotNil(m.rejection, "an unreachable endpoint does not lift a rejection")
        XCTAssertFalse(starts(m.mayStartRefresh(at: t0 + .seconds(13))))
    }

    /// Issue 49: a token request whose connection the endpoint closed before a byte of an answer
    /// (a `badServerResponse` the request marked unanswered) is lost, as a reset one is: no
    /// back-off. An unmarked `badServerResponse` (an answer that could not be read) is a refusal.
    func testATokenRequestClosedWithoutAnAnswerStartsNoBackoffButAnUnreadableAnswerDoes() {
        var m = RefreshFailureStateMachine(backoff: .seconds(5))
        let closed = BoundedDataRequestStateMachine.unanswered(URLError(.badServerResponse))
        XCTAssertEqual((closed as? URLError)?.code, .badServerResponse, "the caller still sees the transport's code")
        XCTAssertTrue(reports(m.refreshFailed(closed, requiresSignIn: false, at: t0)), "the episode's first")
        XCTAssertTrue(starts(m.mayStartRefresh(at: t0 + .milliseconds(1))), "closed without an answer: no back-off")
        _ = m.refreshFailed(URLError(.badServerResponse), requiresSignIn: false, at: t0 + .seconds(1))
        XCTAssertFalse(starts(m.mayStartRefresh(at: t0 + .seconds(2))), "an answer that could not be read backs off")
        XCTAssertFalse(RefreshFailureStateMachine.isUnreachable(BoundedDataRequestStateMachine.unanswered(URLError(.timedOut))))
    }
}
