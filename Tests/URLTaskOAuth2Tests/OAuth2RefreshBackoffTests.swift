import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// A token endpoint that fails fast is asked once per failure episode, not once per arriving
/// request: within ``OAuth2Authenticator/refreshBackoff`` the requests that need a token fail
/// with the same typed error, and the failure hook runs once.
final class OAuth2RefreshBackoffTests: XCTestCase {
    typealias Kit = ReactorTestKit

    /// 60 requests with a token the server refuses, in six waves of ten (each wave starts
    /// after the one before has failed), against an endpoint that answers 500 or resets the
    /// connection: one token request, one hook call, 60 identical typed failures. After the
    /// back-off, with the endpoint fixed, the next request refreshes and succeeds.
    func testAFailingTokenEndpointIsAskedOncePerEpisodeAndAgainAfterTheBackoff() async throws {
        for failure in ["500", "reset"] {
            let api = try OAuthServer(access: nil)
            defer { api.shutdown() }
            let broken = LockedBox(true)
            api.server.route("POST", "/oauth/failing") { _ in
                guard broken.snapshot else { return .status(599) }
                return failure == "500"
                    ? .json(["error": "server_error"], status: 500) : ServerResponse.status(200).with { $0.dropAfterBodyBytes = 0 }
            }
            // When fixed, the failing path forwards to the real grant.
            let failingURL = api.server.url("/oauth/failing")
            let hooks = LockedBox<[String]>([])
            let firstHook = Latch<Void>("onRefreshFailure")
            let backoff = Duration.milliseconds(800)
            let tokenURL = api.tokenURL
            let auth = OAuth2Authenticator(
                origins: [api.baseURL], store: InMemoryCredentialStore(api.credential(access: "stale")), refreshBackoff: backoff,
                onRefreshFailure: { error in
                    hooks.withLock { $0.append("\(error)") }
                    firstHook.fulfill(())
                },
                refresh: { credential in
                    let url = broken.snapshot ? failingURL : tokenURL
                    return try await OAuth2TokenEndpoint(url: url, clientID: "tests").refresh(credential)
                })
            let manager = URLTaskManager(
                interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
            defer { manager.invalidateAndCancel() }

            let started = ContinuousClock.now
            var results: [Fetched] = []
            for _ in 0..<6 {
                results += await Kit.storm(manager.session, count: 10) { _ in URLRequest(url: api.apiURL()) }
            }
            let stormTime = started.duration(to: .now)
            let attempts = api.server.requestCount(path: "/oauth/failing")
            printFigures(
                "[backoff] \(failure): 60 requests in \(stormTime), \(attempts) token request(s), \(hooks.snapshot.count) hook call(s)")
            XCTAssertLessThan(stormTime, backoff, "\(failure): the storm ran within one back-off")
            XCTAssertEqual(attempts, 1, "\(failure): one token request for the episode")
            let labels = Set(results.map(\.label))
            XCTAssertEqual(labels.count, 1, "\(failure): every request failed with the same error: \(Kit.tally(results))")
            // A 500 and an answer cut short (no token in it) are both refusals of the refresh.
            guard let refused = results.first?.taskError, refused.code == .authenticationFailed,
                refused.component?.name == "OAuth2RefreshReactor", refused.underlying is OAuth2Error
            else {
                return XCTFail("\(failure): \(Kit.tally(results))")
            }
            XCTAssertEqual(api.tokenRequestCount, 0)

            // The hook runs on a task of its own: wait for its one call, then make sure no second.
            try await firstHook.wait(timeout: .seconds(10))
            XCTAssertEqual(hooks.snapshot.count, 1, "\(failure): one hook call per episode")

            // The back-off is the subject here: wait until it has passed, then the next request
            // tries again (the endpoint is fixed meanwhile) and succeeds.
            broken.withLock { $0 = false }
            try await Task.sleep(until: started + stormTime + backoff, clock: .continuous)
            let after = await Kit.fetch(manager.session, api.apiURL())
            XCTAssertEqual(after.status, 200, "\(failure): \(after.label)")
            XCTAssertEqual(api.tokenRequestCount, 1, "\(failure): a new token request after the back-off")
            XCTAssertEqual(hooks.snapshot.count, 1)
        }
    }
}
