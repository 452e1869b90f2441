import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// 1,000 concurrent requests against a server that refuses the token the client believes valid
/// (revoked server-side): one refresh, no stale token after it started, everyone answered.
final class OAuth2StormTests: XCTestCase {
    typealias Kit = ReactorTestKit
    static let stormSize = 1_000

    /// Numbers every interception (`X-Stamp`), so the server can tell when a request's
    /// headers were decided relative to the moment the refresh started.
    private struct StampInterceptor: URLTaskInterceptor {
        let counter: Kit.Counter

        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            task.request.setValue(String(counter.increment()), forHTTPHeaderField: "X-Stamp")
            return .execute
        }
    }

    private final class Recorder: @unchecked Sendable {  // all state is guarded by `lock`.
        private let lock = NSLock()
        private var stampsAtRefresh: [Int] = []
        private var failures: [String] = []

        var refreshStamps: [Int] { lock.withLock { stampsAtRefresh } }
        /// Fulfilled by the first hook call: the hook runs on its own task, nobody waits for it.
        let firstHook = Latch<Void>("onRefreshFailure")
        var hookCalls: [String] { lock.withLock { failures } }
        func refreshStarted(at stamp: Int) { lock.withLock { stampsAtRefresh.append(stamp) } }
        func hook(_ error: any Error) {
            lock.withLock { failures.append("\(error)") }
            firstHook.fulfill(())
        }
    }

    private func makeManager(_ api: OAuthServer, stamps: Kit.Counter, recorder: Recorder) -> (URLTaskManager, OAuth2Authenticator) {
        // A 401 that takes a little while (as a real server's does) keeps dozens of requests
        // with the refused token in flight when the refresh starts: they join it, or arrive
        // late for it.
        api.delayUnauthorized(by: .milliseconds(20))
        let endpoint = api.endpoint
        let auth = OAuth2Authenticator(
            origins: [api.server.baseURL],
            store: InMemoryCredentialStore(api.credential(access: "stale", refresh: "refresh-0")),
            isTokenRequest: { endpoint.matches($0) },
            onRefreshFailure: { recorder.hook($0) },
            refresh: { credential in
                recorder.refreshStarted(at: stamps.value)
                return try await endpoint.refresh(credential)
            }
        )
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth), StampInterceptor(counter: stamps)],
            reactors: [OAuth2RefreshReactor(authenticator: auth)]
        )
        return (manager, auth)
    }

    func testThousandRequestsWithAStaleTokenShareOneRefresh() async throws {
        let api = try OAuthServer(access: nil)
        let stamps = Kit.Counter()
        let recorder = Recorder()
        let (manager, _) = makeManager(api, stamps: stamps, recorder: recorder)
        let url = api.apiURL()

        let started = ContinuousClock.now
        let results = await Kit.storm(manager.session, count: Self.stormSize) { _ in URLRequest(url: url) }
        let stormTime = started.duration(to: .now)

        XCTAssertEqual(Kit.tally(results), ["200": Self.stormSize])
        XCTAssertEqual(api.tokenRequestCount, 1, "one refresh for the whole storm")
        XCTAssertEqual(recorder.refreshStamps.count, 1)
        XCTAssertEqual(api.refreshTokensReceived, ["refresh-0"])
        let fresh = "Bearer \(try XCTUnwrap(api.currentAccess))"

        // What the server saw: every request carried either the stale token or the fresh one,
        // and none whose headers were decided after the refresh started carried the stale one.
        let requests = api.apiRequests
        let stale = requests.filter { $0.headers["authorization"] == "Bearer stale" }
        XCTAssertEqual(stale.count + requests.filter { $0.headers["authorization"] == fresh }.count, requests.count)
        XCTAssertEqual(requests.filter { $0.headers["authorization"] == fresh }.count, Self.stormSize)
        let refreshStamp = try XCTUnwrap(recorder.refreshStamps.first)
        let staleStampedLate = stale.filter { Int($0.headers["x-stamp"] ?? "") ?? .max > refreshStamp }
        XCTAssertEqual(staleStampedLate.count, 0, "stale token applied after the refresh started")
        // And by arrival: none reached the server after the token endpoint was hit. (The
        // manager keeps the per-host queue itself, so no request with the old token was
        // waiting inside URLSession when the refresh began.)
        let tokenSequence = try XCTUnwrap(api.tokenRequests.first?.sequence)
        let staleAfterTokenHit = stale.filter { $0.sequence > tokenSequence }.count
        XCTAssertEqual(staleAfterTokenHit, 0, "requests with the stale token arrived after the refresh")

        // The same 1,000 requests with the token now valid, for comparison.
        let baselineStart = ContinuousClock.now
        let baseline = await Kit.storm(manager.session, count: Self.stormSize) { _ in URLRequest(url: url) }
        let baselineTime = baselineStart.duration(to: .now)
        XCTAssertEqual(Kit.tally(baseline), ["200": Self.stormSize])
        XCTAssertEqual(api.tokenRequestCount, 1)

        printFigures(
            """
            [storm] \(Self.stormSize) requests, stale token: refreshes=\(api.tokenRequestCount), \
            wall=\(stormTime.formatted(.units(allowed: [.milliseconds]))), \
            401s absorbed=\(stale.count), stale requests after the token endpoint was hit=\(staleAfterTokenHit), \
            server requests=\(requests.count)
            [storm] same \(Self.stormSize) requests, valid token: wall=\(baselineTime.formatted(.units(allowed: [.milliseconds])))
            """)
    }

    func testRejectedRefreshFailsEveryRequestWithTheTypedErrorAndCallsTheHookOnce() async throws {
        let api = try OAuthServer(access: nil)
        api.setTokenAnswer(.reject(status: 400, error: "invalid_grant"))
        let stamps = Kit.Counter()
        let recorder = Recorder()
        let (manager, auth) = makeManager(api, stamps: stamps, recorder: recorder)
        let url = api.apiURL()

        let started = ContinuousClock.now
        let results = await Kit.storm(manager.session, count: Self.stormSize) { _ in URLRequest(url: url) }
        let stormTime = started.duration(to: .now)

        let expected = OAuth2Error.tokenRequestRejected(
            status: 400, error: "invalid_grant", description: "refused by the server", url: api.endpoint.url)
        let typed = results.filter {
            guard let failure = $0.taskError, failure.code == .authenticationFailed else { return false }
            return failure.component?.name == "OAuth2RefreshReactor" && failure.underlying as? OAuth2Error == expected
        }
        XCTAssertEqual(typed.count, Self.stormSize, "\(Kit.tally(results))")
        try await recorder.firstHook.wait(timeout: .seconds(5))
        XCTAssertEqual(recorder.hookCalls.count, 1, "\(recorder.hookCalls)")
        XCTAssertEqual(api.tokenRequestCount, 1)
        let sent = api.apiRequests.count
        printFigures(
            "[storm] \(Self.stormSize) requests, refresh answered 400: all failed typed in \(stormTime.formatted(.units(allowed: [.milliseconds]))), \(sent) reached the API, hook calls=\(recorder.hookCalls.count)"
        )

        // The session is over: a new request fails at once, without touching the network...
        let after = await Kit.fetch(manager.session, url)
        guard let failure = after.taskError, failure.code == .authenticationFailed else { return XCTFail("\(after.label)") }
        let underlying = failure.underlying
        XCTAssertEqual(underlying as? OAuth2Error, expected)
        XCTAssertEqual(api.apiRequests.count, sent)
        XCTAssertEqual(api.tokenRequestCount, 1)
        XCTAssertEqual(recorder.hookCalls.count, 1)

        // ...until the user signs in again.
        api.setTokenAnswer(.issue)
        let signedIn = try await api.endpoint.requestToken(["grant_type": "password", "username": "u", "password": "p"])
        try await auth.signIn(signedIn)
        let recovered = await Kit.fetch(manager.session, url)
        XCTAssertEqual(recovered.status, 200)
    }
}
