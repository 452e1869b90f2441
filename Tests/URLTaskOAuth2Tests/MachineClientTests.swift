import Foundation
import LoopbackServer
import XCTest

@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The OAuth2 article's machine client (``MachineClient``, `Sources/Examples/MachineClient.swift`,
/// compiled into this target through a symbolic link): it signs in with the client-credentials
/// grant and, having no refresh token, asks for a new token when the API refuses the one it has.
/// Run against LoopbackServer's `OAuthServer` and against django-oauth-toolkit 3.4.1
/// (``DjangoOAuthServer``; skipped where it is not installed).
final class MachineClientTests: XCTestCase {
    typealias Kit = ReactorTestKit

    func testAMachineClientSignsInWithClientCredentialsAndAsksAgainWhenTheAPIRefusesItsToken() async throws {
        let server = try OAuthServer(name: "machine")
        defer { server.shutdown() }
        server.requireClient(id: "nightly-job", secret: "job-secret")
        let client = MachineClient(api: server.baseURL, tokenURL: server.tokenURL, clientID: "nightly-job", clientSecret: "job-secret")
        defer { client.session.invalidateAndCancel() }
        try await client.signIn()
        let signedIn = try await client.auth.currentCredential()
        XCTAssertNil(signedIn?.refreshToken, "RFC 6749 §4.4.3: no refresh token")

        let first = await Kit.fetch(client.session, server.apiURL())
        XCTAssertEqual(first.status, 200, first.label)
        server.revokeAccess()
        let again = await Kit.fetch(client.session, server.apiURL())
        XCTAssertEqual(again.status, 200, again.label)
        XCTAssertEqual(server.unauthorizedCount, 1)
        let grants = server.tokenRequests.map { OAuthServer.decodeForm($0.bodyText)["grant_type"] ?? "-" }
        XCTAssertEqual(grants, ["client_credentials", "client_credentials"], "renewed by asking again, not by a refresh token")
        XCTAssertTrue(server.tokenRequests.allSatisfy { $0.headers["authorization"]?.hasPrefix("Basic ") == true })
        let renewed = try await client.auth.currentCredential()
        XCTAssertEqual(renewed?.accessToken, server.currentAccess)
        XCTAssertNotEqual(renewed?.accessToken, signedIn?.accessToken)

        // A wrong secret: a configuration error, not a sign-in to ask a user for.
        let wrong = MachineClient(api: server.baseURL, tokenURL: server.tokenURL, clientID: "nightly-job", clientSecret: "not-it")
        defer { wrong.session.invalidateAndCancel() }
        do {
            try await wrong.signIn()
            XCTFail("a wrong secret signed in")
        } catch let error as OAuth2Error {
            // 401 invalid_client with `WWW-Authenticate: Basic` (on Linux without the code, which URLSession drops).
            guard case .tokenRequestRejected(401, _, _, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(error.isConfigurationError)
            XCTAssertFalse(error.requiresSignIn)
        }
    }

    /// The same against django-oauth-toolkit, whose confidential test client may use client
    /// credentials: the token expired at the server is refused with 401, the client asks for a
    /// new one (a second `client_credentials` request, HTTP Basic, never `refresh_token`), and
    /// the call is answered; the old token is inactive, the new one active.
    func testTheMachineClientAgainstDjangoOAuthToolkit() async throws {
        let server = try DjangoOAuthServer.start(.init(accessTokenLifetime: 120))
        let client = MachineClient(
            api: server.baseURL, tokenURL: server.tokenURL, clientID: DjangoOAuthServer.confidentialClientID,
            clientSecret: DjangoOAuthServer.confidentialClientSecret, scope: "read")
        defer { client.session.invalidateAndCancel() }
        try await client.signIn()
        let signedIn = try await client.auth.currentCredential()
        let first = try XCTUnwrap(signedIn)
        XCTAssertNil(first.refreshToken)
        XCTAssertEqual(first.scope, "read")

        let before = await Kit.fetch(client.session, server.apiURL)
        XCTAssertEqual(before.status, 200, before.label)
        try await server.expireAccessToken(first.accessToken)
        let after = await Kit.fetch(client.session, server.apiURL)
        XCTAssertEqual(after.status, 200, after.label)

        let requests = try await server.requests()
        XCTAssertEqual(requests.filter { $0.path == server.apiURL.path }.map(\.status), [200, 401, 200])
        let tokenRequests = requests.filter { $0.path == "/o/token/" }
        XCTAssertEqual(tokenRequests.map(\.grantType), ["client_credentials", "client_credentials"])
        XCTAssertEqual(tokenRequests.map(\.status), [200, 200])
        XCTAssertEqual(tokenRequests.map(\.clientAuthentication), ["basic", "basic"])
        XCTAssertEqual(
            tokenRequests.map(\.parameters), [["grant_type", "scope"], ["grant_type", "scope"]], "the secret is not in the form")

        let renewed = try await client.auth.currentCredential()
        let current = try XCTUnwrap(renewed)
        XCTAssertNotEqual(current.accessToken, first.accessToken)
        let old = try await server.introspect(token: first.accessToken)
        XCTAssertFalse(old.active)
        let new = try await server.introspect(token: current.accessToken)
        XCTAssertTrue(new.active)
        XCTAssertEqual(new.clientID, DjangoOAuthServer.confidentialClientID)
        XCTAssertEqual(new.scope, "read")
    }
}
