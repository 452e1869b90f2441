import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// The loop guard of ``URLTaskReactorConfiguration/authentication`` (3 runs in 10 s) over real
/// HTTP with the OAuth2 kit: it counts refusals of the tokens refreshes produced, not the
/// refreshes. Tokens revoked again and again are refreshed every time; a token endpoint whose
/// tokens the API always refuses still ends in ``URLTaskError/Code-swift.struct/reactionLoop``.
final class OAuth2LoopGuardTests: XCTestCase {
    typealias Kit = ReactorTestKit

    private func makeManager(_ api: OAuthServer, access: String) -> URLTaskManager {
        let endpoint = api.endpoint
        let auth = OAuth2Authenticator(
            origins: [api.server.baseURL],
            store: InMemoryCredentialStore(api.credential(access: access)),
            isTokenRequest: { endpoint.matches($0) },
            refresh: { try await endpoint.refresh($0) }
        )
        return URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)],
            reactors: [OAuth2RefreshReactor(authenticator: auth)]
        )
    }

    /// Runs `count` requests, `inFlight` at a time: every outcome, in completion order.
    private static func soak(_ session: URLSession, count: Int, inFlight: Int, url: URL) async -> [Kit.Fetch] {
        await withTaskGroup(of: Kit.Fetch.self) { group in
            var started = 0
            while started < min(inFlight, count) {
                group.addTask { await Kit.fetch(session, url) }
                started += 1
            }
            var results: [Kit.Fetch] = []
            for await result in group {
                results.append(result)
                if started < count {
                    group.addTask { await Kit.fetch(session, url) }
                    started += 1
                }
            }
            return results
        }
    }

    /// The soak, scaled down: 4,000 requests, 40 at a time, each access token revoked
    /// once it has authorized 200 requests (about 20 revocations, several per second). Every
    /// refresh succeeds and its token works, so none counts toward the guard: every request
    /// ends 200, with one refresh per revocation. (Before, the fourth refresh within 10 s
    /// tripped the guard and every 401 of the window failed with `reactionLoop`.)
    func testTokensRevokedAgainAndAgainAreRefreshedEveryTimeWithoutReactionLoop() async throws {
        let requests = 4_000
        let uses = 200
        let api = try OAuthServer(access: "start")
        api.revokeEachAccessToken(afterAuthorizing: uses)
        let manager = makeManager(api, access: "start")
        defer { manager.session.invalidateAndCancel() }

        let started = ContinuousClock.now
        let results = await Self.soak(manager.session, count: requests, inFlight: 40, url: api.apiURL())
        let wall = started.duration(to: .now)

        let loops = results.filter { $0.taskError?.code == .reactionLoop }.count
        XCTAssertEqual(results.count, requests, "every task completes once")
        XCTAssertEqual(loops, 0, "\(Kit.tally(results))")
        XCTAssertEqual(Kit.tally(results), ["200": requests])
        // Each token authorized `uses` requests: one refresh per revocation but the last, no more.
        let refreshes = api.tokenRequestCount
        XCTAssertEqual(refreshes, requests / uses - 1, "one refresh per revoked token")
        XCTAssertEqual(api.apiRequests.count - api.unauthorizedCount, requests)
        printFigures(
            "[loop guard soak] \(requests) requests, 40 in flight, token revoked every \(uses) requests: "
                + "refreshes=\(refreshes), 401s absorbed=\(api.unauthorizedCount), reactionLoop=\(loops), "
                + "wall=\(wall.formatted(.units(allowed: [.milliseconds])))")
    }

    /// Tokens that work for a while, then a token endpoint whose tokens the API always refuses:
    /// the refreshes of the first phase are not counted (each token was accepted), and in the
    /// second the guard trips after `maximumRuns` refreshes whose tokens were refused, as before.
    func testATokenEndpointWhoseTokensTheAPIAlwaysRefusesStillEndsInReactionLoop() async throws {
        let api = try OAuthServer(access: "start")
        let manager = makeManager(api, access: "start")
        defer { manager.session.invalidateAndCancel() }
        let maximumRuns = try XCTUnwrap(URLTaskReactorConfiguration.authentication.loopGuard?.maximumRuns)
        XCTAssertEqual(maximumRuns, 3)

        // Phase 1: each token authorizes 5 requests, one request at a time: 5 revocations and
        // refreshes within a second or so, every answer 200.
        api.revokeEachAccessToken(afterAuthorizing: 5)
        var first: [Kit.Fetch] = []
        for _ in 0..<30 { first.append(await Kit.fetch(manager.session, api.apiURL())) }
        XCTAssertEqual(Kit.tally(first), ["200": 30])
        XCTAssertEqual(api.tokenRequestCount, 5, "a refresh per revoked token")

        // Phase 2: the API refuses every token issued from now on. The first 401 follows a token
        // that worked (a new need, not counted); each of the next `maximumRuns` refreshes follows
        // a refused one (counted); then the guard refuses.
        api.revokeEachAccessToken(afterAuthorizing: 0)
        var second: [Kit.Fetch] = []
        for _ in 0..<(maximumRuns + 3) { second.append(await Kit.fetch(manager.session, api.apiURL())) }
        let statuses = second.map { $0.taskError?.code == .reactionLoop ? "reactionLoop" : $0.label }
        XCTAssertEqual(
            statuses, Array(repeating: "401", count: maximumRuns + 1) + ["reactionLoop", "reactionLoop"],
            "each refused request is answered as the server said after one refresh, until the guard trips")
        XCTAssertEqual(api.tokenRequestCount, 5 + maximumRuns + 1, "maximumRuns + 1 refreshes whose tokens were refused")
        guard let loop = second.last?.taskError else { return XCTFail("no reactionLoop") }
        XCTAssertEqual(loop.component?.name, "OAuth2RefreshReactor")
        XCTAssertEqual(loop.count, maximumRuns)
        XCTAssertEqual(loop.limit, .seconds(10))

        // Many at once meet the tripped guard: none starts a refresh.
        let storm = await Kit.storm(manager.session, count: 40) { _ in URLRequest(url: api.apiURL()) }
        XCTAssertEqual(storm.filter { $0.taskError?.code == .reactionLoop }.count, 40, "\(Kit.tally(storm))")
        XCTAssertEqual(api.tokenRequestCount, 5 + maximumRuns + 1, "the tripped guard starts no refresh")
    }
}
