import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2

/// A token endpoint that rotates the refresh token and then stays silent past the client's
/// `timeout` (issue 37, finding 3). Dripping answers were kept (``OAuth2LateAnswerTests``), but a
/// silent one was cut by the token request's own `timeoutInterval`, which equalled `timeout`:
/// the server's late write met a closed connection, the client kept the old refresh token, and the
/// next refresh got `invalid_grant`.
final class OAuth2SilentLateAnswerTests: XCTestCase {
    /// Timeout 1 s, the server answers (silent until then) 2 s after it rotated the refresh
    /// token, late answers are read for 5 s more. The waiting request fails with
    /// `URLError.timedOut` at about 1 s; the late answer is then stored (the store's save is the
    /// event waited for), and the next refresh sends the rotated refresh token and succeeds.
    func testARotatedTokenAnsweredSilentlyAfterTheTimeoutIsStoredAndUsed() async throws {
        let api = try OAuthServer(access: "start")
        defer { api.shutdown() }
        let endpoint = OAuth2TokenEndpoint(url: api.tokenURL, clientID: "tests", timeout: .seconds(1), lateAnswerLimit: .seconds(5))
        let saved = Latch<OAuth2Credential>("the late token answer saved")
        let store = SaveReportingStore(api.credential(access: "start")) { saved.fulfill($0) }
        let written = Latch<ServerResponse.SendOutcome>("the late token answer written")
        api.onTokenAnswerSent { written.fulfill($0) }
        let auth = OAuth2Authenticator(origins: [api.baseURL], tokenEndpoint: endpoint, store: store, refreshBackoff: .zero)
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        defer { manager.invalidateAndCancel() }
        api.revokeAccess()
        api.delayTokenAnswers(by: .seconds(2))

        let start = ContinuousClock.now
        let first = await fetched(manager.session, URLRequest(url: api.apiURL()))
        let failedAfter = start.duration(to: .now)
        XCTAssertEqual(first.urlErrorCode, .timedOut, first.label)
        XCTAssertLessThan(failedAfter, .milliseconds(1900), "the waiting request was held until the late answer")
        XCTAssertGreaterThanOrEqual(failedAfter, .milliseconds(900), "the waiting request failed before the timeout")

        let outcome = try await written.wait(timeout: .seconds(10))
        printFigures(
            "silent late answer: the server's write \(outcome.completed ? "completed" : "failed") after \(outcome.bodyBytesSent) body bytes"
        )
        let stored = try await saved.wait(timeout: .seconds(10))
        let storedAfter = start.duration(to: .now)
        XCTAssertTrue(outcome.completed, "the client closed the connection before the late answer")
        XCTAssertEqual(stored.refreshToken, api.currentRefresh, "the rotated refresh token was not stored")
        XCTAssertNotEqual(stored.refreshToken, "refresh-0")
        printFigures("silent late answer: waiter failed after \(failedAfter), rotated token stored after \(storedAfter)")

        // The next refresh uses the rotated refresh token: no invalid_grant.
        api.delayTokenAnswers(by: nil)
        api.revokeAccess()
        let second = await fetched(manager.session, URLRequest(url: api.apiURL()))
        XCTAssertEqual(second.status, 200, second.label)
        XCTAssertEqual(api.refreshTokensReceived, ["refresh-0", stored.refreshToken])
        let current = try await auth.currentCredential()
        XCTAssertEqual(current?.refreshToken, api.currentRefresh)
    }
}

/// An in-memory store that reports every save: the event a test waits for.
private actor SaveReportingStore: CredentialStore {
    private var credential: OAuth2Credential?
    private let onSave: @Sendable (OAuth2Credential) -> Void

    init(_ credential: OAuth2Credential?, onSave: @escaping @Sendable (OAuth2Credential) -> Void) {
        self.credential = credential
        self.onSave = onSave
    }

    func load() async throws -> OAuth2Credential? { credential }

    func save(_ credential: OAuth2Credential) async throws {
        self.credential = credential
        onSave(credential)
    }

    func clear() async throws { credential = nil }
}
