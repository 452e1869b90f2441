import Foundation
import LoopbackServer
import XCTest

@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Signing out against django-oauth-toolkit 3.4.1 (``DjangoOAuthServer``; skipped, saying how to
/// install it, where it is absent): the sign-out revokes (RFC 7009) what it drops, found from the
/// issuer's metadata (RFC 8414) or given, with the token requests' client authentication. What
/// is checked is the server's own word: its introspection, its refusal of the old refresh token,
/// its log of the revocation requests.
final class DjangoOAuthRevocationTests: XCTestCase {
    typealias Server = DjangoOAuthServer
    typealias Kit = ReactorTestKit

    /// A client of the server as the test names it: its token endpoint (with the revocation URL)
    /// and what the server's log records for its client authentication.
    private struct Client {
        let name: String
        let endpoint: OAuth2TokenEndpoint
        let recorded: String
    }

    private func clients(_ server: Server) -> [Client] {
        [
            Client(
                name: "confidential, HTTP Basic",
                endpoint: OAuth2TokenEndpoint(
                    url: server.tokenURL, revocationURL: server.revocationURL, clientID: Server.confidentialClientID,
                    clientSecret: Server.confidentialClientSecret),
                recorded: "basic"),
            Client(
                name: "confidential, secret in the form",
                endpoint: OAuth2TokenEndpoint(
                    url: server.tokenURL, revocationURL: server.revocationURL, clientID: Server.confidentialClientID,
                    clientSecret: Server.confidentialClientSecret, clientAuthentication: .requestBody),
                recorded: "form"),
            Client(
                name: "public",
                endpoint: OAuth2TokenEndpoint(url: server.tokenURL, revocationURL: server.revocationURL, clientID: Server.publicClientID),
                recorded: "client_id"),
        ]
    }

    /// Signs the test user in through the server's authorization endpoint (PKCE S256).
    private func signIn(_ server: Server, _ endpoint: OAuth2TokenEndpoint) async throws -> OAuth2Credential {
        let flow = OAuth2AuthorizationCodeFlow(
            authorizationEndpoint: server.authorizeURL, tokenEndpoint: endpoint, redirectURI: server.loopbackRedirectURI(port: 53682),
            scope: "read write")
        let attempt = flow.start()
        return try await flow.credential(fromCallback: try await server.browse(attempt.url), for: attempt)
    }

    private func makeManager(_ auth: OAuth2Authenticator) -> URLTaskManager {
        URLTaskManager(interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
    }

    /// What the server says of `credential` after a sign-out: introspection of its access token
    /// says inactive, and a refresh grant with its refresh token is refused `invalid_grant`.
    private func assertDeadAtTheServer(
        _ server: Server, _ credential: OAuth2Credential, _ endpoint: OAuth2TokenEndpoint, _ name: String,
        file: StaticString = #filePath, line: UInt = #line
    ) async throws {
        let introspection = try await server.introspect(token: credential.accessToken)
        XCTAssertFalse(introspection.active, "\(name): the access token is still active", file: file, line: line)
        do {
            _ = try await endpoint.refresh(credential)
            XCTFail("\(name): the old refresh token still buys a new pair", file: file, line: line)
        } catch let error as OAuth2Error {
            XCTAssertEqual(error.serverErrorCode, "invalid_grant", "\(name): \(error)", file: file, line: line)
            XCTAssertTrue(error.requiresSignIn, name, file: file, line: line)
        }
        let state = try await server.refreshTokenState(try XCTUnwrap(credential.refreshToken))
        XCTAssertTrue(state.exists && state.revoked, "\(name): the refresh token is not revoked", file: file, line: line)
    }

    /// Before the fix, the sign-out sent nothing: introspection said `active: true` afterwards
    /// and the old refresh token bought a new pair. Now, for each kind of client, one revocation
    /// request per token, refresh token first, with the token requests' client authentication,
    /// and the server says both are dead.
    func testManagerSignOutRevokesBothTokensForConfidentialAndPublicClients() async throws {
        let server = try Server.start()
        for client in clients(server) {
            let signedIn = try await signIn(server, client.endpoint)
            let before = try await server.introspect(token: signedIn.accessToken)
            XCTAssertTrue(before.active, client.name)
            let store = InMemoryCredentialStore(signedIn)
            let auth = OAuth2Authenticator(origins: [server.baseURL], tokenEndpoint: client.endpoint, store: store)
            let manager = makeManager(auth)
            defer { manager.session.invalidateAndCancel() }
            let fetched = await Kit.fetch(manager.session, server.apiURL)
            XCTAssertEqual(fetched.status, 200, "\(client.name): \(fetched.label)")
            let revocationsBefore = try await server.revocationRequests().count

            let outcome = try await manager.signOut(of: auth)

            guard case .revoked = outcome else { return XCTFail("\(client.name): \(outcome)") }
            let stored = try await store.load()
            XCTAssertNil(stored, client.name)
            let revocations = try await server.revocationRequests().dropFirst(revocationsBefore)
            XCTAssertEqual(revocations.map(\.tokenTypeHint), ["refresh_token", "access_token"], client.name)
            XCTAssertEqual(revocations.map(\.status), [200, 200], client.name)
            XCTAssertEqual(revocations.map(\.method), ["POST", "POST"], client.name)
            XCTAssertEqual(revocations.map(\.clientAuthentication), [client.recorded, client.recorded], client.name)
            let parameters: [String] =
                switch client.recorded {
                case "basic": ["token", "token_type_hint"]
                case "form": ["client_id", "client_secret", "token", "token_type_hint"]
                default: ["client_id", "token", "token_type_hint"]
                }
            XCTAssertEqual(revocations.map(\.parameters), [parameters, parameters], client.name)
            try await assertDeadAtTheServer(server, signedIn, client.endpoint, client.name)

            // The API refuses the old token too; the next request goes without one.
            let after = await Kit.fetch(manager.session, server.apiURL)
            XCTAssertEqual(after.status, 401, "\(client.name): \(after.label)")
        }
    }

    /// The app gives the issuer only: discovery reads the server's RFC 8414 metadata, checks its
    /// issuer, and the token endpoint it builds revokes at the `revocation_endpoint` found there.
    func testDiscoveryFromTheIssuerFindsTheRevocationEndpointAndTheSignOutUsesIt() async throws {
        let server = try Server.start(.init(sendsIssuerInAuthorizationResponses: true))
        let metadata = try await OAuth2ServerMetadata.discover(issuer: server.baseURL)
        XCTAssertEqual(metadata.issuer, server.issuer)
        XCTAssertEqual(metadata.tokenEndpoint, server.tokenURL)
        XCTAssertEqual(metadata.authorizationEndpoint, server.authorizeURL)
        XCTAssertEqual(metadata.revocationEndpoint, server.revocationURL)
        XCTAssertEqual(metadata.codeChallengeMethods, ["S256"])
        XCTAssertTrue(metadata.sendsIssuerInAuthorizationResponses)

        let endpoint = metadata.tokenEndpoint(clientID: Server.confidentialClientID, clientSecret: Server.confidentialClientSecret)
        XCTAssertEqual(endpoint.url, server.tokenURL)
        XCTAssertEqual(endpoint.revocationURL, server.revocationURL)
        XCTAssertEqual(endpoint.clientAuthentication, .basic, "the server takes client_secret_basic")
        // The flow built from the metadata checks the server's `iss` (RFC 9207), required.
        let flow = try metadata.authorizationCodeFlow(
            tokenEndpoint: endpoint, redirectURI: server.loopbackRedirectURI(port: 53682), scope: "read")
        XCTAssertEqual(flow.issuer, server.issuer)
        XCTAssertTrue(flow.requiresIssuer)
        let attempt = flow.start()
        let store = InMemoryCredentialStore()
        let auth = OAuth2Authenticator(origins: [server.baseURL], tokenEndpoint: endpoint, store: store)
        try await flow.signIn(auth, callback: try await server.browse(attempt.url), for: attempt)
        let loaded = try await store.load()
        let signedIn = try XCTUnwrap(loaded)

        let outcome = try await auth.signOut()

        guard case .revoked = outcome else { return XCTFail("\(outcome)") }
        try await assertDeadAtTheServer(server, signedIn, endpoint, "discovered")
        let revocations = try await server.revocationRequests()
        XCTAssertEqual(revocations.map(\.tokenTypeHint), ["refresh_token", "access_token"])
        XCTAssertEqual(revocations.map(\.clientAuthentication), ["basic", "basic"])
        // Another issuer's name for this document is refused (RFC 8414 §3.3).
        do {
            _ = try OAuth2ServerMetadata(
                issuer: URL(string: server.issuer + "/other")!, document: try await URLSession.shared.data(from: server.metadataURL).0)
            XCTFail("a document for another issuer was taken")
        } catch let error as OAuth2DiscoveryError {
            XCTAssertEqual(error, .issuerMismatch(expected: server.issuer + "/other", received: server.issuer))
        }
    }

    /// Two sign-outs at the same time, through the manager and the authenticator: one revokes,
    /// the other finds nothing to revoke; the server sees exactly one request per token.
    func testTwoConcurrentSignOutsRevokeOnce() async throws {
        let server = try Server.start()
        let endpoint = clients(server)[0].endpoint
        let signedIn = try await signIn(server, endpoint)
        let auth = OAuth2Authenticator(origins: [server.baseURL], tokenEndpoint: endpoint, store: InMemoryCredentialStore(signedIn))
        let manager = makeManager(auth)
        defer { manager.session.invalidateAndCancel() }
        _ = try await auth.currentCredential()

        async let first = manager.signOut(of: auth)
        async let second = auth.signOut()
        let outcomes = try await [first, second]

        XCTAssertEqual(outcomes.filter { if case .revoked = $0 { true } else { false } }.count, 1, "\(outcomes)")
        XCTAssertEqual(outcomes.filter { if case .nothingToRevoke = $0 { true } else { false } }.count, 1, "\(outcomes)")
        let revocations = try await server.revocationRequests()
        XCTAssertEqual(revocations.map(\.tokenTypeHint), ["refresh_token", "access_token"])
        try await assertDeadAtTheServer(server, signedIn, endpoint, "concurrent")
        let third = try await manager.signOut(of: auth)
        guard case .nothingToRevoke = third else { return XCTFail("\(third)") }
        let afterThird = try await server.revocationRequests().count
        XCTAssertEqual(afterThird, 2, "a sign-out with nothing held sends nothing")
    }
}
