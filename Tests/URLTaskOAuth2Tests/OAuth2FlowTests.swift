import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// The OAuth2 kit over real HTTP: late 401s, rotation, proactive refresh, host isolation,
/// two backends, sign-out.
final class OAuth2FlowTests: XCTestCase {
    typealias Kit = ReactorTestKit

    private func pair(_ auth: OAuth2Authenticator) -> URLTaskManager {
        URLTaskManager(interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
    }

    private func authenticator(
        _ api: OAuthServer, _ credential: OAuth2Credential?, store: (any CredentialStore)? = nil,
        leeway: Duration = .seconds(60), onFailure: (@Sendable (any Error) async -> Void)? = nil
    ) -> OAuth2Authenticator {
        OAuth2Authenticator(
            origins: [api.server.baseURL], tokenEndpoint: api.endpoint,
            store: store ?? InMemoryCredentialStore(credential), refreshLeeway: leeway, onRefreshFailure: onFailure
        )
    }

    // MARK: Late 401s

    func testALate401AfterARefreshCompletedIsResentWithoutASecondRefresh() async throws {
        let api = try OAuthServer(access: nil)
        let manager = pair(authenticator(api, api.credential(access: "stale")))
        let gate = Gate()
        defer { gate.open() }
        api.holdResponses(to: "/slow", on: gate)

        let slow = Kit.start(manager.session, api.apiURL("/slow"))
        _ = try await api.server.waitForRequests(path: "/api/slow", count: 1)
        let fast = await Kit.fetch(manager.session, api.apiURL("/fast"))
        XCTAssertEqual(fast.status, 200)
        XCTAssertEqual(api.tokenRequestCount, 1)

        gate.open()  // the slow request's 401 (to the stale token) arrives only now
        let late = await slow.value
        XCTAssertEqual(late.status, 200)
        XCTAssertEqual(api.tokenRequestCount, 1, "a 401 to a token already replaced needs no refresh")
        XCTAssertEqual(api.server.requests(path: "/api/slow").map(\.headers["authorization"]), ["Bearer stale", "Bearer a-access-1"])
    }

    func testA401ToACredentialReplacedBySignInMeanwhileIsResentWithoutARefresh() async throws {
        let api = try OAuthServer(access: nil)
        let auth = authenticator(api, api.credential(access: "stale"))
        let manager = pair(auth)
        let gate = Gate()
        defer { gate.open() }
        api.holdResponses(to: "/slow", on: gate)

        let slow = Kit.start(manager.session, api.apiURL("/slow"))
        _ = try await api.server.waitForRequests(path: "/api/slow", count: 1)
        // The user signs in again while the request is out: the engine knows nothing of it,
        // the authenticator's version does.
        try await auth.signIn(try await api.endpoint.requestToken(["grant_type": "password", "username": "u", "password": "p"]))
        gate.open()
        let result = await slow.value
        XCTAssertEqual(result.status, 200)
        XCTAssertEqual(api.refreshTokensReceived, [], "no refresh, only the sign-in")
        XCTAssertEqual(api.tokenRequestCount, 1)
    }

    // MARK: Rotation

    func testRotatedRefreshTokensAreStoredAndTheNextRefreshUsesThem() async throws {
        let api = try OAuthServer(access: nil, refresh: "refresh-0")
        let store = InMemoryCredentialStore(api.credential(access: "stale", refresh: "refresh-0"))
        let manager = pair(authenticator(api, nil, store: store))

        let first = await Kit.fetch(manager.session, api.apiURL())
        XCTAssertEqual(first.status, 200)
        var stored = try await store.load()
        XCTAssertEqual(stored?.refreshToken, "a-refresh-1", "the rotated refresh token is saved")
        XCTAssertEqual(stored?.accessToken, "a-access-1")
        XCTAssertEqual(stored?.expiresAt.timeIntervalSinceNow ?? 0, 3600, accuracy: 60, "expires_in: 3600")

        api.revokeAccess()
        let second = await Kit.fetch(manager.session, api.apiURL())
        XCTAssertEqual(second.status, 200)
        XCTAssertEqual(api.refreshTokensReceived, ["refresh-0", "a-refresh-1"], "the second refresh used the rotated token")
        stored = try await store.load()
        XCTAssertEqual(stored?.refreshToken, "a-refresh-2")
        XCTAssertEqual(api.tokenRequests.map { OAuthServer.decodeForm($0.bodyText)["client_id"] }, ["tests", "tests"])
    }

    // MARK: Proactive refresh

    func testATokenExpiringWithinTheLeewayIsRenewedBeforeAnyRequestIsSent() async throws {
        let api = try OAuthServer(access: nil)
        let manager = pair(authenticator(api, api.credential(access: "expiring", expiresIn: 10), leeway: .seconds(60)))
        let url = api.apiURL()
        let results = await Kit.storm(manager.session, count: 100) { _ in URLRequest(url: url) }
        XCTAssertEqual(Kit.tally(results), ["200": 100])
        XCTAssertEqual(api.tokenRequestCount, 1, "one refresh shared by every request")
        XCTAssertEqual(api.apiRequests.count, 100, "no request was refused: none went out with the old token")
        XCTAssertEqual(api.apiRequests.filter { $0.headers["authorization"] == "Bearer expiring" }.count, 0)
    }

    func testATokenIssuedShorterThanTheLeewayIsNotRenewedBeforeEveryRequest() async throws {
        let api = try OAuthServer(access: nil)
        api.setExpiresIn(30)  // shorter than the 60 s leeway
        let manager = pair(authenticator(api, api.credential(access: "expiring", expiresIn: 10)))
        for _ in 0..<5 {
            let result = await Kit.fetch(manager.session, api.apiURL())
            XCTAssertEqual(result.status, 200)
        }
        XCTAssertEqual(api.tokenRequestCount, 1)
    }

    // MARK: Where the token goes

    func testTheTokenIsNeverSentToAnotherHostOrPortOrAcrossARedirect() async throws {
        let api = try OAuthServer(access: "valid")
        let other = try LoopbackServer()
        defer { other.shutdown() }
        other.route(prefix: "/") { _ in .text("elsewhere") }
        api.server.route("/leave") { _ in .redirect(to: other.url("/landing").absoluteString) }
        let manager = pair(authenticator(api, api.credential(access: "valid")))

        let own = await Kit.fetch(manager.session, api.apiURL())
        XCTAssertEqual(own.status, 200)
        let otherPort = await Kit.fetch(manager.session, other.url("/x"))
        XCTAssertEqual(otherPort.text, "elsewhere")
        var localhost = URLComponents(url: api.apiURL("/by-name"), resolvingAgainstBaseURL: false)!
        localhost.host = "localhost"
        let byName = await Kit.fetch(manager.session, localhost.url!)
        let redirected = await Kit.fetch(manager.session, api.server.url("/leave"))
        XCTAssertEqual(redirected.text, "elsewhere")

        XCTAssertEqual(api.server.requests(path: "/api/profile").first?.headers["authorization"], "Bearer valid")
        XCTAssertEqual(api.server.requests(path: "/leave").first?.headers["authorization"], "Bearer valid")
        XCTAssertEqual(other.requests.count, 2)
        XCTAssertTrue(other.requests.allSatisfy { $0.headers["authorization"] == nil }, "\(other.requests.map(\.headers))")
        if byName.status != nil {
            // Reached the API by another host name: no token, and its 401 comes back as is.
            XCTAssertEqual(byName.status, 401)
            XCTAssertNil(api.server.requests(path: "/api/by-name").first?.headers["authorization"])
        }
        XCTAssertEqual(api.tokenRequestCount, 0)
    }

    /// A token that would split the request (a CR/LF from a broken token endpoint or store) is
    /// never sent: the task fails with `invalidHeader` naming `Authorization`, and the value is
    /// not in the error. (corelibs' own `setValue` would have dropped the header silently and
    /// sent the request unauthenticated.)
    func testATokenWithCRLFFailsTheTaskAndNothingIsSent() async throws {
        let api = try OAuthServer(access: "valid")
        let manager = pair(authenticator(api, api.credential(access: "x\r\nX-Injected: 1")))
        let result = await Kit.fetch(manager.session, api.apiURL())
        guard let failure = result.taskError, failure.code == .invalidHeader else {
            return XCTFail("expected URLTaskError.invalidHeader, got \(result)")
        }
        XCTAssertEqual(failure.headerName, "Authorization")
        XCTAssertFalse("\(failure)".contains("Injected"), "\(failure)")
        XCTAssertEqual(api.server.requests(path: "/api/profile").count, 0, "nothing may reach the server")
    }

    func testOriginsMatchSchemeHostAndPortExactly() {
        let auth = OAuth2Authenticator(origins: [URL(string: "https://api.example.com")!], refresh: { $0 })
        XCTAssertTrue(auth.authorizes(URL(string: "https://api.example.com/v1/me")!))
        XCTAssertTrue(auth.authorizes(URL(string: "https://API.Example.com:443/v1/me")!))
        XCTAssertFalse(auth.authorizes(URL(string: "http://api.example.com/v1/me")!), "plain HTTP")
        XCTAssertFalse(auth.authorizes(URL(string: "https://api.example.com:8443/v1/me")!), "another port")
        XCTAssertFalse(auth.authorizes(URL(string: "https://evil.api.example.com/")!), "a subdomain")
        XCTAssertFalse(auth.authorizes(URL(string: "https://api.example.com.evil.com/")!), "a suffix")
        XCTAssertFalse(auth.authorizes(URL(string: "https://example.com/")!))
    }

    // MARK: Two backends

    func testTwoBackendsKeepTheirOwnTokensAndRefreshes() async throws {
        let a = try OAuthServer(name: "a", access: nil)
        let b = try OAuthServer(name: "b", access: nil)
        let authA = authenticator(a, a.credential(access: "a-stale"))
        let authB = authenticator(b, b.credential(access: "b-stale"))
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: authA), BearerInterceptor(authenticator: authB)],
            reactors: [OAuth2RefreshReactor(authenticator: authA), OAuth2RefreshReactor(authenticator: authB)]
        )
        let urls = [a.apiURL(), b.apiURL()]
        let results = await Kit.storm(manager.session, count: 100) { URLRequest(url: urls[$0 % 2]) }
        XCTAssertEqual(Kit.tally(results), ["200": 100])
        XCTAssertEqual(a.tokenRequestCount, 1)
        XCTAssertEqual(b.tokenRequestCount, 1)
        XCTAssertEqual(Set(a.apiRequests.compactMap { $0.headers["authorization"] }), ["Bearer a-stale", "Bearer a-access-1"])
        XCTAssertEqual(Set(b.apiRequests.compactMap { $0.headers["authorization"] }), ["Bearer b-stale", "Bearer b-access-1"])
    }

    func testOneBackendsRefreshDoesNotHoldTheOthersRequests() async throws {
        let a = try OAuthServer(name: "a", access: nil)
        let b = try OAuthServer(name: "b", access: "b-valid")
        let authA = authenticator(a, a.credential(access: "a-stale"))
        let authB = authenticator(b, b.credential(access: "b-valid"))
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: authA), BearerInterceptor(authenticator: authB)],
            reactors: [OAuth2RefreshReactor(authenticator: authA), OAuth2RefreshReactor(authenticator: authB)]
        )
        let tokenGate = Gate()
        defer { tokenGate.open() }
        a.holdTokenResponses(on: tokenGate)

        let refreshing = Kit.start(manager.session, a.apiURL())
        _ = try await a.server.waitForRequests(path: "/oauth/token", count: 1)
        // A's refresh is stuck at its token endpoint; B's traffic flows.
        let other = await Kit.fetch(manager.session, b.apiURL())
        XCTAssertEqual(other.status, 200)
        tokenGate.open()
        let result = await refreshing.value
        XCTAssertEqual(result.status, 200)
    }

    func testARefreshSentThroughTheManagersOwnSessionIsNeitherHeldNorGivenTheToken() async throws {
        // The token endpoint shares the API's origin: without the exemptions its request would
        // wait at the gate of the refresh it belongs to, and carry the stale bearer.
        let api = try OAuthServer(access: nil)
        let box = Kit.Box<URLTaskManager>()
        let tokenURL = api.tokenURL
        let auth = OAuth2Authenticator(
            origins: [api.server.baseURL],
            store: InMemoryCredentialStore(api.credential(access: "stale")),
            isTokenRequest: { $0.url?.path == tokenURL.path },
            refresh: { credential in
                guard let session = box.value?.session else { throw URLError(.cancelled) }
                return try await OAuth2TokenEndpoint(url: tokenURL, session: session).refresh(credential)
            }
        )
        var configuration = URLTaskReactorConfiguration.authentication
        configuration.timeout = .seconds(5)
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)],
            reactors: [OAuth2RefreshReactor(authenticator: auth, configuration: configuration)]
        )
        box.value = manager
        let url = api.apiURL()
        let results = await Kit.storm(manager.session, count: 20) { _ in URLRequest(url: url) }
        XCTAssertEqual(Kit.tally(results), ["200": 20])
        XCTAssertEqual(api.tokenRequestCount, 1)
        XCTAssertNil(api.tokenRequests.first?.headers["authorization"])
    }

    // MARK: Signing out

    func testSignedOutRequestsGoWithoutATokenAndTheir401ReachesTheCaller() async throws {
        let api = try OAuthServer(access: "valid")
        let store = InMemoryCredentialStore(api.credential(access: "valid"))
        let auth = authenticator(api, nil, store: store)
        let manager = pair(auth)
        let before = await Kit.fetch(manager.session, api.apiURL())
        XCTAssertEqual(before.status, 200)
        try await auth.signOut()
        let result = await Kit.fetch(manager.session, api.apiURL("/after"))
        XCTAssertEqual(result.status, 401)
        XCTAssertNil(api.server.requests(path: "/api/after").first?.headers["authorization"])
        XCTAssertEqual(api.tokenRequestCount, 0)
        let stored = try await store.load()
        XCTAssertNil(stored)
    }

    func testTheStoreIsLoadedOnceByConcurrentFirstRequests() async throws {
        let api = try OAuthServer(access: "valid")
        let store = CountingStore(api.credential(access: "valid"))
        let manager = pair(authenticator(api, nil, store: store))
        let url = api.apiURL()
        let results = await Kit.storm(manager.session, count: 50) { _ in URLRequest(url: url) }
        XCTAssertEqual(Kit.tally(results), ["200": 50])
        let loads = await store.loads
        XCTAssertEqual(loads, 1)
    }

    actor CountingStore: CredentialStore {
        private var credential: OAuth2Credential?
        private(set) var loads = 0

        init(_ credential: OAuth2Credential?) {
            self.credential = credential
        }

        func load() async throws -> OAuth2Credential? {
            loads += 1
            await Task.yield()
            return credential
        }

        func save(_ credential: OAuth2Credential) async throws { self.credential = credential }
        func clear() async throws { credential = nil }
    }
}

/// The engine judges the OAuth2 reactor's requests by the authenticator's own credential
/// version: one version, whoever changed the credential.
final class OAuth2CredentialVersionTests: XCTestCase {
    typealias Kit = ReactorTestKit

    /// One connection to the API. A request whose token was applied waits for it while the app
    /// renews the credential itself (`auth.refresh()`, no engine run). When it gets the
    /// connection its headers are older than the authenticator's version: it is intercepted
    /// again and the server never sees the replaced token after the renewal.
    func testARequestWaitingForAConnectionWhileTheAppRenewsTheTokenLeavesWithTheNewOne() async throws {
        let api = try OAuthServer(access: "a0")
        defer { api.shutdown() }
        let auth = OAuth2Authenticator(
            origins: [api.server.baseURL], tokenEndpoint: api.endpoint,
            store: InMemoryCredentialStore(api.credential(access: "a0"))
        )
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)],
            reactors: [OAuth2RefreshReactor(authenticator: auth)],
            options: .init(maximumRequestsInFlightPerHost: 1)
        )
        defer { manager.invalidateAndCancel() }
        let gate = Gate()
        defer { gate.open() }
        api.holdResponses(to: "/first", on: gate)

        let first = Kit.start(manager.session, api.apiURL("/first"))
        _ = try await api.server.waitForRequests(path: "/api/first", count: 1)
        let waiting = Kit.start(manager.session, api.apiURL("/second"))
        let deadline = ContinuousClock.now.advanced(by: .seconds(5))
        while manager.pipeline.engine.waitingForSlot == 0, ContinuousClock.now < deadline { await Task.yield() }
        XCTAssertEqual(manager.pipeline.engine.waitingForSlot, 1, "the second request waits for the only connection, its token applied")

        let renewed = try await auth.refresh()  // the app renews: the engine ran nothing
        XCTAssertNotEqual(renewed.accessToken, "a0")
        gate.open()
        let results = [await first.value, await waiting.value]
        XCTAssertEqual(results.map(\.status), [200, 200], "\(results.map(\.label))")
        let second = api.server.requests(path: "/api/second").map { $0.headers["authorization"] }
        XCTAssertEqual(second, ["Bearer \(renewed.accessToken)"], "the replaced token never reached the server after the renewal")
        XCTAssertEqual(api.tokenRequestCount, 1, "only the app's own renewal")
    }
}
