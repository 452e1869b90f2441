import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// Chained sign-in (both or neither), and the kit's pure parts: the token request and
/// response, the credential.
final class OAuth2SignInTests: XCTestCase {
    typealias Kit = ReactorTestKit

    private struct Services {
        let identity: OAuthServer
        let payments: OAuthServer
        let identityStore = InMemoryCredentialStore()
        let paymentsStore: any CredentialStore
        let identityAuth: OAuth2Authenticator
        let paymentsAuth: OAuth2Authenticator

        init(paymentsStore: (any CredentialStore)? = nil) throws {
            identity = try OAuthServer(name: "id", access: nil)
            payments = try OAuthServer(name: "pay", access: nil)
            self.paymentsStore = paymentsStore ?? InMemoryCredentialStore()
            identityAuth = OAuth2Authenticator(origins: [identity.server.baseURL], tokenEndpoint: identity.endpoint, store: identityStore)
            paymentsAuth = OAuth2Authenticator(
                origins: [payments.server.baseURL], tokenEndpoint: payments.endpoint, store: self.paymentsStore)
        }

        /// Password grant at the identity service, then a token exchange at payments.
        func signIn() async throws {
            let identityEndpoint = identity.endpoint
            let paymentsEndpoint = payments.endpoint
            try await OAuth2Authenticator.signIn(
                identityAuth, using: { try await identityEndpoint.signIn(username: "ada", password: "s&cret=1") },
                then: paymentsAuth, using: { identityToken in try await paymentsEndpoint.exchange(identityToken) })
        }
    }

    func testAChainedSignInStoresBothCredentialsAndBothServicesWork() async throws {
        let services = try Services()
        services.payments.acceptExchange(of: "id-access-1")
        try await services.signIn()
        let identityStored = try await services.identityStore.load()
        let paymentsStored = try await services.paymentsStore.load()
        XCTAssertEqual(identityStored?.accessToken, "id-access-1")
        XCTAssertEqual(paymentsStored?.accessToken, "pay-access-1")
        // The grants' forms, as the servers received them (RFC 6749 §4.3, RFC 8693).
        let password = OAuthServer.decodeForm(try XCTUnwrap(services.identity.tokenRequests.first?.bodyText))
        XCTAssertEqual(password, ["grant_type": "password", "username": "ada", "password": "s&cret=1", "client_id": "tests"])
        let exchange = OAuthServer.decodeForm(try XCTUnwrap(services.payments.tokenRequests.first?.bodyText))
        XCTAssertEqual(
            exchange,
            [
                "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange", "subject_token": "id-access-1",
                "subject_token_type": "urn:ietf:params:oauth:token-type:access_token", "client_id": "tests",
            ])

        let manager = URLTaskManager(
            interceptors: [
                BearerInterceptor(authenticator: services.identityAuth), BearerInterceptor(authenticator: services.paymentsAuth),
            ],
            reactors: [
                OAuth2RefreshReactor(authenticator: services.identityAuth), OAuth2RefreshReactor(authenticator: services.paymentsAuth),
            ]
        )
        let me = await Kit.fetch(manager.session, services.identity.apiURL("/me"))
        let wallet = await Kit.fetch(manager.session, services.payments.apiURL("/wallet"))
        XCTAssertEqual(me.status, 200)
        XCTAssertEqual(wallet.status, 200)
    }

    func testWhenTheSecondLoginFailsNothingIsStoredForEither() async throws {
        let services = try Services()
        services.payments.acceptExchange(of: nil)  // payments refuses the identity token
        do {
            try await services.signIn()
            XCTFail("the chain should fail")
        } catch let error as OAuth2Error {
            XCTAssertEqual(
                error, .tokenRequestRejected(status: 400, error: "invalid_grant", description: nil, url: services.payments.endpoint.url))
        }
        XCTAssertEqual(services.identity.tokenRequestCount, 1, "the first login happened")
        let identityCurrent = try await services.identityAuth.currentCredential()
        let paymentsCurrent = try await services.paymentsAuth.currentCredential()
        let identityStored = try await services.identityStore.load()
        let paymentsStored = try await services.paymentsStore.load()
        XCTAssertNil(identityCurrent)
        XCTAssertNil(paymentsCurrent)
        XCTAssertNil(identityStored)
        XCTAssertNil(paymentsStored)
    }

    func testWhenStoringTheSecondFailsTheFirstIsPutBackAsItWas() async throws {
        struct Broken: Error {}
        actor BrokenStore: CredentialStore {
            func load() async throws -> OAuth2Credential? { nil }
            func save(_ credential: OAuth2Credential) async throws { throw Broken() }
            func clear() async throws {}
        }
        let services = try Services(paymentsStore: BrokenStore())
        let previous = OAuth2Credential(accessToken: "previous", refreshToken: "r", expiresAt: .distantFuture)
        try await services.identityAuth.signIn(previous)
        services.payments.acceptExchange(of: "id-access-1")
        do {
            try await services.signIn()
            XCTFail("the chain should fail")
        } catch {
            XCTAssertTrue(error is Broken, "\(error)")
        }
        let identityCurrent = try await services.identityAuth.currentCredential()
        let identityStored = try await services.identityStore.load()
        XCTAssertEqual(identityCurrent, previous)
        XCTAssertEqual(identityStored, previous)
    }

    // MARK: Pure parts

    func testTheFormEscapesEverythingButUnreservedCharacters() {
        let body = OAuth2TokenEndpoint.formEncoded(["refresh_token": "a+b/c=d&e f~g", "grant_type": "refresh_token"])
        XCTAssertEqual(body, "grant_type=refresh_token&refresh_token=a%2Bb%2Fc%3Dd%26e%20f~g")
        XCTAssertEqual(OAuthServer.decodeForm(body)["refresh_token"], "a+b/c=d&e f~g")
    }

    func testATokenResponseBecomesACredential() throws {
        let issued = Date(timeIntervalSince1970: 1_000_000)
        let previous = OAuth2Credential(accessToken: "old", refreshToken: "keep-me", expiresAt: issued, scope: "read")
        let rotated = try OAuth2TokenEndpoint.credential(
            from: ["access_token": "new", "token_type": "bearer", "expires_in": 3600, "refresh_token": "rotated", "scope": "read write"],
            issuedAt: issued, previous: previous)
        XCTAssertEqual(
            rotated,
            OAuth2Credential(
                accessToken: "new", refreshToken: "rotated", expiresAt: issued.addingTimeInterval(3600), scope: "read write",
                issuedAt: issued))

        let kept = try OAuth2TokenEndpoint.credential(
            from: ["access_token": "new", "expires_in": "60"], issuedAt: issued, previous: previous)
        XCTAssertEqual(kept.refreshToken, "keep-me", "no refresh_token in the answer: keep the old one (RFC 6749 §6)")
        XCTAssertEqual(kept.scope, "read")
        XCTAssertEqual(kept.expiresAt, issued.addingTimeInterval(60), "expires_in as a string")

        let forever = try OAuth2TokenEndpoint.credential(from: ["access_token": "new"], issuedAt: issued, previous: nil)
        XCTAssertEqual(forever.expiresAt, .distantFuture)
        XCTAssertNil(forever.refreshToken)

        XCTAssertThrowsError(try OAuth2TokenEndpoint.credential(from: ["token_type": "Bearer"], issuedAt: issued, previous: nil))
        XCTAssertThrowsError(
            try OAuth2TokenEndpoint.credential(from: ["access_token": "x", "token_type": "mac"], issuedAt: issued, previous: nil))
    }

    func testTheTokenEndpointsErrorsAreTypedAndKnowWhetherOnlySignInHelps() async throws {
        let api = try OAuthServer()
        api.setTokenAnswer(.reject(status: 400, error: "invalid_grant"))
        let credential = OAuth2Credential(accessToken: "a", refreshToken: "r", expiresAt: .distantFuture)
        do {
            _ = try await api.endpoint.refresh(credential)
            XCTFail("rejected")
        } catch let error as OAuth2Error {
            XCTAssertEqual(
                error,
                .tokenRequestRejected(status: 400, error: "invalid_grant", description: "refused by the server", url: api.endpoint.url))
            XCTAssertTrue(error.requiresSignIn)
        }
        api.setTokenAnswer(.reject(status: 503, error: "temporarily_unavailable"))
        do {
            _ = try await api.endpoint.refresh(credential)
            XCTFail("rejected")
        } catch let error as OAuth2Error {
            XCTAssertFalse(error.requiresSignIn, "a 5xx may pass")
        }
        do {
            _ = try await api.endpoint.refresh(OAuth2Credential(accessToken: "a", expiresAt: .distantFuture))
            XCTFail("no refresh token")
        } catch let error as OAuth2Error {
            XCTAssertEqual(error, .noRefreshToken)
        }
        XCTAssertEqual(api.tokenRequestCount, 2)
    }

    func testTheCredentialExpiresWithALeewayRoundTripsAndNeverPrintsItsTokens() throws {
        let now = Date(timeIntervalSince1970: 1_000_000)
        let credential = OAuth2Credential(
            accessToken: "secret-access", refreshToken: "secret-refresh", expiresAt: now.addingTimeInterval(30))
        XCTAssertFalse(credential.isExpired(at: now))
        XCTAssertFalse(credential.isExpired(within: .seconds(29), at: now))
        XCTAssertTrue(credential.isExpired(within: .seconds(30), at: now))
        XCTAssertTrue(credential.isExpired(at: now.addingTimeInterval(31)))
        let decoded = try JSONDecoder().decode(OAuth2Credential.self, from: JSONEncoder().encode(credential))
        XCTAssertEqual(decoded, credential)
        XCTAssertFalse("\(credential)".contains("secret"))
        XCTAssertFalse(String(reflecting: credential).contains("secret"))
    }
}
