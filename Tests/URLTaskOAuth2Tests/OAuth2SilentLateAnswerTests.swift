import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

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

/// A token endpoint that holds its answer past the refresh's timeout and then closes the
/// connection without one (issue 49, item 6), then answers again. The refresh, read on for its
/// late answer, ended with the transport's `URLError(-1011)` ("Empty reply from server"), taken
/// as a refusal: a 5 s back-off started, and every GET once the endpoint was back failed at once
/// with that stale -1011, through both doors, without a token request.
final class OAuth2SilentDroppedTokenRequestTests: XCTestCase {
    /// Timeout 1 s, late answers read for 2 s more; the endpoint is silent for 1.5 s, then
    /// closes. The first GET fails `timedOut` at the timeout; once the endpoint has closed the
    /// silent connection and answers again, the next GET through each door is answered 200,
    /// after a fresh token request.
    func testTheNextRequestAfterATokenRequestClosedWithoutAnAnswerIsAnswered() async throws {
        let backend = try SilentThenDroppingBackend(silence: .seconds(1.5))
        defer { backend.shutdown() }
        let endpoint = OAuth2TokenEndpoint(url: backend.tokenURL, clientID: "tests", timeout: .seconds(1), lateAnswerLimit: .seconds(2))
        // The default back-off: a refusal holds refreshes for 5 s, far longer than this test.
        let auth = OAuth2Authenticator(
            origins: [backend.baseURL], tokenEndpoint: endpoint,
            store: InMemoryCredentialStore(OAuth2Credential(accessToken: "stale", refreshToken: "refresh", expiresAt: .distantFuture)))
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        defer { manager.invalidateAndCancel() }

        let first = await fetched(manager.session, URLRequest(url: backend.apiURL))
        XCTAssertEqual(first.urlErrorCode, .timedOut, first.label)
        // The silent token request is closed without an answer; the endpoint answers from now on.
        try await backend.dropped.wait(timeout: .seconds(10))
        backend.answer()

        let bySession = await fetched(manager.session, URLRequest(url: backend.apiURL))
        XCTAssertEqual(bySession.status, 200, "manager.session: \(bySession.label)")
        let byMethod = await fetched(manager, URLRequest(url: backend.apiURL))
        XCTAssertEqual(byMethod.status, 200, "manager.data(for:): \(byMethod.label)")
        XCTAssertEqual(backend.tokenRequestCount, 2, "one silent token request, then one fresh refresh")
        let current = try await auth.currentCredential()
        XCTAssertEqual(current?.accessToken, "access-1")
    }
}

/// An API whose bearer token is `access-N` (N the tokens issued so far) and a token endpoint
/// that, until ``answer()``, holds each request for `silence` and then closes the connection
/// without a byte of an answer.
private final class SilentThenDroppingBackend: Sendable {
    private struct State {
        var answering = false
        var issued = 0
        var tokenRequests = 0
    }

    private let server: LoopbackServer
    private let state = LockedState(State())
    /// Fulfilled when a silent token request was closed.
    let dropped = Latch<Void>("the silent token request closed without an answer")

    init(silence: Duration) throws {
        server = try LoopbackServer()
        let state = state
        let dropped = dropped
        server.route(prefix: "/api/") { request in
            let expected = state.withLock { $0.issued > 0 ? "Bearer access-\($0.issued)" : nil }
            guard let expected, request.headers["authorization"] == expected else {
                return ServerResponse(status: 401, headers: ["WWW-Authenticate": "Bearer error=\"invalid_token\""])
            }
            return .text("ok")
        }
        server.route("POST", "/oauth/token") { _ in
            let issued: Int? = state.withLock { state in
                state.tokenRequests += 1
                guard state.answering else { return nil }
                state.issued += 1
                return state.issued
            }
            guard let issued else {
                var silent = ServerResponse(status: 200)
                silent.delay = silence
                silent.dropAfterHeadBytes = 0
                silent.dropStyle = .close
                silent.onSent = { _ in dropped.fulfill(()) }
                return silent
            }
            return .json(Data(#"{"access_token":"access-\#(issued)","token_type":"Bearer","expires_in":3600}"#.utf8))
        }
    }

    var baseURL: URL { server.baseURL }
    var apiURL: URL { server.url("/api/items") }
    var tokenURL: URL { server.url("/oauth/token") }
    var tokenRequestCount: Int { state.withLock { $0.tokenRequests } }

    /// From now on the token endpoint issues tokens.
    func answer() { state.withLock { $0.answering = true } }

    func shutdown() { server.shutdown() }
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
