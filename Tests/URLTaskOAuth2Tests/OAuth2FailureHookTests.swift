import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// `onRefreshFailure` runs on its own task: an app's hook that shows a sign-in screen (and so
/// takes as long as the user does) never holds the requests that were waiting for the refresh.
final class OAuth2FailureHookTests: XCTestCase {
    typealias Kit = ReactorTestKit

    /// A hook that stays blocked until the test opens `release`, recording what it saw.
    private struct BlockingHook {
        let calls = CallCounter()
        let errors = LockedBox<[String]>([])
        let entered = Latch<Void>("the hook was called")
        let release = Latch<Void>("the test released the hook")
        let finished = Latch<Void>("the hook returned")

        var body: @Sendable (any Error) async -> Void {
            { [calls, errors, entered, release, finished] error in
                calls.increment()
                errors.withLock { $0.append("\(error)") }
                entered.fulfill(())
                // Long enough that on the old code (the waiters held by the hook) the test's
                // own, shorter deadline fails first.
                _ = try? await release.wait(timeout: .seconds(30))
                finished.fulfill(())
            }
        }
    }

    private func pair(_ auth: OAuth2Authenticator) -> URLTaskManager {
        URLTaskManager(interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
    }

    func testRequestsWaitingForARejectedRefreshFailWhileTheHookIsStillBlocked() async throws {
        let api = try OAuthServer(access: nil)
        api.setTokenAnswer(.reject(status: 400, error: "invalid_grant"))
        let refusedAt = LockedBox<ContinuousClock.Instant?>(nil)
        api.onTokenRequest { refusedAt.withLock { $0 = .now } }
        let hook = BlockingHook()
        defer { hook.release.fulfill(()) }
        let auth = OAuth2Authenticator(
            origins: [api.baseURL], tokenEndpoint: api.endpoint,
            store: InMemoryCredentialStore(api.credential(access: "stale")), onRefreshFailure: hook.body)
        let manager = pair(auth)
        let url = api.apiURL()

        let ended = Latch<(results: [Fetched], at: ContinuousClock.Instant)>("20 requests ended")
        Task {
            let results = await Kit.storm(manager.session, count: 20) { _ in URLRequest(url: url) }
            ended.fulfill((results, .now))
        }
        // Before the fix every waiter was held until the hook returned, which here is never
        // before the test releases it: this wait is what fails.
        let (results, endedAt) = try await ended.wait(timeout: .seconds(10))
        XCTAssertNil(hook.finished.current, "the 20 failures arrived while the hook was still blocked")

        let expected = OAuth2Error.tokenRequestRejected(
            status: 400, error: "invalid_grant", description: "refused by the server", url: api.endpoint.url)
        let typed = results.filter {
            guard let failure = $0.taskError, failure.code == .authenticationFailed, failure.component?.name == "OAuth2RefreshReactor"
            else {
                return false
            }
            let underlying = failure.underlying
            return underlying as? OAuth2Error == expected
        }
        XCTAssertEqual(typed.count, 20, "\(Kit.tally(results))")
        XCTAssertEqual(api.tokenRequestCount, 1, "one refresh for the 20")

        // The hook ran, exactly once, and only now may finish.
        try await hook.entered.wait(timeout: .seconds(10))
        hook.release.fulfill(())
        try await hook.finished.wait(timeout: .seconds(10))
        XCTAssertEqual(hook.calls.value, 1)
        XCTAssertEqual(hook.errors.snapshot, ["\(expected)"])
        let refused = try XCTUnwrap(refusedAt.snapshot)
        printFigures(
            "[failure hook] 20 waiters failed \(refused.duration(to: endedAt).formatted(.units(allowed: [.milliseconds]))) after the token request reached the server, hook still blocked"
        )
    }

    func testAFailedSaveIsReportedWithoutHoldingTheRequestThatRefreshed() async throws {
        struct Broken: Error {}
        actor BrokenStore: CredentialStore {
            let credential: OAuth2Credential
            init(_ credential: OAuth2Credential) { self.credential = credential }
            func load() async throws -> OAuth2Credential? { credential }
            func save(_ credential: OAuth2Credential) async throws { throw Broken() }
            func clear() async throws {}
        }
        let api = try OAuthServer(access: nil)
        let hook = BlockingHook()
        defer { hook.release.fulfill(()) }
        let auth = OAuth2Authenticator(
            origins: [api.baseURL], tokenEndpoint: api.endpoint,
            store: BrokenStore(api.credential(access: "stale")), onRefreshFailure: hook.body)
        let manager = pair(auth)
        let url = api.apiURL()

        let ended = Latch<Fetched>("the request ended")
        Task { ended.fulfill(await Kit.fetch(manager.session, url)) }
        let result = try await ended.wait(timeout: .seconds(10))
        XCTAssertEqual(result.status, 200, "the refreshed token is used even though it could not be saved")
        XCTAssertNil(hook.finished.current, "the request did not wait for the hook")

        try await hook.entered.wait(timeout: .seconds(10))
        hook.release.fulfill(())
        try await hook.finished.wait(timeout: .seconds(10))
        XCTAssertEqual(hook.calls.value, 1)
        XCTAssertTrue(hook.errors.snapshot.first?.contains("Broken") == true, "\(hook.errors.snapshot)")
    }
}
