import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest

/// OAuthServer's knobs, each driven with a plain URLSession as the client; the listings of
/// LoopbackServer's "Driving OAuthServer" article, run as written.
final class OAuthServerKnobTests: XCTestCase {
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

    func testExpiresInCanBeLeftOutOrChanged() async throws {
        // DocC oauth expires in: begin
        oauth.setExpiresIn(nil)  // the next token responses have no expires_in
        let withoutExpiry = try await client.token("grant_type=password&username=ada&password=lovelace")
        XCTAssertNil(withoutExpiry.json["expires_in"])

        oauth.setExpiresIn(5)
        let shortLived = try await client.token("grant_type=refresh_token&refresh_token=demo-refresh-1")
        XCTAssertEqual(shortLived.json["expires_in"] as? Int, 5)
        // DocC oauth expires in: end
    }

    func testRevocationAndRefusals() async throws {
        _ = try await client.token("grant_type=password&username=ada&password=lovelace")
        // DocC oauth refusals: begin
        oauth.revokeAccess()  // the access token expired, by the server's clock
        let refused = try await client.api(bearer: "demo-access-1")
        XCTAssertEqual(refused, 401)
        XCTAssertEqual(oauth.unauthorizedCount, 1)

        oauth.revokeRefresh()  // and the refresh token is dead too: only a new sign-in helps
        let refresh = try await client.token("grant_type=refresh_token&refresh_token=demo-refresh-1")
        XCTAssertEqual(refresh.status, 400)
        XCTAssertEqual(refresh.json["error"] as? String, "invalid_grant")

        oauth.setTokenAnswer(.reject(status: 503, error: "temporarily_unavailable"))  // the endpoint is down
        let down = try await client.token("grant_type=password&username=ada&password=lovelace")
        XCTAssertEqual(down.status, 503)
        XCTAssertEqual(down.json["error"] as? String, "temporarily_unavailable")
        // DocC oauth refusals: end
    }

    func testEachAccessTokenCanBeRevokedAfterSoManyRequests() async throws {
        // DocC oauth revoke each: begin
        oauth.revokeEachAccessToken(afterAuthorizing: 2)  // a server that revokes tokens often
        _ = try await client.token("grant_type=password&username=ada&password=lovelace")
        let first = [try await client.api(bearer: "demo-access-1"), try await client.api(bearer: "demo-access-1")]
        XCTAssertEqual(first, [200, 200])
        let afterTwo = try await client.api(bearer: "demo-access-1")
        XCTAssertEqual(afterTwo, 401)  // revoked once it had authorized 2 requests
        XCTAssertNil(oauth.currentAccess)

        _ = try await client.token("grant_type=refresh_token&refresh_token=demo-refresh-1")
        let renewed = try await client.api(bearer: "demo-access-2")
        XCTAssertEqual(renewed, 200)  // each new token gets its own 2

        oauth.revokeEachAccessToken(afterAuthorizing: 0)  // the API refuses every token issued
        _ = try await client.token("grant_type=refresh_token&refresh_token=demo-refresh-2")
        let refused = try await client.api(bearer: "demo-access-3")
        XCTAssertEqual(refused, 401)
        // DocC oauth revoke each: end
    }

    func testAccessTokensCanExpireByTheServersClock() async throws {
        _ = try await client.token("grant_type=password&username=ada&password=lovelace")
        oauth.expireAccessTokens(after: .seconds(3600))
        let fresh = try await client.api(bearer: "demo-access-1")
        XCTAssertEqual(fresh, 200)
        oauth.expireAccessTokens(after: .zero)  // every token is past its lifetime at once
        let expired = try await client.api(bearer: "demo-access-1")
        XCTAssertEqual(expired, 401)
        XCTAssertNil(oauth.currentAccess, "an expired token stays refused")
        oauth.expireAccessTokens(after: nil)
        let stillRefused = try await client.api(bearer: "demo-access-1")
        XCTAssertEqual(stillRefused, 401)
    }

    func testAConfidentialClientMustAuthenticate() async throws {
        // DocC oauth client: begin
        oauth.requireClient(id: "my-app", secret: "s3cret")
        // The refusal challenges with `WWW-Authenticate: Basic`, which a plain URLSession on
        // Linux (Swift 6.3.1) never completes: read it off a raw connection.
        let raw = try RawHTTPConnection(port: oauth.server.port, readTimeout: .seconds(5))
        let form = "grant_type=password&username=ada&password=lovelace"
        try raw.send(
            "POST /oauth/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                + "Content-Length: \(form.utf8.count)\r\n\r\n\(form)")
        let anonymous = try raw.readResponse()
        XCTAssertEqual(anonymous.status, 401)
        XCTAssertEqual(anonymous.headers["WWW-Authenticate"], "Basic realm=\"oauth\"")
        XCTAssertTrue(anonymous.bodyText.contains("invalid_client"))

        let inTheForm = try await client.token("grant_type=password&username=ada&password=lovelace&client_id=my-app&client_secret=s3cret")
        let withBasic = try await client.token("grant_type=refresh_token&refresh_token=demo-refresh-1", basic: "my-app:s3cret")
        XCTAssertEqual([inTheForm.status, withBasic.status], [200, 200])

        let both = try await client.token(
            "grant_type=refresh_token&refresh_token=demo-refresh-2&client_secret=s3cret", basic: "my-app:s3cret")
        XCTAssertEqual(both.status, 400)
        XCTAssertEqual(both.json["error"] as? String, "invalid_request")
        // DocC oauth client: end
    }

    func testTheClientCredentialsGrantIssuesAnAccessTokenOnlyToTheRequiredClient() async throws {
        let unauthenticated = try await client.token("grant_type=client_credentials", basic: "my-app:s3cret")
        XCTAssertEqual(unauthenticated.status, 400, "no client is required yet: nothing checked who asks")
        XCTAssertEqual(unauthenticated.json["error"] as? String, "unauthorized_client")

        oauth.requireClient(id: "my-app", secret: "s3cret")
        let issued = try await client.token("grant_type=client_credentials", basic: "my-app:s3cret")
        XCTAssertEqual(issued.status, 200)
        XCTAssertEqual(issued.json["access_token"] as? String, "demo-access-1")
        XCTAssertNil(issued.json["refresh_token"], "RFC 6749 §4.4.3: no refresh token")
        let accepted = try await client.api(bearer: "demo-access-1")
        XCTAssertEqual(accepted, 200)

        let again = try await client.token("grant_type=client_credentials&client_id=my-app&client_secret=s3cret")
        XCTAssertEqual(again.json["access_token"] as? String, "demo-access-2", "renewing is asking again")
        let replaced = try await client.api(bearer: "demo-access-1")
        XCTAssertEqual(replaced, 401)
    }

    func testTokenResponsesCanBeHeldAndUnauthorizedAnswersDelayed() async throws {
        let client = self.client!
        // DocC oauth timing: begin
        let gate = Gate()
        oauth.holdTokenResponses(on: gate)  // a refresh stays in flight until the test says
        let arrivals = LockedCounter()
        oauth.onTokenRequest { arrivals.increment() }  // on the server's thread, before the answer

        async let signIn = client.token("grant_type=password&username=ada&password=lovelace").status
        _ = try await oauth.server.waitForRequests(path: "/oauth/token", count: 1)  // recorded, answer held
        gate.open()
        let status = try await signIn
        XCTAssertEqual(status, 200)
        XCTAssertEqual(arrivals.value, 1)

        oauth.delayUnauthorized(by: .milliseconds(300))  // more requests in flight with a refused token
        let start = ContinuousClock.now
        let refused = try await client.api(bearer: "not-a-token")
        XCTAssertEqual(refused, 401)
        XCTAssertGreaterThanOrEqual(ContinuousClock.now - start, .milliseconds(300))
        // DocC oauth timing: end
    }
}

/// A plain URLSession talking to an OAuthServer's token endpoint and API.
struct OAuthClient: Sendable {
    let session = URLSession(configuration: .ephemeral)
    let tokenURL: URL
    let apiURL: URL

    init(oauth: OAuthServer) {
        tokenURL = oauth.tokenURL
        apiURL = oauth.apiURL("/me")
    }

    /// POSTs `form` to the token endpoint (with HTTP Basic client credentials `id:secret`, if
    /// given): the status and the JSON answer.
    func token(_ form: String, basic: String? = nil) async throws -> (status: Int, json: [String: any Sendable]) {
        var request = URLRequest(url: tokenURL)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        if let basic { request.setValue("Basic \(Data(basic.utf8).base64EncodedString())", forHTTPHeaderField: "Authorization") }
        request.httpBody = Data(form.utf8)
        let (data, response) = try await session.data(for: request)
        let json = (try? JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:]
        // Strings and numbers are all a token response holds.
        let values = json.compactMapValues { value -> (any Sendable)? in (value as? String) ?? (value as? Int) }
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, values)
    }

    /// GETs `/api/me` with `Authorization: Bearer <bearer>`: the status.
    func api(bearer: String) async throws -> Int {
        var request = URLRequest(url: apiURL)
        request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization")
        return ((try await session.data(for: request)).1 as? HTTPURLResponse)?.statusCode ?? 0
    }
}

/// A counter the server's threads increment and the test reads.
final class LockedCounter: @unchecked Sendable {  // unchecked: `count` is guarded by `lock`
    private let lock = NSLock()
    private var count = 0

    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
