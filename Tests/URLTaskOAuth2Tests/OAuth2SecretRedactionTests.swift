import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// No description the library builds contains a secret it knows, whatever the token endpoint
/// echoes: not the refresh or access token, the client secret, the Basic value or the
/// password. The server's own text stays available, unredacted, as a property.
final class OAuth2SecretRedactionTests: XCTestCase {
    private let refreshToken = "rt-SECRET-1111"
    private let accessToken = "at-SECRET-2222"
    private let clientSecret = "cs-SECRET-3333"
    private let password = "pw-SECRET-4444"
    private var server: LoopbackServer!

    override func setUpWithError() throws {
        server = try LoopbackServer()
        // Echoes every secret it received, in the description and in the error code itself.
        server.route("POST", "/token") { request in
            let echoed = "refused \(request.bodyText) with \(request.headers["authorization"] ?? "")"
            return .json(["error": "invalid_grant", "error_description": echoed], status: 400)
        }
        server.route("POST", "/token-odd-code") { request in
            .json(["error": "unknown \(request.bodyText)", "error_description": "x"], status: 400)
        }
        server.route("/api") { _ in .status(401) }
    }

    override func tearDown() {
        server.shutdown()
        server = nil
    }

    private var secrets: [String] {
        let basic = OAuth2TokenEndpoint.basicAuthorization(clientID: "app", secret: clientSecret)
        return [refreshToken, accessToken, clientSecret, password, basic, String(basic.dropFirst("Basic ".count))]
    }

    /// Every text form of `error` an app might log.
    private func texts(of error: any Error) -> [String] {
        let bridged = error as NSError
        return [
            "\(error)", String(describing: error), String(reflecting: error), error.localizedDescription,
            bridged.description, bridged.localizedDescription, "\(bridged.userInfo)",
        ]
    }

    private func assertNoSecret(in error: any Error, _ label: String, file: StaticString = #filePath, line: UInt = #line) {
        for text in texts(of: error) {
            for secret in secrets {
                XCTAssertFalse(text.contains(secret), "\(label) shows a secret: \(text)", file: file, line: line)
            }
        }
    }

    private func endpoint(_ path: String = "/token") -> OAuth2TokenEndpoint {
        OAuth2TokenEndpoint(url: server.url(path), clientID: "app", clientSecret: clientSecret)
    }

    func testACallersErrorNeverShowsTheTokensOrClientCredentialsTheServerEchoes() async throws {
        let credential = OAuth2Credential(accessToken: accessToken, refreshToken: refreshToken, expiresAt: .distantFuture)
        let auth = OAuth2Authenticator(origins: [server.baseURL], tokenEndpoint: endpoint(), store: InMemoryCredentialStore(credential))
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        defer { manager.invalidateAndCancel() }

        let result = await fetched(manager.session, URLRequest(url: server.url("/api")))
        let error = try XCTUnwrap(result.error)
        guard let failure = error as? URLTaskError, failure.code == .authenticationFailed,
            let underlying = failure.underlying as? OAuth2Error
        else {
            return XCTFail("\(error)")
        }
        XCTAssertTrue(underlying.requiresSignIn)
        XCTAssertEqual(underlying.serverErrorCode, "invalid_grant")
        assertNoSecret(in: error, "the caller's URLTaskError")
        assertNoSecret(in: underlying, "the OAuth2Error")
        XCTAssertTrue(String(describing: error).contains("invalid_grant"), "the registered code is still shown: \(error)")
        XCTAssertTrue(underlying.serverDescription?.contains(refreshToken) == true, "the server's own text stays available")
    }

    func testSignInErrorsNeverShowThePassword() async throws {
        do {
            _ = try await endpoint().signIn(username: "user", password: password)
            XCTFail("the server refuses")
        } catch {
            assertNoSecret(in: error, "signIn's error")
            XCTAssertEqual((error as? OAuth2Error)?.requiresSignIn, true)
        }
        do {
            _ = try await endpoint("/token-odd-code").signIn(username: "user", password: password)
            XCTFail("the server refuses")
        } catch {
            assertNoSecret(in: error, "an unregistered error code")
            XCTAssertTrue((error as? OAuth2Error)?.serverErrorCode?.contains(password) == true, "kept as the server sent it")
        }
    }

    func testTheEndpointsOwnDescriptionHidesItsSecret() {
        XCTAssertFalse(String(describing: endpoint()).contains(clientSecret))
        XCTAssertFalse(String(reflecting: endpoint()).contains(clientSecret))
    }
}
