import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest

/// OAuthServer's revocation endpoint (RFC 7009) and metadata (RFC 8414), with a plain
/// URLSession as the client.
final class OAuthServerRevocationTests: XCTestCase {
    private var oauth: OAuthServer!
    private var client: OAuthClient!

    override func setUpWithError() throws {
        oauth = try OAuthServer(name: "demo", users: ["ada": "lovelace"])
        client = OAuthClient(oauth: oauth)
    }

    override func tearDown() {
        client.session.invalidateAndCancel()
        oauth.shutdown()
    }

    /// POSTs `form` to the revocation endpoint: the status and the body.
    private func revoke(_ form: String, basic: String? = nil) async throws -> (status: Int, body: String) {
        try await Self.revoke(client.session, oauth.revocationURL, form, basic: basic)
    }

    private static func revoke(
        _ session: URLSession, _ url: URL, _ form: String, basic: String? = nil
    ) async throws -> (status: Int, body: String) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        if let basic { request.setValue("Basic \(Data(basic.utf8).base64EncodedString())", forHTTPHeaderField: "Authorization") }
        request.httpBody = Data(form.utf8)
        let (data, response) = try await session.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    func testRevokingTheRefreshTokenRevokesTheAccessTokenTooAndAnyTokenGets200() async throws {
        _ = try await client.token("grant_type=password&username=ada&password=lovelace")
        // DocC oauth revocation: begin
        let revoked = try await revoke("token=demo-refresh-1&token_type_hint=refresh_token")
        XCTAssertEqual(revoked.status, 200)  // RFC 7009 §2.2: an empty 200
        let api = try await client.api(bearer: "demo-access-1")
        XCTAssertEqual(api, 401, "the access token of the same grant is revoked too (RFC 7009 §2.1)")
        let refresh = try await client.token("grant_type=refresh_token&refresh_token=demo-refresh-1")
        XCTAssertEqual(refresh.json["error"] as? String, "invalid_grant")
        XCTAssertEqual(oauth.revokedTokens, ["demo-refresh-1"])
        // DocC oauth revocation: end
        XCTAssertEqual(revoked.body, "")

        // A token the server does not know (or revoked already) gets 200 as well.
        let unknown = try await revoke("token=never-issued")
        XCTAssertEqual(unknown.status, 200)
        // No token at all is a malformed request.
        let missing = try await revoke("token_type_hint=access_token")
        XCTAssertEqual(missing.status, 400)
        XCTAssertEqual(oauth.revokedTokens, ["demo-refresh-1", "never-issued"])
        XCTAssertEqual(oauth.revocationRequests.count, 3)
    }

    func testRevokingTheAccessTokenLeavesTheRefreshTokenValid() async throws {
        _ = try await client.token("grant_type=password&username=ada&password=lovelace")
        let revoked = try await revoke("token=demo-access-1&token_type_hint=access_token")
        XCTAssertEqual(revoked.status, 200)
        let api = try await client.api(bearer: "demo-access-1")
        XCTAssertEqual(api, 401)
        let refresh = try await client.token("grant_type=refresh_token&refresh_token=demo-refresh-1")
        XCTAssertEqual(refresh.status, 200)
        XCTAssertEqual(refresh.json["access_token"] as? String, "demo-access-2")
    }

    func testTheRevocationEndpointAuthenticatesTheClientAsTheTokenEndpointDoesAndCanRefuse() async throws {
        _ = try await client.token("grant_type=password&username=ada&password=lovelace")
        oauth.requireClient(id: "my-app", secret: "s3cret")
        // The wrong secret is refused and revokes nothing. (Read off a raw connection: the 401's
        // `WWW-Authenticate: Basic` is a challenge a plain URLSession on Linux never completes.)
        let raw = try RawHTTPConnection(port: oauth.server.port, readTimeout: .seconds(5))
        let form = "token=demo-refresh-1&client_id=my-app&client_secret=wrong"
        try raw.send(
            "POST /oauth/revoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                + "Content-Length: \(form.utf8.count)\r\n\r\n\(form)")
        let wrong = try raw.readResponse()
        XCTAssertEqual(wrong.status, 401)
        XCTAssertTrue(wrong.bodyText.contains("invalid_client"))
        XCTAssertEqual(oauth.revokedTokens, [])
        XCTAssertEqual(oauth.currentRefresh, "demo-refresh-1")

        // Basic or the form, as at the token endpoint.
        let basic = try await revoke("token=demo-access-1&token_type_hint=access_token", basic: "my-app:s3cret")
        XCTAssertEqual(basic.status, 200)
        let inForm = try await revoke("token=demo-refresh-1&client_id=my-app&client_secret=s3cret")
        XCTAssertEqual(inForm.status, 200)
        XCTAssertEqual(oauth.revokedTokens, ["demo-access-1", "demo-refresh-1"])
        XCTAssertNil(oauth.currentRefresh)

        // Refusing: nothing is revoked.
        _ = try await client.token("grant_type=password&username=ada&password=lovelace", basic: "my-app:s3cret")
        oauth.setRevocationAnswer(.reject(status: 503, error: "temporarily_unavailable"))
        let down = try await revoke("token=demo-refresh-2", basic: "my-app:s3cret")
        XCTAssertEqual(down.status, 503)
        XCTAssertTrue(down.body.contains("temporarily_unavailable"))
        XCTAssertEqual(oauth.currentRefresh, "demo-refresh-2")
        XCTAssertEqual(oauth.revokedTokens.count, 2)
    }

    func testRevocationAnswersCanBeHeld() async throws {
        let gate = Gate()
        defer { gate.open() }
        oauth.holdRevocationResponses(on: gate)
        let session = client.session
        let url = oauth.revocationURL
        let held = Task { () async throws -> Int in try await OAuthServerRevocationTests.revoke(session, url, "token=anything").status }
        _ = try await oauth.server.waitForRequests(path: "/oauth/revoke", count: 1)
        XCTAssertEqual(oauth.revokedTokens, [], "not answered while held")
        gate.open()
        let status = try await held.value
        XCTAssertEqual(status, 200)
        XCTAssertEqual(oauth.revokedTokens, ["anything"])
    }

    func testTheMetadataNamesTheIssuerAndTheEndpointsAndItsIssuerCanBeChanged() async throws {
        let (data, response) = try await client.session.data(from: oauth.metadataURL)
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        let metadata = try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        XCTAssertEqual(metadata["issuer"] as? String, oauth.issuer)
        XCTAssertEqual(oauth.issuer, oauth.baseURL.absoluteString)
        XCTAssertEqual(metadata["token_endpoint"] as? String, oauth.tokenURL.absoluteString)
        XCTAssertEqual(metadata["authorization_endpoint"] as? String, oauth.authorizeURL.absoluteString)
        XCTAssertEqual(metadata["revocation_endpoint"] as? String, oauth.revocationURL.absoluteString)
        XCTAssertEqual(metadata["code_challenge_methods_supported"] as? [String], ["S256"])

        oauth.setMetadataIssuer("https://impostor.example")
        let (changed, _) = try await client.session.data(from: oauth.metadataURL)
        let other = try XCTUnwrap(try JSONSerialization.jsonObject(with: changed) as? [String: Any])
        XCTAssertEqual(other["issuer"] as? String, "https://impostor.example")
        oauth.setMetadataIssuer(nil)
        let (again, _) = try await client.session.data(from: oauth.metadataURL)
        XCTAssertEqual((try JSONSerialization.jsonObject(with: again) as? [String: Any])?["issuer"] as? String, oauth.issuer)
    }
}
