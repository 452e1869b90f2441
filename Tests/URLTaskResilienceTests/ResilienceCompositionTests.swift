import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskOAuth2
@testable import URLTaskResilience
import TestSupport

/// The resilience components with the OAuth2 kit, in the documented order, over real HTTP.
final class ResilienceCompositionTests: XCTestCase {
    typealias Kit = ResilienceTestKit

    /// The shared transfer meets a 401: every caller listening to it reacts as its own task, one
    /// refresh runs for all, each is sent again with the new token (sharing again with whatever
    /// identical request is then in flight), and no request leaves with the stale token after
    /// the refresh began.
    func testCoalescedStormUnderAStaleTokenFollowsTheRefresh() async throws {
        let api = try OAuthServer(access: nil)
        defer { api.shutdown() }
        api.delayUnauthorized(by: .milliseconds(50))
        let endpoint = api.endpoint
        let auth = OAuth2Authenticator(
            origins: [api.server.baseURL], store: InMemoryCredentialStore(api.credential(access: "stale", refresh: "refresh-0")),
            isTokenRequest: { endpoint.matches($0) }, refresh: { try await endpoint.refresh($0) })
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth), coalescing], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        let events = Kit.Events(coalescing.events())
        let url = api.apiURL()
        // The server holds its answers until all 100 callers wait, so every one of them waits
        // for the one shared request (identical requests arriving after an answer are sent again).
        let gate = Gate()
        api.holdResponses(to: "/profile", on: gate)

        async let storm: [Fetched] = withTaskGroup(of: Fetched.self) { group in
            for _ in 0..<100 { group.addTask { await fetched(manager.session, URLRequest(url: url)) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        try await events.wait("100 callers waiting", count: 100, where: Self.isWaiting)
        gate.open()
        let results = await storm
        XCTAssertEqual(results.filter { $0.text == "ok /api/profile" }.count, 100, "\(ReactorTestKit.tally(results))")
        XCTAssertEqual(api.tokenRequestCount, 1)
        let fresh = "Bearer \(try XCTUnwrap(api.currentAccess))"
        let requests = api.apiRequests
        let stale = requests.filter { $0.headers["authorization"] == "Bearer stale" }
        XCTAssertEqual(stale.count, 1, "only the shared request went out with the stale token")
        let tokenSequence = try XCTUnwrap(api.tokenRequests.first?.sequence)
        XCTAssertTrue(stale.allSatisfy { $0.sequence < tokenSequence })
        XCTAssertTrue(requests.filter { $0.sequence > tokenSequence }.allSatisfy { $0.headers["authorization"] == fresh })
        // The resends share only while an identical one is in flight: the server answers them at
        // once here, so how many go out depends on the burst (0.2 answered every waiter from one
        // shared resend; each caller's own reactors now judge its own answer).
        XCTAssertLessThanOrEqual(requests.count, 101, "one shared request, then at most one resend per caller")
    }

    /// The kit, coalescing and the breaker together: a 401 storm on the API host and a failing
    /// second host at the same time. The API's callers all get their answer after one refresh;
    /// the failing host's circuit opens after 3 failures and the rest fail fast; the token
    /// endpoint is exempt; the API host's circuit never opens.
    func testKitCoalescingAndBreakerThroughA401StormAndAFailingHost() async throws {
        let api = try OAuthServer(access: nil)
        let failing = try LoopbackServer()
        defer {
            api.shutdown()
            failing.shutdown()
        }
        api.delayUnauthorized(by: .milliseconds(30))
        failing.route(prefix: "/") { _ in .status(502) }
        let endpoint = api.endpoint
        let auth = OAuth2Authenticator(
            origins: [api.server.baseURL], store: InMemoryCredentialStore(api.credential(access: "stale", refresh: "refresh-0")),
            isTokenRequest: { endpoint.matches($0) }, refresh: { try await endpoint.refresh($0) })
        let breaker = CircuitBreaker(policy: .init(failureThreshold: 3, coolDown: .seconds(60), exempts: { auth.isTokenRequest($0) }))
        let breakerEvents = Kit.Events(breaker.events())
        let coalescing = CoalescingInterceptor()
        // The documented order: breaker, bearer, coalescing; breaker first among the reactors.
        let manager = URLTaskManager(
            interceptors: [breaker, BearerInterceptor(authenticator: auth), coalescing],
            reactors: [OAuth2RefreshReactor(authenticator: auth)])
        let events = Kit.Events(coalescing.events())
        let gate = Gate()
        api.holdResponses(to: "/profile", on: gate)
        api.holdResponses(to: "/feed", on: gate)

        async let storm: [Fetched] = withTaskGroup(of: Fetched.self) { group in
            for index in 0..<200 {
                // Two distinct resources, each requested 100 times.
                let url = api.apiURL(index.isMultiple(of: 2) ? "/profile" : "/feed")
                group.addTask { await fetched(manager.session, URLRequest(url: url)) }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        var failingResults: [Fetched] = []
        for index in 0..<10 {
            failingResults.append(await fetched(manager.session, URLRequest(url: failing.url("/x?n=\(index)"))))
        }
        try await events.wait("200 callers waiting", count: 200, where: Self.isWaiting)
        gate.open()
        let results = await storm

        XCTAssertEqual(Set(results.compactMap(\.text)), ["ok /api/profile", "ok /api/feed"])
        XCTAssertEqual(results.filter { $0.status == 200 }.count, 200, "\(ReactorTestKit.tally(results))")
        XCTAssertEqual(api.tokenRequestCount, 1, "one refresh for the storm")
        XCTAssertEqual(
            api.apiRequests.filter { $0.headers["authorization"] == "Bearer stale" }.count, 2, "one shared request per resource")
        let tokenSequence = try XCTUnwrap(api.tokenRequests.first?.sequence)
        XCTAssertTrue(api.apiRequests.filter { $0.headers["authorization"] == "Bearer stale" }.allSatisfy { $0.sequence < tokenSequence })
        XCTAssertFalse(breaker.isOpen(for: api.apiURL()), "401s are not failures; the token endpoint is exempt")

        XCTAssertEqual(failingResults.prefix(3).map(\.status), [502, 502, 502])
        XCTAssertTrue(failingResults.dropFirst(3).allSatisfy { Kit.underlying($0) is CircuitOpenError })
        XCTAssertEqual(failing.requests.count, 3, "an open circuit sends nothing")
        try await breakerEvents.wait("7 rejections", count: 7) { if case .rejected = $0 { return true } else { return false } }
        XCTAssertEqual(breakerEvents.count { if case .rejected = $0 { return true } else { return false } }, 7)
    }

    @Sendable private static func isWaiting(_ event: CoalescingInterceptor.Event) -> Bool {
        switch event {
        case .started, .joined: true
        default: false
        }
    }
}
