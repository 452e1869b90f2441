import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// The token endpoint against RFC 6749: client authentication (§2.3.1), what its errors mean
/// (§5.2), `expires_in` (§5.1), and how fast a refresh fails when the endpoint goes away.
final class OAuth2TokenEndpointRFCTests: XCTestCase {
    typealias Kit = ReactorTestKit

    private let stale = OAuth2Credential(accessToken: "stale", refreshToken: "refresh-0", expiresAt: .distantFuture)

    private func form(_ request: RecordedRequest?) -> [String: String] {
        OAuthServer.decodeForm(request?.bodyText ?? "")
    }

    // MARK: Client authentication (§2.3.1)

    func testAConfidentialClientAuthenticatesWithHTTPBasicEachPartFormEncoded() async throws {
        let api = try OAuthServer()
        let id = "app id:1"
        let secret = "s3cr:t+/=&é ü"
        api.requireClient(id: id, secret: secret)
        let endpoint = OAuth2TokenEndpoint(url: api.tokenURL, clientID: id, clientSecret: secret)

        let refreshed = try await endpoint.refresh(stale)
        XCTAssertEqual(refreshed.accessToken, "a-access-1", "the server accepted the client")
        let request = try XCTUnwrap(api.tokenRequests.first)
        // Written out by hand: each part form-urlencoded, joined by ':', then base64.
        let expected = "Basic " + Data("app%20id%3A1:s3cr%3At%2B%2F%3D%26%C3%A9%20%C3%BC".utf8).base64EncodedString()
        XCTAssertEqual(request.headers["authorization"], expected)
        XCTAssertEqual(form(request), ["grant_type": "refresh_token", "refresh_token": "refresh-0"], "no client credentials in the body")
        XCTAssertFalse(request.bodyText.contains("s3cr"))
    }

    func testTheSecretGoesInTheBodyWhenAskedAndAPublicClientSendsOnlyItsID() async throws {
        let api = try OAuthServer()
        api.requireClient(id: "app", secret: "s3cret")
        let inBody = OAuth2TokenEndpoint(url: api.tokenURL, clientID: "app", clientSecret: "s3cret", clientAuthentication: .requestBody)
        let refreshed = try await inBody.refresh(stale)
        XCTAssertEqual(refreshed.accessToken, "a-access-1")
        XCTAssertNil(api.tokenRequests.first?.headers["authorization"])
        XCTAssertEqual(
            form(api.tokenRequests.first),
            [
                "grant_type": "refresh_token", "refresh_token": "refresh-0", "client_id": "app", "client_secret": "s3cret",
            ])

        let open = try OAuthServer()
        _ = try await OAuth2TokenEndpoint(url: open.tokenURL, clientID: "app").refresh(stale)
        XCTAssertNil(open.tokenRequests.first?.headers["authorization"], "a public client has nothing to put in Basic")
        XCTAssertEqual(form(open.tokenRequests.first), ["grant_type": "refresh_token", "refresh_token": "refresh-0", "client_id": "app"])
    }

    func testAWrongSecretIsAConfigurationErrorThatDoesNotEndTheSession() async throws {
        let api = try OAuthServer(access: nil)
        api.requireClient(id: "app", secret: "right")
        let hookCalls = CallCounter()
        let hookRan = Latch<Void>("the hook ran")
        let auth = OAuth2Authenticator(
            origins: [api.baseURL],
            tokenEndpoint: OAuth2TokenEndpoint(url: api.tokenURL, clientID: "app", clientSecret: "wrong-secret"),
            store: InMemoryCredentialStore(api.credential(access: "stale")),
            // No back-off: the subject is that the failure is not final (OAuth2RefreshBackoffTests
            // pins what happens within one).
            refreshBackoff: .zero,
            onRefreshFailure: { _ in
                hookCalls.increment()
                hookRan.fulfill(())
            })
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])

        let first = await Kit.fetch(manager.session, api.apiURL())
        guard let failure = first.taskError, failure.code == .authenticationFailed, let error = failure.underlying as? OAuth2Error else {
            return XCTFail(first.label)
        }
        // The server answers 401 invalid_client with `WWW-Authenticate: Basic`, as §5.2 says.
        // URLSession on Linux drops the body of a refused challenge, so the code may be absent.
        guard case .tokenRequestRejected(401, let code, _, api.endpoint.url) = error, code == nil || code == "invalid_client" else {
            return XCTFail("\(error)")
        }
        XCTAssertTrue(error.isConfigurationError)
        XCTAssertFalse(error.requiresSignIn, "a new sign-in would be refused the same way")
        XCTAssertTrue(error.description.contains("client configuration"), error.description)
        XCTAssertFalse(error.description.contains("wrong-secret"))
        try await hookRan.wait(timeout: .seconds(10))
        XCTAssertEqual(hookCalls.value, 1)

        // Not final: the next request asks the token endpoint again (a fix on the server's side
        // would be picked up), where a rejected grant would have failed it without a request.
        let second = await Kit.fetch(manager.session, api.apiURL())
        XCTAssertNotNil(second.taskError, second.label)
        XCTAssertEqual(api.tokenRequestCount, 2)
        XCTAssertEqual(hookCalls.value, 1, "the same failure episode: the hook is not called again")
    }

    // MARK: Errors (§5.2)

    func testOnlyInvalidGrantRequiresSignInAndClientErrorsAreConfigurationErrors() {
        func rejected(_ status: Int, _ code: String?) -> OAuth2Error {
            .tokenRequestRejected(status: status, error: code, description: nil)
        }
        let cases: [(OAuth2Error, requiresSignIn: Bool, configuration: Bool)] = [
            (rejected(400, "invalid_grant"), true, false),
            (rejected(401, "invalid_grant"), true, false),
            (rejected(400, "invalid_client"), false, true),
            (rejected(401, "invalid_client"), false, true),
            (rejected(400, "invalid_request"), false, true),
            (rejected(400, "invalid_scope"), false, true),
            (rejected(400, "unauthorized_client"), false, true),
            (rejected(400, "unsupported_grant_type"), false, true),
            (rejected(401, nil), false, true),  // a bare 401 from a token endpoint: client authentication
            (rejected(401, "something_else"), false, true),
            (rejected(400, nil), false, false),  // no code at all: temporary
            (rejected(400, "something_else"), false, false),
            (rejected(503, "temporarily_unavailable"), false, false),
            (rejected(500, "invalid_grant"), false, false),
            (.notSignedIn, true, false),
            (.noRefreshToken, true, false),
            (.invalidTokenResponse(reason: "x"), false, false),
        ]
        for (error, requiresSignIn, configuration) in cases {
            XCTAssertEqual(error.requiresSignIn, requiresSignIn, "\(error)")
            XCTAssertEqual(error.isConfigurationError, configuration, "\(error)")
            XCTAssertEqual(error.description.contains("client configuration"), configuration, "\(error)")
        }
    }

    // MARK: expires_in (§5.1)

    func testExpiresInMustBeAPositiveNumberAndIsCappedAtTenYears() throws {
        let issued = Date(timeIntervalSince1970: 1_000_000)
        func credential(_ expiresIn: Any?) throws -> OAuth2Credential {
            var object: [String: Any] = ["access_token": "a", "token_type": "Bearer"]
            object["expires_in"] = expiresIn
            return try OAuth2TokenEndpoint.credential(from: object, issuedAt: issued, previous: nil)
        }
        for invalid: Any in [-1, 0, -0.5, "-60", "0", "nan", "inf", "soon", Double.nan, Double.infinity] {
            XCTAssertThrowsError(try credential(invalid), "\(invalid)") { error in
                guard case .invalidTokenResponse(let reason, _)? = error as? OAuth2Error else { return XCTFail("\(error)") }
                XCTAssertTrue(reason.contains("expires_in"), reason)
            }
        }
        let tenYears: TimeInterval = 10 * 365 * 24 * 60 * 60
        XCTAssertEqual(try credential(1e30).expiresAt, issued.addingTimeInterval(tenYears))
        XCTAssertEqual(try credential("1e30").expiresAt, issued.addingTimeInterval(tenYears))
        XCTAssertEqual(try credential(tenYears + 1).expiresAt, issued.addingTimeInterval(tenYears))
        XCTAssertEqual(try credential(3600).expiresAt, issued.addingTimeInterval(3600))
        XCTAssertEqual(try credential(" 60 ").expiresAt, issued.addingTimeInterval(60))
        XCTAssertEqual(try credential(0.5).expiresAt, issued.addingTimeInterval(0.5))
        XCTAssertEqual(try credential(nil).expiresAt, .distantFuture, "left out: renewed when a 401 says so")
        XCTAssertEqual(try credential(NSNull()).expiresAt, .distantFuture)
    }

    // MARK: A token endpoint that went away

    /// A pooled keep-alive connection the server has stopped answering on (what a NAT or a load
    /// balancer that silently dropped an idle connection looks like): the first refresh's
    /// connection answers nothing more, a new connection is answered at once. Before the fix
    /// the second refresh rode the dead connection until the session's 30 s timeout.
    func testARefreshDoesNotWaitOnAKeepAliveConnectionTheServerStoppedAnswering() async throws {
        let server = try LoopbackServer()
        let stopAnswering = Gate()
        defer {
            stopAnswering.open()
            server.shutdown()
        }
        let connectionsSeen = LockedBox<Set<Int>>([])
        server.route("POST", "/token") { request in
            let reused = connectionsSeen.withLock { !$0.insert(request.connectionID).inserted }
            if reused { stopAnswering.wait(timeout: .seconds(40)) }
            return .json(Data(#"{"access_token":"fresh","token_type":"Bearer","expires_in":3600}"#.utf8))
        }
        let endpoint = OAuth2TokenEndpoint(url: server.url("/token"), clientID: "app")
        _ = try await endpoint.refresh(stale)

        let started = ContinuousClock.now
        let second = Latch<Result<OAuth2Credential, any Error>>("the second refresh ended")
        Task { [stale] in
            do { second.fulfill(.success(try await endpoint.refresh(stale))) } catch { second.fulfill(.failure(error)) }
        }
        let outcome = try await second.wait(timeout: .seconds(8))
        let elapsed = started.duration(to: .now)
        XCTAssertEqual(try outcome.get().accessToken, "fresh")
        let requests = server.requests(path: "/token")
        XCTAssertEqual(requests.map { $0.headers["connection"] }, ["close", "close"])
        XCTAssertEqual(Set(requests.map(\.connectionID)).count, 2, "each token request had a connection of its own")
        printFigures(
            "[token endpoint] second refresh after the first connection stopped answering: \(elapsed.formatted(.units(allowed: [.milliseconds])))"
        )
    }

    /// A token endpoint that accepts the request and never answers fails the refresh, and every
    /// request waiting for it, at the endpoint's timeout rather than the session's 30 s.
    func testAHungTokenEndpointFailsTheWaitingRequestsAtTheEndpointsTimeout() async throws {
        XCTAssertEqual(OAuth2TokenEndpoint(url: URL(string: "https://auth.example.com/token")!).timeout, .seconds(10))
        XCTAssertEqual(OAuth2TokenEndpoint(url: URL(string: "https://auth.example.com/token")!).tokenRequest([:]).timeoutInterval, 10)
        XCTAssertEqual(OAuth2TokenEndpoint.defaultSession.configuration.timeoutIntervalForRequest, 10)

        let api = try OAuthServer(access: nil)
        let hang = Gate()
        defer { hang.open() }
        api.onTokenRequest { hang.wait(timeout: .seconds(40)) }
        let auth = OAuth2Authenticator(
            origins: [api.baseURL], tokenEndpoint: OAuth2TokenEndpoint(url: api.tokenURL, clientID: "tests", timeout: .seconds(1)),
            store: InMemoryCredentialStore(api.credential(access: "stale")))
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        let url = api.apiURL()

        let started = ContinuousClock.now
        let ended = Latch<[Fetched]>("the requests ended")
        Task { ended.fulfill(await Kit.storm(manager.session, count: 5) { _ in URLRequest(url: url) }) }
        let results = try await ended.wait(timeout: .seconds(8))
        let elapsed = started.duration(to: .now)
        // A refresh that failed on the network gives its waiters the URLError itself.
        let timedOut = results.filter {
            guard let error = $0.error as? URLError else { return false }
            return error.code == .timedOut && error.userInfo[URLTaskError.componentUserInfoKey] as? String == "OAuth2RefreshReactor"
        }
        XCTAssertEqual(timedOut.count, 5, "\(Kit.tally(results))")
        XCTAssertEqual(api.tokenRequestCount, 1)
        printFigures(
            "[token endpoint] 5 requests behind a hung refresh (timeout 1 s) failed after \(elapsed.formatted(.units(allowed: [.milliseconds])))"
        )
    }
}
