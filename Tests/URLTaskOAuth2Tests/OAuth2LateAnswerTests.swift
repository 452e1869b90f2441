import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// A token answer still on its way when the requests waiting for it give up is read to its end
/// and stored: the server that processed the grant already rotated the refresh token, and
/// dropping its answer would leave the client a dead one (0.2.0: every later refresh failed with
/// `invalid_grant` until the user signed in again).
final class OAuth2LateAnswerTests: XCTestCase {
    /// The token endpoint drips its answer over 4.2 s (15 pieces, 300 ms apart, after rotating the
    /// refresh token); requests wait for a refresh at most 3 s. The first request fails at 3 s
    /// with `URLError.timedOut`; the second, sent at once (it waits until 6 s), waits for the same refresh instead of
    /// sending the old refresh token, and is answered with the token the late answer carried. One
    /// token request in all. With `lateAnswerLimit: .zero` (the transfer cancelled at the
    /// deadline, as in 0.2.0) the second request refreshes with the old refresh token, which the
    /// server rotated away, and fails with `invalid_grant`: sign-in required.
    func testATokenAnswerArrivingAfterItsWaitersGaveUpIsStoredAndUsed() async throws {
        for lateAnswerLimit in [Duration.seconds(30), .zero] {
            let api = try OAuthServer(access: "start")
            defer { api.shutdown() }
            let endpoint = OAuth2TokenEndpoint(url: api.tokenURL, clientID: "tests", timeout: .seconds(3), lateAnswerLimit: lateAnswerLimit)
            // No back-off: the second request may refresh at once if nothing holds it.
            let refreshFailed = Latch<Void>("the refresh failed (limit \(lateAnswerLimit))")
            let auth = OAuth2Authenticator(
                origins: [api.baseURL], tokenEndpoint: endpoint, store: InMemoryCredentialStore(api.credential(access: "start")),
                refreshBackoff: .zero, onRefreshFailure: { _ in _ = refreshFailed.fulfill(()) })
            let manager = URLTaskManager(
                interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
            defer { manager.invalidateAndCancel() }
            api.revokeAccess()
            api.dripTokenAnswers(pieces: 15, every: .milliseconds(300))

            let first = await fetched(manager.session, URLRequest(url: api.apiURL()))
            XCTAssertEqual(first.urlErrorCode, .timedOut, "limit \(lateAnswerLimit): \(first.label)")
            // The endpoint answers at once from now on (the first answer still drips).
            api.dripTokenAnswers(every: nil)
            // Without a late answer, the refresh ends at the same deadline as its waiter: the
            // second request must come after it, or it would join it and time out too.
            if lateAnswerLimit == .zero { try await refreshFailed.wait(timeout: .seconds(10)) }
            let second = await fetched(manager.session, URLRequest(url: api.apiURL()))
            if lateAnswerLimit > .zero {
                XCTAssertEqual(second.status, 200, "the late answer was not used: \(second.label)")
                XCTAssertEqual(api.tokenRequestCount, 1, "a second token request went out")
                XCTAssertEqual(api.refreshTokensReceived, ["refresh-0"])
                let stored = try await auth.currentCredential()
                XCTAssertEqual(stored?.refreshToken, api.currentRefresh, "the rotated refresh token was not kept")
            } else {
                XCTAssertEqual(
                    (second.taskError?.underlying as? OAuth2Error)?.requiresSignIn, true,
                    "the old behaviour: the dropped answer's rotation leaves a dead refresh token: \(second.label)")
                XCTAssertEqual(api.refreshTokensReceived, ["refresh-0", "refresh-0"])
            }
        }
    }
}
