import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2

/// RFC 8414 discovery over loopback HTTP: where the document is read, what is refused (another
/// issuer, endpoints in clear, an issuer that is none, a document that is not metadata, too
/// large or too slow), and what is built from it.
final class OAuth2DiscoveryTests: XCTestCase {
    /// A document for `issuer` with `fields` added (`NSNull` removes one).
    private func document(issuer: String, _ fields: [String: Any] = [:]) -> Data {
        var object: [String: Any] = [
            "issuer": issuer, "token_endpoint": "https://auth.example/token", "authorization_endpoint": "https://auth.example/authorize",
        ]
        for (key, value) in fields { object[key] = value is NSNull ? nil : value }
        return (try? JSONSerialization.data(withJSONObject: object)) ?? Data()
    }

    func testTheMetadataURLPutsTheIssuersPathAfterTheWellKnownPrefix() throws {
        let cases = [
            ("https://auth.example", "https://auth.example/.well-known/oauth-authorization-server"),
            ("https://auth.example/", "https://auth.example/.well-known/oauth-authorization-server"),
            ("https://auth.example/tenant/one", "https://auth.example/.well-known/oauth-authorization-server/tenant/one"),
            ("https://auth.example:8443/t/", "https://auth.example:8443/.well-known/oauth-authorization-server/t"),
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080/.well-known/oauth-authorization-server"),
            ("http://localhost:1/x", "http://localhost:1/.well-known/oauth-authorization-server/x"),
            ("http://[::1]:9000", "http://[::1]:9000/.well-known/oauth-authorization-server"),
        ]
        for (issuer, expected) in cases {
            XCTAssertEqual(try OAuth2ServerMetadata.metadataURL(for: URL(string: issuer)!).absoluteString, expected, issuer)
        }
        for (issuer, reason) in [
            ("http://auth.example", "https"), ("https://auth.example?tenant=1", "query"), ("https://auth.example#x", "query"),
            ("ftp://auth.example", "https"), ("http://127.0.0.1.example.com", "https"),
        ] {
            XCTAssertThrowsError(try OAuth2ServerMetadata.metadataURL(for: URL(string: issuer)!), issuer) { error in
                guard case .invalidIssuer(_, let why)? = error as? OAuth2DiscoveryError else { return XCTFail("\(issuer): \(error)") }
                XCTAssertTrue(why.contains(reason), "\(issuer): \(why)")
            }
        }
    }

    func testDiscoveryFromOAuthServerFindsItsEndpointsAndTheSignOutRevokesThere() async throws {
        let oauth = try OAuthServer(name: "demo", access: "demo-access-0")
        defer { oauth.shutdown() }
        let metadata = try await OAuth2ServerMetadata.discover(issuer: oauth.baseURL)
        XCTAssertEqual(metadata.issuer, oauth.issuer)
        XCTAssertEqual(metadata.tokenEndpoint, oauth.tokenURL)
        XCTAssertEqual(metadata.authorizationEndpoint, oauth.authorizeURL)
        XCTAssertEqual(metadata.revocationEndpoint, oauth.revocationURL)
        XCTAssertFalse(metadata.sendsIssuerInAuthorizationResponses)
        XCTAssertEqual(oauth.server.requests(path: "/.well-known/oauth-authorization-server").first?.headers["Accept"], "application/json")

        let endpoint = metadata.tokenEndpoint(clientID: "app", timeout: .seconds(3))
        XCTAssertEqual(endpoint.timeout, .seconds(3))
        let auth = OAuth2Authenticator(
            origins: [oauth.baseURL], tokenEndpoint: endpoint,
            store: InMemoryCredentialStore(
                OAuth2Credential(accessToken: "demo-access-0", refreshToken: "refresh-0", expiresAt: .distantFuture)))
        let outcome = try await auth.signOut()
        guard case .revoked = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(oauth.revokedTokens, ["refresh-0", "demo-access-0"])
    }

    /// RFC 8414 §3.3: a document naming another issuer is refused, its endpoints unused.
    func testADocumentOfAnotherIssuerIsRefused() async throws {
        let oauth = try OAuthServer(name: "demo")
        defer { oauth.shutdown() }
        oauth.setMetadataIssuer("https://impostor.example")
        do {
            _ = try await OAuth2ServerMetadata.discover(issuer: oauth.baseURL)
            XCTFail("another issuer's document was taken")
        } catch let error as OAuth2DiscoveryError {
            XCTAssertEqual(error, .issuerMismatch(expected: oauth.issuer, received: "https://impostor.example"))
            XCTAssertTrue(error.description.contains("not \(oauth.issuer)"), error.description)
        }
        // The same spelling, not a lookalike: a trailing slash is another issuer.
        oauth.setMetadataIssuer(oauth.issuer + "/")
        do {
            _ = try await OAuth2ServerMetadata.discover(issuer: oauth.baseURL)
            XCTFail("another spelling of the issuer was taken")
        } catch let error as OAuth2DiscoveryError {
            XCTAssertEqual(error, .issuerMismatch(expected: oauth.issuer, received: oauth.issuer + "/"))
        }
        XCTAssertThrowsError(try OAuth2ServerMetadata(issuer: URL(string: "https://auth.example")!, document: Data("{}".utf8))) {
            XCTAssertEqual($0 as? OAuth2DiscoveryError, .issuerMismatch(expected: "https://auth.example", received: nil))
        }
    }

    func testEndpointsInClearAndDocumentsThatAreNotMetadataAreRefused() throws {
        let issuer = URL(string: "https://auth.example")!
        let cases: [(name: String, fields: [String: Any], expected: OAuth2DiscoveryError)] = [
            (
                "a token endpoint in clear", ["token_endpoint": "http://auth.example/token"],
                .insecureEndpoint(field: "token_endpoint", url: URL(string: "http://auth.example/token")!)
            ),
            (
                "a revocation endpoint in clear", ["revocation_endpoint": "http://auth.example/revoke?key=x"],
                .insecureEndpoint(field: "revocation_endpoint", url: URL(string: "http://auth.example/revoke")!)
            ),
            (
                "no token endpoint", ["token_endpoint": NSNull()],
                .invalidMetadata(
                    url: URL(string: "https://auth.example/.well-known/oauth-authorization-server")!, reason: "it has no token_endpoint")
            ),
            (
                "a token endpoint that is no URL", ["token_endpoint": 42],
                .invalidMetadata(
                    url: URL(string: "https://auth.example/.well-known/oauth-authorization-server")!,
                    reason: "its token_endpoint is not an absolute URL without a fragment")
            ),
        ]
        for (name, fields, expected) in cases {
            XCTAssertThrowsError(try OAuth2ServerMetadata(issuer: issuer, document: document(issuer: issuer.absoluteString, fields)), name)
            {
                XCTAssertEqual($0 as? OAuth2DiscoveryError, expected, name)
            }
        }
        XCTAssertThrowsError(try OAuth2ServerMetadata(issuer: issuer, document: Data("<html>".utf8))) {
            guard case .invalidMetadata(_, let reason)? = $0 as? OAuth2DiscoveryError else { return XCTFail("\($0)") }
            XCTAssertEqual(reason, "the document is not a JSON object")
        }
        // Loopback endpoints in clear are fine (a test server); the defaults RFC 8414 §2 gives.
        let loopback = try OAuth2ServerMetadata(
            issuer: URL(string: "http://127.0.0.1:9")!,
            document: document(
                issuer: "http://127.0.0.1:9",
                [
                    "token_endpoint": "http://127.0.0.1:9/token", "authorization_endpoint": NSNull(),
                    "revocation_endpoint": "http://localhost:9/r",
                ]))
        XCTAssertEqual(loopback.tokenEndpointAuthMethods, ["client_secret_basic"])
        XCTAssertNil(loopback.authorizationEndpoint)
        XCTAssertEqual(loopback.revocationEndpoint, URL(string: "http://localhost:9/r"))
        XCTAssertThrowsError(
            try loopback.authorizationCodeFlow(tokenEndpoint: loopback.tokenEndpoint(), redirectURI: URL(string: "app:/cb")!)
        ) {
            guard case .invalidMetadata(_, let reason)? = $0 as? OAuth2DiscoveryError else { return XCTFail("\($0)") }
            XCTAssertEqual(reason, "it has no authorization_endpoint")
        }
        // A server that takes the secret in the form only: the endpoint sends it there.
        let postOnly = try OAuth2ServerMetadata(
            issuer: issuer,
            document: document(issuer: issuer.absoluteString, ["token_endpoint_auth_methods_supported": ["client_secret_post"]]))
        XCTAssertEqual(postOnly.tokenEndpoint(clientID: "a", clientSecret: "s").clientAuthentication, .requestBody)
        XCTAssertEqual(postOnly.tokenEndpoint(clientID: "a", clientSecret: "s", clientAuthentication: .basic).clientAuthentication, .basic)
    }

    /// An answer other than 200, one past the size limit, and one that never comes: each a
    /// clear error, within the bounds.
    func testDiscoveryIsBoundedInSizeAndTime() async throws {
        let server = try LoopbackServer()
        let gate = Gate()
        defer {
            gate.open()
            server.shutdown()
        }
        server.route("/.well-known/oauth-authorization-server/missing") { _ in .status(404) }
        server.route("/.well-known/oauth-authorization-server/large") { _ in
            let padding = String(repeating: "x", count: 100_000)
            return .json(Data("{\"issuer\": \"\(padding)\"}".utf8))
        }
        server.route("/.well-known/oauth-authorization-server/slow") { _ in
            _ = gate.wait(timeout: .seconds(20))
            return .status(500)
        }
        let base = server.baseURL.absoluteString
        do {
            _ = try await OAuth2ServerMetadata.discover(issuer: URL(string: base + "/missing")!)
            XCTFail("a 404 was taken")
        } catch let error as OAuth2DiscoveryError {
            XCTAssertEqual(error, .metadataUnavailable(url: server.url("/.well-known/oauth-authorization-server/missing"), status: 404))
        }
        do {
            _ = try await OAuth2ServerMetadata.discover(issuer: URL(string: base + "/large")!, documentSizeLimit: 4_096)
            XCTFail("a document past the limit was read")
        } catch let error as OAuth2DiscoveryError {
            XCTAssertEqual(error, .documentTooLarge(url: server.url("/.well-known/oauth-authorization-server/large"), limit: 4_096))
        }
        let started = ContinuousClock.now
        do {
            _ = try await OAuth2ServerMetadata.discover(issuer: URL(string: base + "/slow")!, timeout: .milliseconds(500))
            XCTFail("a hung server answered")
        } catch let error as URLError {
            XCTAssertEqual(error.code, .timedOut)
        }
        let waited = started.duration(to: .now)
        XCTAssertGreaterThanOrEqual(waited, .milliseconds(450))
        XCTAssertLessThan(waited, .seconds(3))
    }
}
