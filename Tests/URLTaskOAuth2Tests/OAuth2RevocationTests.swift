import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// RFC 7009 revocation on sign-out, over loopback HTTP with LoopbackServer's `OAuthServer`: the
/// requests exactly as the RFC says, the order, once, and every way it can fail with the local
/// sign-out done anyway and no token in any text.
final class OAuth2RevocationTests: XCTestCase {
    private let secret = "cs-SECRET-revocation"

    private func credential(_ oauth: OAuthServer, access: String = "demo-access-0") -> OAuth2Credential {
        OAuth2Credential(accessToken: access, refreshToken: oauth.currentRefresh, expiresAt: Date().addingTimeInterval(3600))
    }

    private func makeManager(_ auth: OAuth2Authenticator) -> URLTaskManager {
        URLTaskManager(interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
    }

    /// Every text of `value` an app might log: its descriptions, `dump`, and for an error the
    /// `NSError` bridge.
    private func texts(of value: Any) -> [String] {
        var dumped = ""
        dump(value, to: &dumped)
        var all = ["\(value)", String(reflecting: value), dumped]
        if let error = value as? any Error {
            let bridged = error as NSError
            all += [error.localizedDescription, bridged.description, "\(bridged.userInfo)"]
        }
        if let outcome = value as? OAuth2Revocation, let error = outcome.error { all += texts(of: error) }
        return all
    }

    private func assertNoSecret(in value: Any, _ secrets: [String], file: StaticString = #filePath, line: UInt = #line) {
        for text in texts(of: value) {
            for secret in secrets where text.contains(secret) {
                XCTFail("a text shows a secret: \(text)", file: file, line: line)
            }
        }
    }

    /// The revocation error of `outcome`, or a failure.
    private func revocationError(
        _ outcome: OAuth2Revocation, file: StaticString = #filePath, line: UInt = #line
    ) throws
        -> OAuth2RevocationError
    {
        guard case .failed(let error as OAuth2RevocationError) = outcome else {
            XCTFail("expected a failed revocation, got \(outcome)", file: file, line: line)
            throw XCTSkip("no revocation error")
        }
        return error
    }

    // MARK: - The requests

    /// RFC 7009 §2.1: a form POST of `token` and `token_type_hint`, refresh token first, with the
    /// token requests' client authentication: HTTP Basic (each part form-encoded), the secret in
    /// the form, or a public client's `client_id`; `Connection: close`; nothing else in the form.
    func testTheRequestsAreRFC7009FormPostsWithTheTokenRequestsClientAuthentication() async throws {
        let cases: [(name: String, secret: String?, authentication: OAuth2TokenEndpoint.ClientAuthentication)] = [
            ("HTTP Basic", secret, .basic), ("secret in the form", secret, .requestBody), ("public client", nil, .basic),
        ]
        for (name, secret, authentication) in cases {
            let oauth = try OAuthServer(name: "demo", access: "demo-access-0")
            defer { oauth.shutdown() }
            let clientID = "app:1/é"  // escaped in the form and in Basic alike
            if let secret { oauth.requireClient(id: clientID, secret: secret) }
            let endpoint = OAuth2TokenEndpoint(
                url: oauth.tokenURL, revocationURL: oauth.revocationURL, clientID: clientID, clientSecret: secret,
                clientAuthentication: authentication)
            let auth = OAuth2Authenticator(
                origins: [oauth.baseURL], tokenEndpoint: endpoint, store: InMemoryCredentialStore(credential(oauth)))

            let outcome = try await auth.signOut()

            guard case .revoked = outcome else { return XCTFail("\(name): \(outcome)") }
            let requests = oauth.revocationRequests
            XCTAssertEqual(requests.count, 2, name)
            XCTAssertEqual(oauth.revokedTokens, ["refresh-0", "demo-access-0"], "\(name): the refresh token first")
            for (request, (token, hint)) in zip(requests, [("refresh-0", "refresh_token"), ("demo-access-0", "access_token")]) {
                XCTAssertEqual(request.method, "POST", name)
                XCTAssertEqual(request.headers["Content-Type"], "application/x-www-form-urlencoded", name)
                XCTAssertEqual(request.headers["Connection"]?.lowercased(), "close", name)
                var expected = ["token": token, "token_type_hint": hint]
                switch (secret, authentication) {
                case (let secret?, .basic):
                    XCTAssertEqual(
                        request.headers["Authorization"], OAuth2TokenEndpoint.basicAuthorization(clientID: clientID, secret: secret), name)
                    let decoded = OAuthServer.decodeBasicClient(request.headers["Authorization"])
                    XCTAssertEqual(decoded?.id, clientID, name)
                    XCTAssertEqual(decoded?.secret, secret, name)
                case (let secret?, .requestBody):
                    XCTAssertNil(request.headers["Authorization"], name)
                    expected["client_id"] = clientID
                    expected["client_secret"] = secret
                case (nil, _):
                    XCTAssertNil(request.headers["Authorization"], name)
                    expected["client_id"] = clientID
                }
                XCTAssertEqual(OAuthServer.decodeForm(request.bodyText), expected, name)
            }
            // Revoked at the server: the API refuses the access token, the refresh token is dead.
            XCTAssertNil(oauth.currentAccess, name)
            XCTAssertNil(oauth.currentRefresh, name)
        }
    }

    /// A credential without a refresh token: one request, for the access token.
    func testACredentialWithoutARefreshTokenRevokesItsAccessTokenOnly() async throws {
        let oauth = try OAuthServer(name: "demo", access: "demo-access-0")
        defer { oauth.shutdown() }
        let endpoint = OAuth2TokenEndpoint(url: oauth.tokenURL, revocationURL: oauth.revocationURL, clientID: "app")
        let held = OAuth2Credential(accessToken: "demo-access-0", refreshToken: nil, expiresAt: .distantFuture)
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: endpoint, store: InMemoryCredentialStore(held))
        let outcome = try await auth.signOut()
        guard case .revoked = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(oauth.revokedTokens, ["demo-access-0"])
        XCTAssertEqual(OAuthServer.decodeForm(oauth.revocationRequests[0].bodyText)["token_type_hint"], "access_token")
    }

    /// Without a revocation URL, and with nothing held, nothing is sent.
    func testNothingIsSentWithoutARevocationURLOrWithoutACredential() async throws {
        let oauth = try OAuthServer(name: "demo", access: "demo-access-0")
        defer { oauth.shutdown() }
        let local = OAuth2Authenticator(
            origins: [oauth.baseURL], tokenEndpoint: OAuth2TokenEndpoint(url: oauth.tokenURL, clientID: "app"),
            store: InMemoryCredentialStore(credential(oauth)))
        let notConfigured = try await local.signOut()
        guard case .notConfigured = notConfigured else { return XCTFail("\(notConfigured)") }
        let current = try await local.currentCredential()
        XCTAssertNil(current)

        let endpoint = OAuth2TokenEndpoint(url: oauth.tokenURL, revocationURL: oauth.revocationURL, clientID: "app")
        let empty = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: endpoint, store: InMemoryCredentialStore())
        let nothing = try await empty.signOut()
        guard case .nothingToRevoke = nothing else { return XCTFail("\(nothing)") }
        XCTAssertEqual(oauth.revocationRequests.count, 0)
        XCTAssertEqual(oauth.currentAccess, "demo-access-0", "nothing was revoked")
    }

    /// An authenticator that never read its store reads it at sign-out, and revokes what it held.
    func testASignOutBeforeAnyRequestRevokesTheStoredCredential() async throws {
        let oauth = try OAuthServer(name: "demo", access: "demo-access-0")
        defer { oauth.shutdown() }
        let store = InMemoryCredentialStore(credential(oauth))
        let endpoint = OAuth2TokenEndpoint(url: oauth.tokenURL, revocationURL: oauth.revocationURL, clientID: "app")
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: endpoint, store: store)
        let outcome = try await auth.signOut()
        guard case .revoked = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(oauth.revokedTokens, ["refresh-0", "demo-access-0"])
        let stored = try await store.load()
        XCTAssertNil(stored)
    }

    // MARK: - Once, and after the tasks

    /// Eight sign-outs at once, through the manager and the authenticator: one revokes, the
    /// others find nothing; the server sees one request per token.
    func testConcurrentSignOutsRevokeOnce() async throws {
        let oauth = try OAuthServer(name: "demo", access: "demo-access-0")
        defer { oauth.shutdown() }
        let gate = Gate()
        defer { gate.open() }
        oauth.holdRevocationResponses(on: gate)  // the first revocation is still running when the others come
        let endpoint = OAuth2TokenEndpoint(url: oauth.tokenURL, revocationURL: oauth.revocationURL, clientID: "app")
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: endpoint, store: InMemoryCredentialStore(credential(oauth)))
        let manager = makeManager(auth)
        defer { manager.invalidateAndCancel() }
        _ = try await auth.currentCredential()

        let outcomes = Task {
            await withTaskGroup(of: String.self) { group in
                for index in 0..<8 {
                    group.addTask {
                        do {
                            let outcome = index.isMultiple(of: 2) ? try await manager.signOut(of: auth) : try await auth.signOut()
                            return "\(outcome)"
                        } catch {
                            return "threw \(error)"
                        }
                    }
                }
                return await group.reduce(into: [String]()) { $0.append($1) }
            }
        }
        _ = try await oauth.server.waitForRequests(path: "/oauth/revoke", count: 1)
        gate.open()
        let results = await outcomes.value
        XCTAssertEqual(results.filter { $0 == "revoked" }.count, 1, "\(results)")
        XCTAssertEqual(results.filter { $0 == "nothing to revoke" }.count, 7, "\(results)")
        XCTAssertEqual(oauth.revokedTokens, ["refresh-0", "demo-access-0"])
    }

    /// `manager.signOut(of:)` stops the tasks carrying the credential before it waits for the
    /// revocation: with the revocation held, the request on the network has already failed.
    func testTheManagerFailsTheTasksBeforeItWaitsForTheRevocation() async throws {
        let oauth = try OAuthServer(name: "demo", access: "demo-access-0")
        defer { oauth.shutdown() }
        let slow = Gate()
        let revocation = Gate()
        defer {
            slow.open()
            revocation.open()
        }
        oauth.holdResponses(to: "/slow", on: slow)
        oauth.holdRevocationResponses(on: revocation)
        let endpoint = OAuth2TokenEndpoint(url: oauth.tokenURL, revocationURL: oauth.revocationURL, clientID: "app")
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: endpoint, store: InMemoryCredentialStore(credential(oauth)))
        let manager = makeManager(auth)
        defer { manager.invalidateAndCancel() }

        let onTheNetwork = Task { await fetched(manager.session, URLRequest(url: oauth.apiURL("/slow"))) }
        _ = try await oauth.server.waitForRequests(path: "/api/slow", count: 1)
        let signOut = Task { try await manager.signOut(of: auth) }
        _ = try await oauth.server.waitForRequests(path: "/oauth/revoke", count: 1)
        // The revocation is held at the server: the task carrying the token has ended already.
        let result = await onTheNetwork.value
        XCTAssertEqual(result.taskError?.code, .authenticationFailed, "\(result)")
        XCTAssertEqual(result.taskError?.underlying as? OAuth2Error, .notSignedIn)
        XCTAssertEqual(oauth.revokedTokens, [], "the revocation is still held")
        let current = try await auth.currentCredential()
        XCTAssertNil(current, "signed out locally before the revocation")
        revocation.open()
        let outcome = try await signOut.value
        guard case .revoked = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(oauth.revokedTokens, ["refresh-0", "demo-access-0"])
    }

    // MARK: - Failures

    /// A revocation endpoint answering 503: reported, typed, naming the URL (without its query,
    /// user or password) and the token; the access token's request is still sent; the local
    /// sign-out is done; no text shows a token or the secret.
    func testA503IsReportedAndTheLocalSignOutIsDone() async throws {
        let oauth = try OAuthServer(name: "demo", access: "demo-access-0")
        defer { oauth.shutdown() }
        oauth.setRevocationAnswer(.reject(status: 503, error: "temporarily_unavailable"))
        var parts = try XCTUnwrap(URLComponents(url: oauth.revocationURL, resolvingAgainstBaseURL: false))
        parts.user = "user"
        parts.password = "url-PASSWORD"
        parts.query = "key=url-SECRET"
        let store = InMemoryCredentialStore(credential(oauth))
        let endpoint = OAuth2TokenEndpoint(
            url: oauth.tokenURL, revocationURL: try XCTUnwrap(parts.url), clientID: "app", clientSecret: secret)
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: endpoint, store: store)
        let manager = makeManager(auth)
        defer { manager.invalidateAndCancel() }

        let outcome = try await manager.signOut(of: auth)

        let error = try revocationError(outcome)
        XCTAssertEqual(error.reason, .rejected(status: 503, error: "temporarily_unavailable"))
        XCTAssertEqual(error.token, .refreshToken, "the first failure is reported")
        XCTAssertEqual(error.url, oauth.revocationURL, "without its user, password and query")
        XCTAssertTrue(error.description.contains(oauth.revocationURL.absoluteString), error.description)
        XCTAssertEqual(oauth.revocationRequests.count, 2, "an answer does not stop the access token's request")
        let current = try await auth.currentCredential()
        XCTAssertNil(current)
        let stored = try await store.load()
        XCTAssertNil(stored)
        assertNoSecret(in: outcome, ["refresh-0", "demo-access-0", secret, "url-PASSWORD", "url-SECRET"])
        assertNoSecret(in: endpoint, [secret, "url-PASSWORD", "url-SECRET"])
        XCTAssertTrue(endpoint.description.contains("revocationURL: http://"), endpoint.description)
        // Still valid at the server: that is what the failure says.
        XCTAssertEqual(oauth.currentRefresh, "refresh-0")
    }

    /// A revocation endpoint that hangs: the sign-out returns at the endpoint's timeout, which
    /// bounds both tokens, reporting a timeout; the access token's request is not sent.
    func testARevocationThatHangsEndsAtTheEndpointsTimeout() async throws {
        let oauth = try OAuthServer(name: "demo", access: "demo-access-0")
        defer { oauth.shutdown() }
        let gate = Gate()
        defer { gate.open() }
        oauth.holdRevocationResponses(on: gate)
        let store = InMemoryCredentialStore(credential(oauth))
        let endpoint = OAuth2TokenEndpoint(
            url: oauth.tokenURL, revocationURL: oauth.revocationURL, clientID: "app", clientSecret: secret, timeout: .seconds(1))
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: endpoint, store: store)
        let manager = makeManager(auth)
        defer { manager.invalidateAndCancel() }

        let started = ContinuousClock.now
        let outcome = try await manager.signOut(of: auth)
        let elapsed = started.duration(to: .now)

        let error = try revocationError(outcome)
        XCTAssertEqual(error.reason, .transport(.timedOut))
        XCTAssertEqual(error.token, .refreshToken)
        XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(900))
        XCTAssertLessThan(elapsed, .seconds(4), "the timeout bounds the revocation")
        XCTAssertEqual(oauth.revocationRequests.count, 1, "no access token request after a timeout")
        let current = try await auth.currentCredential()
        XCTAssertNil(current)
        let stored = try await store.load()
        XCTAssertNil(stored)
        assertNoSecret(in: outcome, ["refresh-0", "demo-access-0", secret])
        printFigures(
            "[revocation] a revocation endpoint that hangs, timeout 1 s: signOut(of:) returned after \(elapsed.formatted(.units(allowed: [.milliseconds])))"
        )
    }

    /// A revocation endpoint whose host refuses connections: reported at once.
    func testARevocationHostThatRefusesConnectionsIsReported() async throws {
        let oauth = try OAuthServer(name: "demo", access: "demo-access-0")
        defer { oauth.shutdown() }
        let gone = try LoopbackServer()
        let refusing = gone.url("/oauth/revoke")
        gone.shutdown()
        let store = InMemoryCredentialStore(credential(oauth))
        let endpoint = OAuth2TokenEndpoint(url: oauth.tokenURL, revocationURL: refusing, clientID: "app", clientSecret: secret)
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: endpoint, store: store)
        let manager = makeManager(auth)
        defer { manager.invalidateAndCancel() }

        let outcome = try await manager.signOut(of: auth)

        let error = try revocationError(outcome)
        XCTAssertEqual(error.reason, .transport(.cannotConnectToHost))
        XCTAssertEqual(error.url, refusing)
        XCTAssertTrue(error.description.contains("could not be reached"), error.description)
        let current = try await auth.currentCredential()
        XCTAssertNil(current)
        let stored = try await store.load()
        XCTAssertNil(stored)
        assertNoSecret(in: outcome, ["refresh-0", "demo-access-0", secret])
    }

    /// A server echoing the token in an unregistered error code: the code is not kept.
    func testAnUnregisteredErrorCodeIsNotKept() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("POST", "/revoke") { request in
            .json(["error": "bad \(OAuthServer.decodeForm(request.bodyText)["token"] ?? "")"], status: 400)
        }
        let endpoint = OAuth2TokenEndpoint(url: server.url("/token"), revocationURL: server.url("/revoke"), clientID: "app")
        let outcome = await endpoint.revoke(
            OAuth2Credential(accessToken: "at-SECRET-echo", refreshToken: "rt-SECRET-echo", expiresAt: .distantFuture))
        let error = try revocationError(outcome)
        XCTAssertEqual(error.reason, .rejected(status: 400, error: nil))
        assertNoSecret(in: outcome, ["at-SECRET-echo", "rt-SECRET-echo"])
    }

    /// The store's clear failing: the sign-out throws the store's error, after the revocation ran.
    func testAStoreThatCannotBeClearedStillRevokesAndThrowsItsError() async throws {
        struct Broken: Error {}
        struct Store: CredentialStore {
            let credential: OAuth2Credential
            func load() async throws -> OAuth2Credential? { credential }
            func save(_ credential: OAuth2Credential) async throws {}
            func clear() async throws { throw Broken() }
        }
        let oauth = try OAuthServer(name: "demo", access: "demo-access-0")
        defer { oauth.shutdown() }
        let endpoint = OAuth2TokenEndpoint(url: oauth.tokenURL, revocationURL: oauth.revocationURL, clientID: "app")
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: endpoint, store: Store(credential: credential(oauth)))
        do {
            try await auth.signOut()
            XCTFail("the store's error was not thrown")
        } catch is Broken {}
        XCTAssertEqual(oauth.revokedTokens, ["refresh-0", "demo-access-0"])
        let current = try await auth.currentCredential()
        XCTAssertNil(current, "signed out in memory")
    }

    /// The custom-`refresh` authenticator revokes through its own `revoke`, once per credential.
    func testACustomRevokeIsCalledOnceWithTheCredentialSignedOut() async throws {
        let calls = LockedBox<[String]>([])
        let held = OAuth2Credential(accessToken: "mine", refreshToken: "r", expiresAt: .distantFuture)
        let auth = OAuth2Authenticator(
            origins: [URL(string: "https://api.example")!], store: InMemoryCredentialStore(held),
            revoke: { credential in
                calls.withLock { $0.append(credential.accessToken) }
                return .revoked
            },
            refresh: { $0 })
        let first = try await auth.signOut()
        let second = try await auth.signOut()
        guard case .revoked = first, case .nothingToRevoke = second else { return XCTFail("\(first), \(second)") }
        XCTAssertEqual(calls.snapshot, ["mine"])
        let none = OAuth2Authenticator(origins: [URL(string: "https://api.example")!], store: InMemoryCredentialStore(held)) { $0 }
        let local = try await none.signOut()
        guard case .notConfigured = local else { return XCTFail("\(local)") }
    }
}
