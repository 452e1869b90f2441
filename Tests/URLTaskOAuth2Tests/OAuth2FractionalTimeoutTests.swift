import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskOAuth2

/// A token endpoint's `timeout` that is not a whole number of seconds is kept: swift-corelibs-
/// foundation (6.3.1) reads a request's `timeoutInterval` as whole seconds, so a 500 ms timeout
/// used to fail a token request at once (9 ms, measured) and a 1.5 s one at 1 s. The request's
/// `timeoutInterval` is now rounded up, and the endpoint's own deadline ends it on time.
final class OAuth2FractionalTimeoutTests: XCTestCase {
    func testAFractionalTimeoutIsWaitedForByTokenAndRevocationRequests() async throws {
        let oauth = try OAuthServer(name: "demo", access: nil)
        defer { oauth.shutdown() }
        let gate = Gate()
        defer { gate.open() }
        oauth.holdTokenResponses(on: gate)
        oauth.holdRevocationResponses(on: gate)
        for milliseconds in [500, 1_500] {
            let endpoint = OAuth2TokenEndpoint(
                url: oauth.tokenURL, revocationURL: oauth.revocationURL, clientID: "app", timeout: .milliseconds(milliseconds))
            XCTAssertEqual(endpoint.tokenRequest([:]).timeoutInterval, milliseconds == 500 ? 1 : 2)

            let started = ContinuousClock.now
            do {
                _ = try await endpoint.signIn(username: "ada", password: "pw")
                XCTFail("a held token endpoint answered")
            } catch let error as URLError {
                XCTAssertEqual(error.code, .timedOut)
            }
            let tokenWait = started.duration(to: .now)
            XCTAssertGreaterThanOrEqual(tokenWait, .milliseconds(milliseconds - 50), "\(milliseconds) ms")
            XCTAssertLessThan(tokenWait, .milliseconds(milliseconds + 900), "\(milliseconds) ms")

            let revoking = ContinuousClock.now
            let outcome = await endpoint.revoke(OAuth2Credential(accessToken: "a", refreshToken: "r", expiresAt: .distantFuture))
            let revocationWait = revoking.duration(to: .now)
            XCTAssertEqual((outcome.error as? OAuth2RevocationError)?.reason, .transport(.timedOut), "\(outcome)")
            XCTAssertGreaterThanOrEqual(revocationWait, .milliseconds(milliseconds - 50), "\(milliseconds) ms")
            XCTAssertLessThan(revocationWait, .milliseconds(milliseconds + 900), "\(milliseconds) ms")
        }
    }
}
