import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2
@testable import URLTaskResilience
import TestSupport

/// Issue 38, item 3: a refresh that cannot reach its token endpoint is a connectivity failure,
/// not an authentication failure. Over real HTTP on 127.0.0.1: the token expires as the backend
/// (its token endpoint included) stops accepting connections for 2 s, then listens again on the
/// same port. The requests made during the outage meet it as any request to an unreachable host
/// (held by an `OfflineHold`, else failed with the `URLError`), and no back-off outlives it.
final class OAuth2UnreachableTokenEndpointTests: XCTestCase {
    typealias Events = ResilienceTestKit.Events

    /// How long the backend is down, from the moment the token expires.
    private static let outage = Duration.seconds(2)
    /// The token's lifetime.
    private static let lifetime = Duration.seconds(2)

    private static var verbose: Bool { ParityLog.isVerbose }

    /// The README's recommended stack (`recommendedManager(auth:)` in Sources/Examples), with its
    /// `OfflineHold` passed in so the test can watch it.
    private static func recommendedManager(auth: OAuth2Authenticator, hold: OfflineHold) -> URLTaskManager {
        let breaker = CircuitBreaker(policy: .init(exempts: { auth.isTokenRequest($0) }))
        let limiter = RateLimiter(policy: .init(rate: 20, burst: 10))
        let coalescing = CoalescingInterceptor()
        return URLTaskManager(
            interceptors: [breaker, BearerInterceptor(authenticator: auth), coalescing, limiter],
            reactors: [OAuth2RefreshReactor(authenticator: auth), hold, RetryReactor()]
        )
    }

    /// An authenticator holding the backend's current credential, expiring after ``lifetime``.
    /// No leeway: the one refresh the tests count is the one the expiry during the outage needs.
    private static func authenticator(
        _ backend: OutageBackend, onRefreshFailure: (@Sendable (any Error) async -> Void)? = nil
    ) -> OAuth2Authenticator {
        OAuth2Authenticator(
            origins: [backend.baseURL], tokenEndpoint: OAuth2TokenEndpoint(url: backend.tokenURL, clientID: "tests"),
            store: InMemoryCredentialStore(backend.credential()), refreshLeeway: .zero, onRefreshFailure: onRefreshFailure)
    }

    /// A result in a few words, for the verbose figures.
    private static func brief(_ result: Fetched) -> String {
        if let code = result.urlErrorCode { return "URLError(\(code.rawValue))" }
        return result.status.map(String.init) ?? result.label
    }

    private static func get(_ session: URLSession, _ url: URL) async -> Fetched {
        var request = URLRequest(url: url)
        request.timeoutInterval = 10
        return await fetched(session, request)
    }

    /// With the recommended stack: the three GETs made during the outage are held and end 200,
    /// as do GETs 0.5 s and 1.5 s after the backend is back; exactly one refresh reaches the
    /// token endpoint, and no `invalid_grant`. (Before: the three failed in about 1 ms with
    /// `URLError(-1004)`, and the GETs after the return failed with the same stale error, the
    /// refresh back-off taking "could not connect" for a refusal; no refresh reached the server.)
    func testTheRecommendedStackHoldsRequestsThroughATokenEndpointOutageAndRefreshesOnce() async throws {
        let backend = try OutageBackend(lifetime: Self.lifetime)
        defer { backend.shutdown() }
        let auth = Self.authenticator(backend)
        let hold = OfflineHold()
        let held = Events(hold.events())
        let manager = Self.recommendedManager(auth: auth, hold: hold)
        defer { manager.invalidateAndCancel() }

        let warmUp = await Self.get(manager.session, backend.apiURL("/warm-up"))
        XCTAssertEqual(warmUp.status, 200, warmUp.label)

        // The script: the token expires, and the backend goes down at that moment.
        try await Task.sleep(until: backend.expiry, clock: .continuous)
        backend.goDown()
        let downAt = ContinuousClock.now
        let during = (0..<3).map { index in
            Task { () -> (Fetched, Duration) in
                let result = await Self.get(manager.session, backend.apiURL("/during\(index)"))
                return (result, downAt.duration(to: .now))
            }
        }
        // Not thrown: a GET that failed at once instead is reported with its error below.
        let heldInTime: Bool
        do {
            try await held.wait("the three GETs made during the outage held", count: 3, timeout: Self.outage) {
                if case .held = $0 { return true } else { return false }
            }
            heldInTime = true
        } catch {
            heldInTime = false
        }
        try await Task.sleep(until: downAt + Self.outage, clock: .continuous)
        try backend.comeBack()
        let upAt = ContinuousClock.now

        try await Task.sleep(until: upAt + .milliseconds(500), clock: .continuous)
        let halfSecondAfter = await Self.get(manager.session, backend.apiURL("/after-0.5"))
        try await Task.sleep(until: upAt + .milliseconds(1_500), clock: .continuous)
        let oneAndAHalfAfter = await Self.get(manager.session, backend.apiURL("/after-1.5"))
        var duringResults: [(Fetched, Duration)] = []
        for call in during { duringResults.append(await call.value) }

        if Self.verbose {
            print(
                "[token-outage, recommended stack] during: "
                    + duringResults.map { "\(Self.brief($0.0)) after \($0.1)" }.joined(separator: ", ")
                    + "; +0.5 s: \(Self.brief(halfSecondAfter)); +1.5 s: \(Self.brief(oneAndAHalfAfter)); "
                    + "refreshes: \(backend.refreshRequests), invalid_grant: \(backend.invalidGrants)")
        }
        XCTAssertTrue(heldInTime, "the three GETs made during the outage were held")
        for (index, (result, _)) in duringResults.enumerated() {
            XCTAssertEqual(result.status, 200, "GET \(index) made during the outage: \(result.label)")
        }
        XCTAssertEqual(halfSecondAfter.status, 200, "0.5 s after the return: \(halfSecondAfter.label)")
        XCTAssertEqual(oneAndAHalfAfter.status, 200, "1.5 s after the return: \(oneAndAHalfAfter.label)")
        XCTAssertEqual(backend.refreshRequests, 1, "one refresh reached the token endpoint")
        XCTAssertEqual(backend.invalidGrants, 0, "no invalid_grant")
    }

    /// Without an `OfflineHold`: the GETs made during the outage fail with the `URLError`
    /// itself, as a plain session's would; a GET 0.5 s after the return refreshes and ends 200
    /// (before: it failed with the stale error for the 5 s back-off). The failure hook hears of
    /// the outage once, not once per request.
    func testWithoutAHoldRequestsFailWithTheURLErrorAndTheFirstAfterTheReturnRefreshes() async throws {
        let backend = try OutageBackend(lifetime: Self.lifetime)
        defer { backend.shutdown() }
        let hooks = LockedBox<[String]>([])
        let firstHook = Latch<Void>("onRefreshFailure")
        let auth = Self.authenticator(backend) { error in
            hooks.withLock { $0.append("\(error)") }
            firstHook.fulfill(())
        }
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        defer { manager.invalidateAndCancel() }

        let warmUp = await Self.get(manager.session, backend.apiURL("/warm-up"))
        XCTAssertEqual(warmUp.status, 200, warmUp.label)

        try await Task.sleep(until: backend.expiry, clock: .continuous)
        backend.goDown()
        let downAt = ContinuousClock.now
        var during: [Fetched] = []
        for index in 0..<3 { during.append(await Self.get(manager.session, backend.apiURL("/during\(index)"))) }
        try await Task.sleep(until: downAt + Self.outage, clock: .continuous)
        try backend.comeBack()
        let upAt = ContinuousClock.now
        try await Task.sleep(until: upAt + .milliseconds(500), clock: .continuous)
        let after = await Self.get(manager.session, backend.apiURL("/after-0.5"))
        try await firstHook.wait(timeout: .seconds(10))

        if Self.verbose {
            print(
                "[token-outage, no hold] during: \(during.map(Self.brief)); +0.5 s: \(Self.brief(after)); "
                    + "refreshes: \(backend.refreshRequests); hook calls: \(hooks.snapshot.count)")
        }
        for (index, result) in during.enumerated() {
            XCTAssertEqual(result.urlErrorCode, .cannotConnectToHost, "GET \(index) during the outage: \(result.label)")
        }
        XCTAssertEqual(after.status, 200, "0.5 s after the return: \(after.label)")
        XCTAssertEqual(backend.refreshRequests, 1, "one refresh reached the token endpoint")
        XCTAssertEqual(backend.invalidGrants, 0)
        XCTAssertEqual(hooks.snapshot.count, 1, "the hook hears of the outage once: \(hooks.snapshot)")
    }
}

/// An API (`/api/...`, 200 only to the current access token while it lives) and its token
/// endpoint (`POST /oauth/token`, the refresh-token grant with rotation) on one port, whose
/// tokens outlive the listening socket: ``goDown()`` stops accepting connections, ``comeBack()``
/// listens again on the same port.
private final class OutageBackend: @unchecked Sendable {  // all mutable state is guarded by `lock`.
    private let lock = NSLock()
    private var server: LoopbackServer?
    private let port: Int
    private let lifetime: Duration
    private var access = "access-0"
    private var refresh = "refresh-0"
    private var issued = 0
    private var accessExpiry: ContinuousClock.Instant
    private var refreshes = 0
    private var invalid = 0
    /// When the first credential expires, on the client's side (see ``credential()``).
    let expiry: ContinuousClock.Instant
    private let clientExpiry: Date

    init(lifetime: Duration) throws {
        let server = try LoopbackServer()
        self.server = server
        self.port = server.port
        self.lifetime = lifetime
        self.accessExpiry = .now + lifetime
        self.expiry = accessExpiry
        self.clientExpiry = Date().addingTimeInterval(lifetime / .seconds(1))
        install(on: server)
    }

    var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }
    var tokenURL: URL { baseURL.appendingPathComponent("oauth/token") }
    func apiURL(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)/api\(path)")! }

    /// The credential valid at start, expiring with the server's first access token.
    func credential() -> OAuth2Credential {
        lock.withLock { OAuth2Credential(accessToken: access, refreshToken: refresh, expiresAt: clientExpiry) }
    }

    /// Token requests that reached the endpoint.
    var refreshRequests: Int { lock.withLock { refreshes } }
    /// Refreshes answered `invalid_grant`.
    var invalidGrants: Int { lock.withLock { invalid } }

    /// Stops accepting connections on the port.
    func goDown() {
        let down = lock.withLock {
            defer { server = nil }
            return server
        }
        down?.shutdown()
    }

    /// Listens again on the same port.
    func comeBack() throws {
        let up = try LoopbackServer(configuration: .init(port: port))
        install(on: up)
        lock.withLock { server = up }
    }

    func shutdown() { goDown() }

    private func install(on server: LoopbackServer) {
        server.route(prefix: "/api") { [self] request in
            let authorized = lock.withLock {
                request.headers["Authorization"] == "Bearer \(access)" && ContinuousClock.now < accessExpiry
            }
            return authorized ? .text("ok \(request.path)") : ServerResponse(status: 401, headers: ["WWW-Authenticate": "Bearer"])
        }
        server.route("POST", "/oauth/token") { [self] request in
            let form = OAuthServer.decodeForm(request.bodyText)
            let answer: String? = lock.withLock {
                refreshes += 1
                guard form["grant_type"] == "refresh_token", form["refresh_token"] == refresh else {
                    invalid += 1
                    return nil
                }
                issued += 1
                access = "access-\(issued)"
                refresh = "refresh-\(issued)"
                accessExpiry = .now + .seconds(3600)
                return #"{"access_token":"\#(access)","refresh_token":"\#(refresh)","token_type":"Bearer","expires_in":3600}"#
            }
            guard let answer else { return .json(Data(#"{"error":"invalid_grant"}"#.utf8), status: 400) }
            return .json(Data(answer.utf8))
        }
    }
}
