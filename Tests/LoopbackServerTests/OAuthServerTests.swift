import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest

/// The demo OAuth server's grants and API, with a plain URLSession as the client.
final class OAuthServerTests: XCTestCase {
    private var oauth: OAuthServer!
    private var client: TestHTTPClient!

    override func setUpWithError() throws {
        oauth = try OAuthServer(name: "demo", users: ["ada": "lovelace"])
        client = TestHTTPClient()
    }

    override func tearDown() {
        client.invalidate()
        oauth.shutdown()
    }

    private func token(_ form: String) async throws -> (status: Int, json: [String: Any]) {
        var request = URLRequest(url: oauth.tokenURL)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(form.utf8)
        let (data, response) = try await client.send(request)
        return (response.statusCode, (try JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:])
    }

    private func api(bearer: String?) async throws -> Int {
        var request = URLRequest(url: oauth.apiURL("/me"))
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        return try await client.send(request).1.statusCode
    }

    func testPasswordGrantChecksTheUserThenTheAPIAcceptsOnlyTheIssuedToken() async throws {
        let wrong = try await token("grant_type=password&username=ada&password=nope")
        XCTAssertEqual(wrong.status, 400)
        XCTAssertEqual(wrong.json["error"] as? String, "invalid_grant")

        let signedIn = try await token("grant_type=password&username=ada&password=lovelace")
        XCTAssertEqual(signedIn.status, 200)
        XCTAssertEqual(signedIn.json["access_token"] as? String, "demo-access-1")
        XCTAssertEqual(signedIn.json["refresh_token"] as? String, "demo-refresh-1")
        XCTAssertEqual(signedIn.json["token_type"] as? String, "Bearer")
        XCTAssertEqual(signedIn.json["expires_in"] as? Int, 3600)

        let noToken = try await api(bearer: nil)
        let good = try await api(bearer: "demo-access-1")
        XCTAssertEqual(noToken, 401)
        XCTAssertEqual(good, 200)
        XCTAssertEqual(oauth.unauthorizedCount, 1)
        XCTAssertEqual(oauth.apiRequests.count, 2)
    }

    func testRefreshRotatesBothTokensAndARevokedRefreshTokenIsRefused() async throws {
        _ = try await token("grant_type=password&username=ada&password=lovelace")
        let rotated = try await token("grant_type=refresh_token&refresh_token=demo-refresh-1")
        XCTAssertEqual(rotated.json["refresh_token"] as? String, "demo-refresh-2")
        let reused = try await token("grant_type=refresh_token&refresh_token=demo-refresh-1")
        XCTAssertEqual(reused.status, 400, "a rotated refresh token is dead")
        let old = try await api(bearer: "demo-access-1")
        XCTAssertEqual(old, 401)

        oauth.revokeRefresh()
        let revoked = try await token("grant_type=refresh_token&refresh_token=demo-refresh-2")
        XCTAssertEqual(revoked.status, 400)
        XCTAssertEqual(oauth.refreshTokensReceived, ["demo-refresh-1", "demo-refresh-1", "demo-refresh-2"])
        XCTAssertEqual(oauth.tokenRequestCount, 4)
    }

    func testTokenExchangeNeedsTheAllowedSubject() async throws {
        let form = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange&subject_token="
        let refused = try await token(form + "legacy-1")
        XCTAssertEqual(refused.status, 400)
        oauth.acceptExchange(of: "legacy-1")
        let issued = try await token(form + "legacy-1")
        XCTAssertEqual(issued.json["access_token"] as? String, "demo-access-1")
    }
}
