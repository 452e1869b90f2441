// DocC testing: begin
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2

/// Your interceptor...
struct Signer: URLTaskInterceptor {
    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        task.request.setValue("sig-\(task.request.url?.path ?? "")", forHTTPHeaderField: "X-Signature")
        return .execute
    }
}

/// ...tested over real HTTP on 127.0.0.1.
final class SignerTests: XCTestCase {
    func testEveryRequestIsSigned() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/orders") { request in
            request.headers["x-signature"] == "sig-/orders" ? .text("signed") : .status(403)
        }
        let manager = URLTaskManager(interceptors: [Signer()])

        let (body, response) = try await manager.session.data(from: server.url("/orders"))

        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        XCTAssertEqual(String(decoding: body, as: UTF8.self), "signed")
        XCTAssertEqual(server.requests(path: "/orders").count, 1)
    }

    func testAnExpiredTokenIsRefreshedOnceAndNobodySeesTheRefusal() async throws {
        let oauth = try OAuthServer(users: ["ada": "lovelace"])  // a demo API + token endpoint
        defer { oauth.shutdown() }
        let endpoint = OAuth2TokenEndpoint(url: oauth.tokenURL)
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: endpoint)
        try await auth.signIn(endpoint.signIn(username: "ada", password: "lovelace"))
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)],
            reactors: [OAuth2RefreshReactor(authenticator: auth)]
        )
        oauth.revokeAccess()  // the server expires the token

        let (_, response) = try await manager.session.data(from: oauth.apiURL("/me"))

        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        XCTAssertEqual(oauth.unauthorizedCount, 1)
        XCTAssertEqual(oauth.refreshTokensReceived.count, 1)
    }
}
// DocC testing: end
