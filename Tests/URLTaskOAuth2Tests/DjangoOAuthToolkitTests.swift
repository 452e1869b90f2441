import Foundation
import LoopbackServer
import XCTest

@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What the OAuth2 kit does today against a real, maintained authorization server:
/// django-oauth-toolkit 3.4.1, started by each test on 127.0.0.1 (``DjangoOAuthServer``;
/// skipped, saying how to install it, where it is absent). Every request is real HTTP on
/// loopback; the server's own records (its request log, its database) are what is counted.
final class DjangoOAuthToolkitTests: XCTestCase {
    typealias Server = DjangoOAuthServer
    typealias Kit = ReactorTestKit

    private func confidentialEndpoint(
        _ server: Server, _ authentication: OAuth2TokenEndpoint.ClientAuthentication = .basic
    )
        -> OAuth2TokenEndpoint
    {
        OAuth2TokenEndpoint(
            url: server.tokenURL, clientID: Server.confidentialClientID, clientSecret: Server.confidentialClientSecret,
            clientAuthentication: authentication)
    }

    private func publicEndpoint(_ server: Server) -> OAuth2TokenEndpoint {
        OAuth2TokenEndpoint(url: server.tokenURL, clientID: Server.publicClientID)
    }

    /// Signs the test user in through the server's authorization endpoint (PKCE S256) and
    /// returns the credential the code bought.
    private func signIn(_ server: Server, _ endpoint: OAuth2TokenEndpoint, scope: String? = "read write") async throws -> OAuth2Credential {
        let flow = OAuth2AuthorizationCodeFlow(
            authorizationEndpoint: server.authorizeURL, tokenEndpoint: endpoint, redirectURI: server.loopbackRedirectURI(port: 53682),
            scope: scope)
        let attempt = flow.start()
        return try await flow.credential(fromCallback: try await server.browse(attempt.url), for: attempt)
    }

    private func makeManager(_ auth: OAuth2Authenticator) -> URLTaskManager {
        URLTaskManager(interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
    }

    /// Every text an error shows: its description, its debug and localized forms, its `NSError`
    /// bridge and what `dump` prints (a crash reporter's view).
    private func texts(of error: any Error) -> [String] {
        var dumped = ""
        dump(error, to: &dumped)
        let bridged = error as NSError
        var all = ["\(error)", String(reflecting: error), error.localizedDescription, "\(bridged)", "\(bridged.userInfo)", dumped]
        if let task = error as? URLTaskError, let underlying = task.underlying { all += texts(of: underlying) }
        return all
    }

    private func assertNoSecret(in error: any Error, _ secrets: [String], file: StaticString = #filePath, line: UInt = #line) {
        for text in texts(of: error) {
            for secret in secrets where text.contains(secret) {
                XCTFail("an error's text shows a secret of \(secret.count) characters: \(text)", file: file, line: line)
            }
        }
    }

    // MARK: - The harness

    func testTheServerStartsOnAFreePortPublishesItsMetadataAndStopsWhenItsStandardInputCloses() async throws {
        let first = try Server.start()
        let second = try Server.start()
        XCTAssertNotEqual(first.port, second.port)
        printFigures(
            "[dot] start-up: \(first.startupTime.formatted(.units(allowed: [.milliseconds]))) and \(second.startupTime.formatted(.units(allowed: [.milliseconds]))) (serve.py's own: \(first.serverStartupMilliseconds) ms, \(second.serverStartupMilliseconds) ms)"
        )
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }

        // RFC 8414: DOT 3 publishes it (at the root, where this project mounts it).
        let (data, _) = try await session.data(from: first.metadataURL)
        let metadata = try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        XCTAssertEqual(metadata["issuer"] as? String, first.issuer)
        XCTAssertEqual(metadata["authorization_endpoint"] as? String, first.authorizeURL.absoluteString)
        XCTAssertEqual(metadata["token_endpoint"] as? String, first.tokenURL.absoluteString)
        XCTAssertEqual(metadata["revocation_endpoint"] as? String, first.revocationURL.absoluteString)
        XCTAssertEqual(metadata["introspection_endpoint"] as? String, first.introspectionURL.absoluteString)
        XCTAssertEqual(metadata["code_challenge_methods_supported"] as? [String], ["S256"])
        XCTAssertEqual(
            Set(metadata["token_endpoint_auth_methods_supported"] as? [String] ?? []), ["client_secret_basic", "client_secret_post"])
        XCTAssertNil(metadata["authorization_response_iss_parameter_supported"], "RFC 9207's iss is off unless configured")
        // RFC 9728: the protected resource's metadata names the server.
        let (resourceData, _) = try await session.data(from: first.protectedResourceMetadataURL)
        let resource = try XCTUnwrap(try JSONSerialization.jsonObject(with: resourceData) as? [String: Any])
        XCTAssertEqual(resource["authorization_servers"] as? [String], [first.issuer])
        // No OpenID Connect discovery: OIDC is off (it needs OIDC_ENABLED and a signing key).
        let (_, discovery) = try await session.data(from: first.url("/.well-known/openid-configuration"))
        XCTAssertEqual((discovery as? HTTPURLResponse)?.statusCode, 404)

        XCTAssertTrue(first.closeStandardInput(), "the server exits when its standard input closes")
        XCTAssertEqual(first.exitStatus, 0)
        XCTAssertTrue(first.output.contains("DOT-STOPPED"), first.output)
        do {
            _ = try await session.data(from: first.metadataURL)
            XCTFail("the stopped server answered")
        } catch let error as URLError {
            XCTAssertEqual(error.code, .cannotConnectToHost)
        }
        let (_, stillThere) = try await session.data(from: second.metadataURL)
        XCTAssertEqual((stillThere as? HTTPURLResponse)?.statusCode, 200)
    }

    // MARK: - Client credentials

    func testClientCredentialsWithTheSecretInBasicAndInTheForm() async throws {
        let server = try Server.start(.init(accessTokenLifetime: 120))
        for (authentication, recorded, parameters) in [
            (OAuth2TokenEndpoint.ClientAuthentication.basic, "basic", ["grant_type", "scope"]),
            (.requestBody, "form", ["client_id", "client_secret", "grant_type", "scope"]),
        ] {
            let endpoint = confidentialEndpoint(server, authentication)
            let asked = Date()
            let credential = try await endpoint.requestToken(["grant_type": "client_credentials", "scope": "read"])
            XCTAssertNil(credential.refreshToken, "RFC 6749 §4.4.3: no refresh token for client credentials")
            XCTAssertEqual(credential.scope, "read")
            XCTAssertEqual(credential.expiresAt.timeIntervalSince(asked), 120, accuracy: 5)
            let tokenRequests = try await server.tokenRequests()
            let request = try XCTUnwrap(tokenRequests.last)
            XCTAssertEqual(request.grantType, "client_credentials")
            XCTAssertEqual(request.status, 200)
            XCTAssertEqual(request.clientAuthentication, recorded, "\(authentication)")
            XCTAssertEqual(request.parameters, parameters, "\(authentication): the secret is in the form only when asked")

            let introspection = try await server.introspect(token: credential.accessToken)
            XCTAssertTrue(introspection.active)
            XCTAssertEqual(introspection.clientID, Server.confidentialClientID)
            XCTAssertEqual(introspection.scope, "read")

            // The token works for the API through a manager.
            let auth = OAuth2Authenticator(origins: [server.baseURL], tokenEndpoint: endpoint, store: InMemoryCredentialStore(credential))
            let manager = makeManager(auth)
            let fetched = await Kit.fetch(manager.session, server.apiURL)
            XCTAssertEqual(fetched.status, 200, fetched.label)
            manager.session.invalidateAndCancel()
        }
        let tokenRequests = try await server.tokenRequests()
        XCTAssertEqual(tokenRequests.count, 2, "no refresh: each credential was fresh")
    }

    // MARK: - The authorization code with PKCE

    func testTheAuthorizationCodeWithPKCEThroughTheServersAuthorizeEndpoint() async throws {
        let server = try Server.start(.init(sendsIssuerInAuthorizationResponses: true))
        let cases: [(name: String, endpoint: OAuth2TokenEndpoint, redirect: URL, authentication: String)] = [
            ("public client, loopback redirect", publicEndpoint(server), server.loopbackRedirectURI(port: 53682), "client_id"),
            ("public client, custom scheme", publicEndpoint(server), Server.customSchemeRedirectURI, "client_id"),
            ("confidential client, HTTP Basic", confidentialEndpoint(server), server.loopbackRedirectURI(port: 61000), "basic"),
        ]
        for (name, endpoint, redirect, authentication) in cases {
            let flow = OAuth2AuthorizationCodeFlow(
                authorizationEndpoint: server.authorizeURL, tokenEndpoint: endpoint, redirectURI: redirect, scope: "read",
                issuer: server.issuer, requiresIssuer: true)
            let attempt = flow.start()
            let callback = try await server.browse(attempt.url)
            XCTAssertTrue(callback.absoluteString.hasPrefix(redirect.absoluteString + "?"), "\(name): \(callback)")
            XCTAssertEqual(OAuth2AuthorizationCodeFlow.queryFields(of: callback)["iss"], server.issuer, name)

            let store = InMemoryCredentialStore()
            let auth = OAuth2Authenticator(origins: [server.baseURL], tokenEndpoint: endpoint, store: store)
            try await flow.signIn(auth, callback: callback, for: attempt)
            let stored = try await store.load()
            let credential = try XCTUnwrap(stored, name)
            XCTAssertNotNil(credential.refreshToken, name)
            XCTAssertEqual(credential.scope, "read", name)

            let tokenRequests = try await server.tokenRequests()
            let exchange = try XCTUnwrap(tokenRequests.last)
            XCTAssertEqual(exchange.grantType, "authorization_code", name)
            XCTAssertEqual(exchange.status, 200, name)
            XCTAssertEqual(exchange.clientAuthentication, authentication, name)
            XCTAssertTrue(exchange.parameters.contains("code_verifier"), name)
            XCTAssertTrue(exchange.parameters.contains("redirect_uri"), name)

            let introspection = try await server.introspect(token: credential.accessToken)
            XCTAssertEqual(introspection.active, true, name)
            XCTAssertEqual(introspection.username, Server.username, name)
            XCTAssertEqual(introspection.clientID, endpoint.clientID, name)

            let manager = makeManager(auth)
            let fetched = await Kit.fetch(manager.session, server.apiURL)
            XCTAssertEqual(fetched.status, 200, "\(name): \(fetched.label)")
            XCTAssertEqual(fetched.text, #"{"username": "ada"}"#, name)
            manager.session.invalidateAndCancel()
        }
    }

    func testTheServerRequiresPKCEAndRefusesAWrongVerifierAndTheFlowChecksTheIssuer() async throws {
        let server = try Server.start(.init(sendsIssuerInAuthorizationResponses: true))
        let flow = OAuth2AuthorizationCodeFlow(
            authorizationEndpoint: server.authorizeURL, tokenEndpoint: publicEndpoint(server), redirectURI: Server.customSchemeRedirectURI,
            issuer: server.issuer, requiresIssuer: true)

        // PKCE required: an authorization URL without the challenge gets an error callback...
        let attempt = flow.start()
        var parts = try XCTUnwrap(URLComponents(url: attempt.url, resolvingAgainstBaseURL: false))
        parts.queryItems = parts.queryItems?.filter { !$0.name.hasPrefix("code_challenge") }
        let refused = try await server.browse(try XCTUnwrap(parts.url))
        let fields = OAuth2AuthorizationCodeFlow.queryFields(of: refused)
        XCTAssertEqual(fields["error"], "invalid_request")
        // ...without RFC 9207's `iss`, which DOT 3.4.1 puts on successful answers only (RFC 9207
        // §2 asks for it on error answers too). A flow that requires `iss` then reports a
        // mix-up, not the server's error; one that does not require it reports the error.
        XCTAssertNil(fields["iss"])
        XCTAssertThrowsError(try flow.authorizationCode(from: refused, for: attempt)) { error in
            XCTAssertEqual(error as? OAuth2AuthorizationError, .issuerMismatch(expected: server.issuer, received: nil))
        }
        var lenient = flow
        lenient.requiresIssuer = false
        XCTAssertThrowsError(try lenient.authorizationCode(from: refused, for: attempt)) { error in
            XCTAssertEqual(
                error as? OAuth2AuthorizationError, .authorizationFailed(error: "invalid_request", description: "Code challenge required."))
        }

        // A wrong verifier (the code intercepted, not the verifier) is refused by the server.
        let genuine = flow.start()
        let callback = try await server.browse(genuine.url)
        let attacker = OAuth2AuthorizationRequest(
            url: genuine.url, state: genuine.state, codeVerifier: flow.start().codeVerifier, redirectURI: genuine.redirectURI)
        do {
            _ = try await flow.credential(fromCallback: callback, for: attacker)
            XCTFail("a wrong verifier was accepted")
        } catch let error as OAuth2Error {
            XCTAssertEqual(error.serverErrorCode, "invalid_grant")
            XCTAssertTrue(error.requiresSignIn)
        }

        // Another server's issuer: refused before anything is sent.
        let before = try await server.tokenRequests().count
        let mixedUp = OAuth2AuthorizationCodeFlow(
            authorizationEndpoint: server.authorizeURL, tokenEndpoint: publicEndpoint(server), redirectURI: Server.customSchemeRedirectURI,
            issuer: "https://other.example", requiresIssuer: true)
        let third = mixedUp.start()
        let mixedUpCallback = try await server.browse(third.url)
        do {
            _ = try await mixedUp.credential(fromCallback: mixedUpCallback, for: third)
            XCTFail("another issuer's callback was exchanged")
        } catch let error as OAuth2AuthorizationError {
            XCTAssertEqual(error, .issuerMismatch(expected: "https://other.example", received: server.issuer))
        }
        let after = try await server.tokenRequests().count
        XCTAssertEqual(after, before, "nothing was exchanged")
    }

    // MARK: - Refresh with rotation

    /// 50 callers send back to back through one manager from the sign-in of a 3-second token
    /// until one lifetime after its expiry, with the default 60 s `refreshLeeway`: one refresh
    /// per expiry (a quarter of the lifetime before it: at 2.25 s and 4.5 s), each rotating the
    /// refresh token, no `invalid_grant`, every call 200. Before issue 47 the leeway had to be
    /// zero: 60 s refreshed a 3-second token at the first call.
    func testFiftyConcurrentCallersAcrossTwoExpiriesOfA3SecondTokenMakeOneRefreshEach() async throws {
        let lifetime = 3
        let server = try Server.start(.init(accessTokenLifetime: lifetime))
        let endpoint = confidentialEndpoint(server)
        let signedIn = try await signIn(server, endpoint)
        let store = InMemoryCredentialStore(signedIn)
        let hook = Kit.Counter()
        let auth = OAuth2Authenticator(
            origins: [server.baseURL], tokenEndpoint: endpoint, store: store, onRefreshFailure: { _ in hook.increment() })
        let manager = makeManager(auth)
        defer { manager.session.invalidateAndCancel() }
        let signInRequests = try await server.tokenRequests().count
        XCTAssertEqual(signInRequests, 1)

        // Two expiries: each renewed a quarter of the lifetime before it, at 2.25 s and 4.5 s
        // from the sign-in; the third would be at 6.75 s.
        let end = signedIn.expiresAt.addingTimeInterval(Double(lifetime))
        let url = server.apiURL
        let session = manager.session
        let started = ContinuousClock.now
        let results = await withTaskGroup(of: [Kit.Fetch].self) { group in
            for _ in 0..<50 {
                group.addTask {
                    var mine: [Kit.Fetch] = []
                    while Date() < end, mine.count < 1_000 {
                        mine.append(await Kit.fetch(session, url))
                    }
                    return mine
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        let wall = started.duration(to: .now)

        XCTAssertEqual(Kit.tally(results), ["200": results.count])
        let refreshes = try await server.tokenRequests().dropFirst(signInRequests)
        XCTAssertEqual(refreshes.map(\.grantType), ["refresh_token", "refresh_token"], "one refresh per expiry")
        XCTAssertEqual(refreshes.map(\.status), [200, 200], "no invalid_grant")
        XCTAssertEqual(hook.value, 0)

        // Each refresh rotated the refresh token: the signed-in one is revoked, the stored one live.
        let loaded = try await store.load()
        let current = try XCTUnwrap(loaded)
        let original = try XCTUnwrap(signedIn.refreshToken)
        let latest = try XCTUnwrap(current.refreshToken)
        XCTAssertNotEqual(latest, original)
        let originalState = try await server.refreshTokenState(original)
        XCTAssertTrue(originalState.exists && originalState.revoked)
        let latestState = try await server.refreshTokenState(latest)
        XCTAssertTrue(latestState.exists && !latestState.revoked)
        let counts = try await server.tokenCounts()
        XCTAssertEqual(counts.refreshTokens, 3)
        XCTAssertEqual(counts.revokedRefreshTokens, 2)
        let introspection = try await server.introspect(token: current.accessToken)
        XCTAssertTrue(introspection.active)
        let apiRequests = try await server.requests().filter { $0.path == url.path }
        let refusals = apiRequests.filter { $0.status == 401 }.count
        printFigures(
            "[dot] 50 callers across two expiries of a \(lifetime) s token: \(results.count) calls, all 200, token requests=\(refreshes.count) (refresh_token, 200), 401s the API sent (absorbed)=\(refusals), wall=\(wall.formatted(.units(allowed: [.milliseconds])))"
        )
    }

    /// The server settings the later tests rely on: without a grace period a rotated-away
    /// refresh token is refused (`invalid_grant`, which the kit classes as "sign in again"),
    /// with one it is taken again, and without rotation the same refresh token comes back.
    func testRotationWithoutAndWithAGracePeriodAndNoRotation() async throws {
        let cases: [(name: String, configuration: Server.Configuration, rotates: Bool, reuseAccepted: Bool)] = [
            ("rotation, no grace period", .init(rotatesRefreshTokens: true, refreshGracePeriod: 0), true, false),
            ("rotation, 60 s grace period", .init(rotatesRefreshTokens: true, refreshGracePeriod: 60), true, true),
            ("no rotation", .init(rotatesRefreshTokens: false), false, true),
        ]
        for (name, configuration, rotates, reuseAccepted) in cases {
            let server = try Server.start(configuration)
            let endpoint = confidentialEndpoint(server)
            let first = try await signIn(server, endpoint)
            let second = try await endpoint.refresh(first)
            XCTAssertNotEqual(second.accessToken, first.accessToken, name)
            XCTAssertEqual(second.refreshToken != first.refreshToken, rotates, name)
            do {
                let again = try await endpoint.refresh(first)
                XCTAssertTrue(reuseAccepted, "\(name): the first refresh token was taken twice")
                XCTAssertFalse(again.accessToken.isEmpty)
            } catch let error as OAuth2Error {
                XCTAssertFalse(reuseAccepted, "\(name): \(error)")
                XCTAssertEqual(error.serverErrorCode, "invalid_grant", name)
                XCTAssertTrue(error.requiresSignIn, name)
            }
        }
    }

    // MARK: - What the API answers

    /// The API that answers RFC 6750's 401 with a Bearer challenge gets an expired token
    /// refreshed and the call sent again; DOT's default view answers a bare 403, which the kit
    /// hands to the caller as it is, with no refresh.
    func testAnExpiredTokenIsRefreshedOnTheAPIs401ButNotOnDOTsDefault403() async throws {
        let server = try Server.start()
        let endpoint = confidentialEndpoint(server)
        let signedIn = try await signIn(server, endpoint)
        let store = InMemoryCredentialStore(signedIn)
        let auth = OAuth2Authenticator(origins: [server.baseURL], tokenEndpoint: endpoint, store: store)
        let manager = makeManager(auth)
        defer { manager.session.invalidateAndCancel() }
        let first = await Kit.fetch(manager.session, server.apiURL)
        XCTAssertEqual(first.status, 200, first.label)

        try await server.expireAccessToken(signedIn.accessToken)
        let refreshed = await Kit.fetch(manager.session, server.apiURL)
        XCTAssertEqual(refreshed.status, 200, refreshed.label)
        let afterRefresh = try await server.requests()
        XCTAssertEqual(afterRefresh.filter { $0.path == "/api/profile" }.map(\.status), [200, 401, 200])
        XCTAssertEqual(afterRefresh.filter { $0.path == "/o/token/" }.map(\.grantType), ["authorization_code", "refresh_token"])

        let loaded = try await store.load()
        let current = try XCTUnwrap(loaded)
        XCTAssertNotEqual(current.accessToken, signedIn.accessToken)
        try await server.expireAccessToken(current.accessToken)
        let introspection = try await server.introspect(token: current.accessToken)
        XCTAssertFalse(introspection.active)
        let forbidden = await Kit.fetch(manager.session, server.apiWithDOTDefaultURL)
        guard case .response(let status, let headers, let body) = forbidden else { return XCTFail(forbidden.label) }
        XCTAssertEqual(status, 403)
        XCTAssertNil(headers["www-authenticate"], "DOT's default sends no challenge")
        XCTAssertEqual(body.count, 0)
        let afterForbidden = try await server.requests()
        XCTAssertEqual(afterForbidden.filter { $0.path == "/o/token/" }.count, 2, "a 403 starts no refresh")
        XCTAssertEqual(afterForbidden.filter { $0.path == "/api/profile-dot-default" }.map(\.status), [403])
    }

    // MARK: - Errors

    /// The server's refusals become typed errors, and no text of any of them (description,
    /// debug description, localized description, `NSError` bridge, `dump`) shows a secret, a
    /// token, a code or a verifier.
    func testRefusalsAreTypedAndNoTextShowsASecret() async throws {
        let server = try Server.start()
        let wrongSecret = "wrong-secret-that-must-not-show-up"
        var secrets = [Server.confidentialClientSecret, wrongSecret, Server.password]

        // A wrong client secret, in Basic and in the form: 401 invalid_client, a configuration error.
        for authentication in [OAuth2TokenEndpoint.ClientAuthentication.basic, .requestBody] {
            let wrong = OAuth2TokenEndpoint(
                url: server.tokenURL, clientID: Server.confidentialClientID, clientSecret: wrongSecret, clientAuthentication: authentication
            )
            do {
                _ = try await wrong.requestToken(["grant_type": "client_credentials"])
                XCTFail("\(authentication): a wrong secret was accepted")
            } catch let error as OAuth2Error {
                guard case .tokenRequestRejected(let status, let code, _, let url) = error else { return XCTFail("\(error)") }
                XCTAssertEqual(status, 401, "\(authentication)")
                XCTAssertEqual(code, "invalid_client", "\(authentication)")
                XCTAssertEqual(url, server.tokenURL)
                XCTAssertTrue(error.isConfigurationError, "\(authentication)")
                XCTAssertFalse(error.requiresSignIn, "\(authentication)")
                assertNoSecret(in: error, secrets)
            }
        }

        // A rotated-away refresh token: 400 invalid_grant, sign in again.
        let endpoint = confidentialEndpoint(server)
        let first = try await signIn(server, endpoint)
        let second = try await endpoint.refresh(first)
        secrets += [first.accessToken, second.accessToken, try XCTUnwrap(first.refreshToken), try XCTUnwrap(second.refreshToken)]
        do {
            _ = try await endpoint.refresh(first)
            XCTFail("a rotated-away refresh token was accepted")
        } catch let error as OAuth2Error {
            XCTAssertEqual(error, .tokenRequestRejected(status: 400, error: "invalid_grant", description: nil, url: server.tokenURL))
            XCTAssertTrue(error.requiresSignIn)
            assertNoSecret(in: error, secrets)
        }

        // A wrong verifier: invalid_grant, and neither the code nor a verifier shows.
        let flow = OAuth2AuthorizationCodeFlow(
            authorizationEndpoint: server.authorizeURL, tokenEndpoint: endpoint, redirectURI: server.loopbackRedirectURI(port: 53682))
        let attempt = flow.start()
        let callback = try await server.browse(attempt.url)
        let code = try flow.authorizationCode(from: callback, for: attempt)
        let forged = OAuth2AuthorizationRequest(
            url: attempt.url, state: attempt.state, codeVerifier: flow.start().codeVerifier, redirectURI: attempt.redirectURI)
        secrets += [code, attempt.codeVerifier, forged.codeVerifier]
        do {
            _ = try await flow.exchange(code: code, for: forged)
            XCTFail("a wrong verifier was accepted")
        } catch let error as OAuth2Error {
            XCTAssertEqual(error.serverErrorCode, "invalid_grant")
            assertNoSecret(in: error, secrets)
        }

        // Through a manager: the access token expired at the server and the refresh token
        // rotated away. The call fails typed, the failure hook hears of it once.
        let hook = ProbeLog<String>()
        let stale = OAuth2Credential(
            accessToken: second.accessToken, refreshToken: first.refreshToken, expiresAt: Date().addingTimeInterval(3600))
        let auth = OAuth2Authenticator(
            origins: [server.baseURL], tokenEndpoint: endpoint, store: InMemoryCredentialStore(stale),
            onRefreshFailure: { error in hook.append("\((error as? OAuth2Error)?.requiresSignIn ?? false)") })
        let manager = makeManager(auth)
        defer { manager.session.invalidateAndCancel() }
        try await server.expireAccessToken(second.accessToken)
        let failed = await Kit.fetch(manager.session, server.apiURL)
        guard let failure = failed.taskError else { return XCTFail(failed.label) }
        XCTAssertEqual(failure.code, .authenticationFailed)
        XCTAssertEqual(failure.component?.name, "OAuth2RefreshReactor")
        XCTAssertEqual(
            failure.underlying as? OAuth2Error,
            .tokenRequestRejected(status: 400, error: "invalid_grant", description: nil, url: server.tokenURL))
        assertNoSecret(in: failure, secrets)
        let heard = try await hook.wait(count: 1)
        XCTAssertEqual(heard, ["true"], "the hook hears once that the user must sign in")
    }
}
