import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// Signing out sticks: a refresh that finished just before cannot put its credential back in
/// the store, however slow the store's `save` is.
final class OAuth2SignOutTests: XCTestCase {
    typealias Kit = ReactorTestKit

    /// A Keychain-style store: a struct, not an actor, so nothing orders its calls but the
    /// authenticator. Its first `save` is held until the test opens `releaseSave`.
    private struct SlowKeychainStore: CredentialStore {
        let stored: LockedBox<OAuth2Credential?>
        let events = LockedBox<[String]>([])
        let saveBegan = Latch<Void>("a save began")
        let releaseSave = Latch<Void>("the test released the save")
        private let saves = CallCounter()

        init(_ credential: OAuth2Credential?) {
            stored = LockedBox(credential)
        }

        func load() async throws -> OAuth2Credential? { stored.snapshot }

        func save(_ credential: OAuth2Credential) async throws {
            events.withLock { $0.append("save-begin") }
            if saves.increment() == 1 {
                saveBegan.fulfill(())
                try await releaseSave.wait(timeout: .seconds(10))
            }
            stored.withLock { $0 = credential }
            events.withLock { $0.append("save-end") }
        }

        func clear() async throws {
            stored.withLock { $0 = nil }
            events.withLock { $0.append("clear") }
        }
    }

    /// Waits until the authenticator has forgotten its credential in memory. `signOut()` gives
    /// no event before it returns, and once the fix is in it returns only after the held save,
    /// so this re-checks with a deadline, like the other waits on state without events.
    private func waitUntilSignedOut(_ auth: OAuth2Authenticator, timeout: Duration = .seconds(10)) async throws {
        let deadline = ContinuousClock.now + timeout
        while try await auth.currentCredential() != nil {
            guard ContinuousClock.now < deadline else { throw WaitTimedOut(what: "the credential forgotten", after: timeout) }
            await Task.yield()
        }
    }

    func testSigningOutWhileARefreshedCredentialIsBeingSavedLeavesTheStoreEmpty() async throws {
        let api = try OAuthServer(access: nil)
        let store = SlowKeychainStore(api.credential(access: "stale"))
        defer { store.releaseSave.fulfill(()) }
        let auth = OAuth2Authenticator(origins: [api.baseURL], tokenEndpoint: api.endpoint, store: store)
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])

        // A 401 refreshes; the refreshed credential is current and its save is under way.
        let request = Kit.start(manager.session, api.apiURL())
        try await store.saveBegan.wait()
        XCTAssertEqual(api.tokenRequestCount, 1)

        let signOut = Task { try await auth.signOut() }
        try await waitUntilSignedOut(auth)
        store.releaseSave.fulfill(())
        _ = try await signOut.value

        // Once signOut() has returned the store is empty for good.
        XCTAssertNil(store.stored.snapshot, "the refreshed credential was saved after the sign-out cleared the store")
        XCTAssertEqual(store.events.snapshot.last, "clear", "\(store.events.snapshot)")
        XCTAssertEqual(store.events.snapshot, ["save-begin", "save-end", "clear"])
        let current = try await auth.currentCredential()
        XCTAssertNil(current)

        // The request that triggered the refresh is sent again signed out: no token, and its
        // 401 reaches the caller. Nothing lands in the store afterwards either.
        let result = await request.value
        XCTAssertEqual(result.status, 401)
        XCTAssertEqual(api.apiRequests.map { $0.headers["authorization"] }, ["Bearer stale", nil])
        XCTAssertNil(store.stored.snapshot)
        XCTAssertEqual(store.events.snapshot, ["save-begin", "save-end", "clear"])
    }

    func testARefreshAnsweredAfterSignOutNeverReachesTheStore() async throws {
        let api = try OAuthServer(access: nil)
        let tokenGate = Gate()
        defer { tokenGate.open() }
        api.holdTokenResponses(on: tokenGate)
        let store = SlowKeychainStore(api.credential(access: "stale"))
        defer { store.releaseSave.fulfill(()) }
        let auth = OAuth2Authenticator(origins: [api.baseURL], tokenEndpoint: api.endpoint, store: store)

        let refresh = Task { try await auth.refresh() }
        _ = try await api.server.waitForRequests(path: "/oauth/token", count: 1)
        try await auth.signOut()
        tokenGate.open()
        do {
            let refreshed = try await refresh.value
            XCTFail("the refresh should have been overtaken, got \(refreshed)")
        } catch let error as OAuth2Error {
            XCTAssertEqual(error, .notSignedIn)
        }
        XCTAssertEqual(store.events.snapshot, ["clear"], "the overtaken refresh saved nothing")
        XCTAssertNil(store.stored.snapshot)
        let current = try await auth.currentCredential()
        XCTAssertNil(current)
    }
}

/// `manager.signOut(of:)`: one call that signs out and stops every request carrying the old
/// credential, wherever it is, so that nothing signed with it is sent afterwards.
final class ManagerSignOutTests: XCTestCase {
    func testSigningOutStopsEveryRequestCarryingTheOldToken() async throws {
        let server = try LoopbackServer()
        let release = Gate()
        defer {
            release.open()
            server.shutdown()
        }
        server.route("/slow") { request in
            _ = release.wait(timeout: .seconds(20))
            return .text(request.headers["Authorization"] ?? "none")
        }
        server.route("/fast") { request in .text(request.headers["Authorization"] ?? "none") }
        let auth = OAuth2Authenticator(
            origins: [server.baseURL], tokenEndpoint: OAuth2TokenEndpoint(url: server.url("/token"), clientID: "tests"),
            store: InMemoryCredentialStore(
                OAuth2Credential(accessToken: "old", refreshToken: "r", expiresAt: Date().addingTimeInterval(3600))))
        let batch = BatchInterceptor(size: 100) { $0.url?.path == "/fast" }  // holds /fast, after the token is applied
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth), batch], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        defer { manager.invalidateAndCancel() }

        let onTheNetwork = Task { await fetched(manager.session, URLRequest(url: server.url("/slow"))) }
        let held = Task { await fetched(manager.session, URLRequest(url: server.url("/fast"))) }
        _ = try await server.waitForRequests(path: "/slow", count: 1)
        try await waitUntil("the /fast request held") { manager.heldTaskCount(interceptorAt: 1) == 1 }

        let started = ContinuousClock.now
        try await manager.signOut(of: auth)
        let first = await onTheNetwork.value
        let second = await held.value
        XCTAssertLessThan(started.duration(to: .now), .seconds(5), "the request on the network was not stopped")
        for result in [first, second] {
            XCTAssertEqual(result.taskError?.code, .authenticationFailed, "\(result)")
            XCTAssertEqual(result.taskError?.underlying as? OAuth2Error, .notSignedIn, "\(result)")
        }
        XCTAssertEqual(server.requestCount(path: "/fast"), 0, "a held request left with the old token")

        release.open()
        manager.flush()
        let (after, _) = try await manager.session.data(from: server.url("/slow"))
        XCTAssertEqual(String(decoding: after, as: UTF8.self), "none", "a request after sign-out carried a token")
        let sentWithOld = server.requests.filter { $0.headers["Authorization"] == "Bearer old" }
        XCTAssertEqual(sentWithOld.count, 1, "only the request already on the network when signing out carried the old token")
    }
}
