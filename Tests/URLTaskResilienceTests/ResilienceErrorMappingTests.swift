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

/// One error rule whatever the stack: each failure the recommended stack (the Resilience
/// article's interceptors and reactors, coalescing included, with response validation) can
/// produce is driven over real HTTP on 127.0.0.1, and the OAuth2 article's mapping
/// (``AppError/init(_:backend:)``, the listing below) gives each its case. A `URLError` arrives
/// as itself; everything else is a `URLTaskError` whose code says what happened and whose
/// `underlying` is never another `URLTaskError`.
final class ResilienceErrorMappingTests: XCTestCase {
    typealias Kit = ResilienceTestKit

    /// The Resilience article's composition, coalescing included, validation on: breaker first,
    /// bearer, limiter last; observers, then refresh, hold, retry.
    private struct Stack {
        let manager: URLTaskManager
        let limiter: RateLimiter
        var session: URLSession { manager.session }

        init(
            auth: OAuth2Authenticator, breaker: CircuitBreaker.Policy = .init(), limiter: RateLimiter.Policy = .init(rate: 100, burst: 10)
        ) {
            var breakerPolicy = breaker
            breakerPolicy.exempts = { auth.isTokenRequest($0) }
            let breaker = CircuitBreaker(policy: breakerPolicy)
            let limiter = RateLimiter(policy: limiter)
            self.limiter = limiter
            let hold = OfflineHold(policy: .init(probeInterval: .milliseconds(50), maximumProbeInterval: .milliseconds(100)))
            let retry = RetryReactor(policy: RetryPolicy(maximumAttempts: 2, backoff: .init(base: .milliseconds(10), jitter: 0)))
            manager = URLTaskManager(
                interceptors: [breaker, BearerInterceptor(authenticator: auth), CoalescingInterceptor(), limiter],
                reactors: [OAuth2RefreshReactor(authenticator: auth), hold, retry],
                options: .init(responseValidation: .successfulStatusCodes))
        }
    }

    /// An authenticator for `api` holding a token the server refuses (expiring in `expiresIn`).
    private func authenticator(_ api: OAuthServer, tokenURL: URL? = nil, expiresIn: TimeInterval = 3600) -> OAuth2Authenticator {
        OAuth2Authenticator(
            origins: [api.baseURL], tokenEndpoint: OAuth2TokenEndpoint(url: tokenURL ?? api.tokenURL, clientID: "tests"),
            store: InMemoryCredentialStore(api.credential(access: "stale", expiresIn: expiresIn)))
    }

    /// The rule's invariants on one failure: a `URLError` or a `URLTaskError`, never one inside
    /// the other.
    private func assertFollowsTheRule(_ result: Fetched, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        switch result.error {
        case let error as URLTaskError:
            XCTAssertFalse(
                error.underlying is URLTaskError, "\(what): a URLTaskError wraps a URLTaskError: \(error)", file: file, line: line)
            XCTAssertFalse(error.underlying is URLError, "\(what): a URLError wrapped: \(error)", file: file, line: line)
            XCTAssertNotNil(error.request, "\(what): the error names its request", file: file, line: line)
        case is URLError:
            break
        default:
            XCTFail("\(what): neither a URLError nor a URLTaskError: \(result.label)", file: file, line: line)
        }
    }

    /// A host that keeps failing: its last answer is a rejected 503, then its circuit is open.
    func testAFailingHostIsARejectedAnswerThenAnOpenCircuit() async throws {
        let api = try OAuthServer(access: "good")
        defer { api.shutdown() }
        api.server.route("/down") { _ in .status(503) }
        let stack = Stack(auth: authenticator(api), breaker: .init(failureThreshold: 1, coolDown: .seconds(30)))
        defer { stack.manager.invalidateAndCancel() }

        let rejected = await fetched(stack.session, URLRequest(url: api.server.url("/down")))
        assertFollowsTheRule(rejected, "503")
        XCTAssertEqual(rejected.taskError?.code, .responseRejected, rejected.label)
        XCTAssertEqual(AppError(try XCTUnwrap(rejected.error)), .rejected(status: 503))
        XCTAssertEqual(api.server.requestCount(path: "/down"), 2, "retried once: the task's end opened the circuit")

        let refused = await fetched(stack.session, URLRequest(url: api.server.url("/down")))
        assertFollowsTheRule(refused, "open circuit")
        XCTAssertEqual(refused.taskError?.code, .circuitOpen, refused.label)
        XCTAssertEqual(refused.taskError?.component?.name, "CircuitBreaker")
        XCTAssertTrue(refused.taskError?.underlying is CircuitOpenError)
        guard case .unavailable(let retryAfter?) = AppError(try XCTUnwrap(refused.error)), retryAfter > .seconds(25) else {
            return XCTFail("expected unavailable with the cool-down left: \(refused.label)")
        }
        XCTAssertEqual(api.server.requestCount(path: "/down"), 2, "nothing sent")
    }

    /// A rejected answer that is not a server failure: no retry, no circuit.
    func testARejectedAnswerIsResponseRejected() async throws {
        let api = try OAuthServer(access: "good")
        defer { api.shutdown() }
        api.server.route("/missing") { _ in .status(404) }
        let stack = Stack(auth: authenticator(api))
        defer { stack.manager.invalidateAndCancel() }

        let result = await fetched(stack.session, URLRequest(url: api.server.url("/missing")))
        assertFollowsTheRule(result, "404")
        XCTAssertEqual(result.taskError?.code, .responseRejected, result.label)
        XCTAssertEqual(AppError(try XCTUnwrap(result.error)), .rejected(status: 404))
    }

    /// The limiter's line is full: the next request is refused at once; one that waits in line
    /// past its `timeoutInterval` fails with `URLError.timedOut`, as a plain session's would.
    func testAFullRateLimitQueueIsRateLimitQueueFullAndAWaitPastTheTimeoutIsTimedOut() async throws {
        let api = try OAuthServer(access: "good")
        defer { api.shutdown() }
        api.server.route("/r") { _ in .text("ok") }
        let stack = Stack(auth: authenticator(api), limiter: .init(rate: 0.2, burst: 1, maximumQueueLength: 1))
        defer { stack.manager.invalidateAndCancel() }

        let first = await fetched(stack.session, URLRequest(url: api.server.url("/r")))
        XCTAssertEqual(first.status, 200, "the burst's token")
        var waiting = URLRequest(url: api.server.url("/r"))
        waiting.timeoutInterval = 1
        let events = Kit.Events(stack.limiter.events())
        let inLine = Task { await fetched(stack.session, waiting) }
        try await events.wait("in line") { if case .delayed = $0 { return true } else { return false } }
        let refused = await fetched(stack.session, URLRequest(url: api.server.url("/r")))
        assertFollowsTheRule(refused, "full queue")
        XCTAssertEqual(refused.taskError?.code, .rateLimitQueueFull, refused.label)
        XCTAssertEqual(refused.taskError?.component?.name, "RateLimiter")
        XCTAssertTrue(refused.taskError?.underlying is RateLimitQueueFullError)
        XCTAssertEqual(AppError(try XCTUnwrap(refused.error)), .unavailable(retryAfter: nil))

        let timedOut = await inLine.value
        assertFollowsTheRule(timedOut, "wait past the timeout")
        XCTAssertEqual(timedOut.urlErrorCode, .timedOut, timedOut.label)
        XCTAssertEqual(AppError(try XCTUnwrap(timedOut.error)), .offline)
        XCTAssertEqual(api.server.requestCount(path: "/r"), 1)
    }

    /// The token endpoint refuses the refresh (`invalid_grant`): the session is over. A
    /// sign-out through the manager ends requests the same way.
    func testARefusedRefreshAndASignOutAreAuthenticationFailedAndSessionExpired() async throws {
        let api = try OAuthServer(access: nil)
        defer { api.shutdown() }
        let auth = authenticator(api)
        api.revokeRefresh()
        let stack = Stack(auth: auth)
        defer { stack.manager.invalidateAndCancel() }

        let refused = await fetched(stack.session, URLRequest(url: api.apiURL()))
        assertFollowsTheRule(refused, "invalid_grant")
        XCTAssertEqual(refused.taskError?.code, .authenticationFailed, refused.label)
        XCTAssertEqual(refused.taskError?.component?.name, "OAuth2RefreshReactor")
        XCTAssertEqual((refused.taskError?.underlying as? OAuth2Error)?.serverErrorCode, "invalid_grant")
        XCTAssertEqual(AppError(try XCTUnwrap(refused.error), backend: "api"), .sessionExpired(backend: "api"))
        // Until a new sign-in, the interceptor fails new requests the same way, without the network.
        let next = await fetched(stack.session, URLRequest(url: api.apiURL()))
        XCTAssertEqual(next.taskError?.code, .authenticationFailed, next.label)
        XCTAssertEqual(next.taskError?.component?.name, "OAuth2RefreshReactor")

        try await auth.signIn(api.endpoint.signIn(username: "ada", password: "pw"))
        let gate = Gate()
        defer { gate.open() }
        api.holdResponses(to: "/slow", on: gate)
        let onTheNetwork = Task { await fetched(stack.session, URLRequest(url: api.apiURL("/slow"))) }
        _ = try await api.server.waitForRequests(path: "/api/slow", count: 1)
        try await stack.manager.signOut(of: auth)
        let signedOut = await onTheNetwork.value
        assertFollowsTheRule(signedOut, "sign-out")
        XCTAssertEqual(signedOut.taskError?.code, .authenticationFailed, signedOut.label)
        XCTAssertEqual(signedOut.taskError?.underlying as? OAuth2Error, .notSignedIn)
        XCTAssertEqual(AppError(try XCTUnwrap(signedOut.error), backend: "api"), .sessionExpired(backend: "api"))
    }

    /// A token endpoint that fails (500) or refuses the client (`invalid_client`): temporary,
    /// or a misconfiguration to report.
    func testAFailingTokenEndpointIsTemporaryAndARefusedClientIsUnexpected() async throws {
        for (status, code, expected) in [(500, "server_error", AppError.unavailable(retryAfter: nil)), (400, "invalid_client", nil)] {
            let api = try OAuthServer(access: nil)
            defer { api.shutdown() }
            api.setTokenAnswer(.reject(status: status, error: code))
            let stack = Stack(auth: authenticator(api))
            defer { stack.manager.invalidateAndCancel() }

            let result = await fetched(stack.session, URLRequest(url: api.apiURL()))
            assertFollowsTheRule(result, code)
            XCTAssertEqual(result.taskError?.code, .authenticationFailed, result.label)
            XCTAssertEqual((result.taskError?.underlying as? OAuth2Error)?.serverErrorCode, code)
            let mapped = AppError(try XCTUnwrap(result.error))
            if let expected {
                XCTAssertEqual(mapped, expected, code)
            } else {
                guard case .unexpected = mapped else { return XCTFail("\(code): \(mapped)") }
            }
        }
    }

    /// Issue 47: a token endpoint that answers 200 with malformed JSON is failing, not
    /// misconfigured: `.unavailable`, where an HTML page at the token URL (a wrong URL) is
    /// `.unexpected`.
    func testMalformedJSONFromTheTokenEndpointIsUnavailableAndAnHTMLPageUnexpected() async throws {
        let api = try OAuthServer(access: nil)
        defer { api.shutdown() }
        api.server.route("POST", "/oauth/truncated") { _ in .json(Data(#"{"access_token": "ab"#.utf8)) }
        api.server.route("POST", "/oauth/page") { _ in
            ServerResponse(status: 200, headers: ["Content-Type": "text/html"], body: .data(Data("<h1>Sign in</h1>".utf8)))
        }
        for (path, unavailable) in [("/oauth/truncated", true), ("/oauth/page", false)] {
            let stack = Stack(auth: authenticator(api, tokenURL: api.server.url(path)))
            defer { stack.manager.invalidateAndCancel() }
            let result = await fetched(stack.session, URLRequest(url: api.apiURL()))
            assertFollowsTheRule(result, path)
            XCTAssertEqual(result.taskError?.code, .authenticationFailed, result.label)
            let mapped = AppError(try XCTUnwrap(result.error))
            if unavailable {
                XCTAssertEqual(mapped, .unavailable(retryAfter: nil), path)
            } else {
                guard case .unexpected = mapped else { return XCTFail("\(path): \(mapped)") }
            }
        }
    }

    /// The token endpoint cannot be reached: the refresh's `URLError` reaches the caller as
    /// itself, naming the refresh reactor, whether a 401 started the refresh or the interceptor
    /// renewed a token about to expire.
    func testARefreshWhoseTokenEndpointCannotBeReachedIsTheURLErrorItself() async throws {
        let api = try OAuthServer(access: nil)
        defer { api.shutdown() }
        let deadTokenURL = try Kit.deadURL("/oauth/token")
        for (path, expiresIn) in [("after a 401", 3600.0), ("before expiry", 10.0)] {
            let stack = Stack(auth: authenticator(api, tokenURL: deadTokenURL, expiresIn: expiresIn))
            defer { stack.manager.invalidateAndCancel() }
            let result = await fetched(stack.session, URLRequest(url: api.apiURL()))
            assertFollowsTheRule(result, path)
            let error = try XCTUnwrap(result.error as? URLError, "\(path): \(result.label)")
            XCTAssertEqual(error.code, .cannotConnectToHost, path)
            XCTAssertEqual(error.userInfo[URLTaskError.componentUserInfoKey] as? String, "OAuth2RefreshReactor", path)
            XCTAssertEqual(AppError(error), .offline, path)
        }
    }

    /// A host that stays unreachable: held, then failed with the original `URLError` at the
    /// request's timeout, naming the hold.
    func testAnOfflineHoldThatGivesUpIsTheOriginalURLError() async throws {
        let api = try OAuthServer(access: "good")
        defer { api.shutdown() }
        let stack = Stack(auth: authenticator(api))
        defer { stack.manager.invalidateAndCancel() }
        var request = URLRequest(url: try Kit.deadURL("/thing"))
        request.timeoutInterval = 1

        let started = ContinuousClock.now
        let result = await fetched(stack.session, request)
        XCTAssertGreaterThan(started.duration(to: .now), .milliseconds(850), "held, not failed at once")
        assertFollowsTheRule(result, "offline expiry")
        let error = try XCTUnwrap(result.error as? URLError, result.label)
        XCTAssertEqual(error.code, .cannotConnectToHost)
        XCTAssertEqual(error.userInfo[URLTaskError.componentUserInfoKey] as? String, "OfflineHold")
        XCTAssertEqual(AppError(error), .offline)
    }

    /// Adding the breaker, the limiter and the offline hold changes no error a caller catches:
    /// the same failures through a manager with only the OAuth2 pair (and validation) and
    /// through the recommended stack arrive as the same type, code and mapping.
    func testTheResilienceComponentsChangeNoErrorACallerCatches() async throws {
        func shape(_ result: Fetched) -> String {
            switch result.error {
            case let error as URLTaskError: "URLTaskError.\(error.code)(\(error.underlying.map { "\(type(of: $0))" } ?? "-"))"
            case let error as URLError: "URLError(\(error.code.rawValue))"
            default: result.label
            }
        }
        let deadTokenURL = try Kit.deadURL("/oauth/token")
        let deadHost = try Kit.deadURL("/thing")
        var cases: [(String, (OAuthServer) -> Void, URL?, (OAuthServer) -> URLRequest)] = [
            ("refused refresh", { $0.revokeRefresh() }, nil, { URLRequest(url: $0.apiURL()) }),
            ("token endpoint down", { _ in }, deadTokenURL, { URLRequest(url: $0.apiURL()) }),
            ("rejected answer", { $0.server.route("/missing") { _ in .status(404) } }, nil, { URLRequest(url: $0.server.url("/missing")) }),
        ]
        cases.append(
            (
                "host down", { _ in }, nil,
                { _ in
                    var request = URLRequest(url: deadHost)
                    request.timeoutInterval = 1
                    return request
                }
            ))
        for (name, prepare, tokenURL, request) in cases {
            var shapes: [String] = []
            var mapped: [AppError] = []
            for recommended in [false, true] {
                let api = try OAuthServer(access: nil)
                defer { api.shutdown() }
                let auth = authenticator(api, tokenURL: tokenURL)
                prepare(api)
                let manager =
                    recommended
                    ? Stack(auth: auth).manager
                    : URLTaskManager(
                        interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)],
                        options: .init(responseValidation: .successfulStatusCodes))
                defer { manager.invalidateAndCancel() }
                let result = await fetched(manager.session, request(api))
                assertFollowsTheRule(result, name)
                shapes.append(shape(result))
                mapped.append(AppError(try XCTUnwrap(result.error)))
            }
            XCTAssertEqual(shapes[0], shapes[1], "\(name): the caller catches another error once the components are added")
            XCTAssertEqual(mapped[0], mapped[1], name)
        }
    }
}

// DocC error mapping: begin
/// The app's own errors: what its screens know how to show.
enum AppError: Error, Equatable {
    /// The password was wrong.
    case wrongPassword
    /// The second backend would not exchange the first one's token.
    case linkedAccountUnavailable
    /// Only a new sign-in helps: the refresh token is dead, or the user signed out.
    case sessionExpired(backend: String)
    /// The network or the host cannot be reached: try again when it is back.
    case offline
    /// The service is failing or busy: try again later (after `retryAfter`, when known).
    case unavailable(retryAfter: Duration?)
    /// The server answered, with something the request does not accept.
    case rejected(status: Int)
    /// A bug or a misconfiguration: report it.
    case unexpected(String)
}

extension AppError {
    /// Maps what the networking layer throws to what the app's screens understand. The errors
    /// follow one rule whatever the session's interceptors and reactors: a `URLError` arrives
    /// as itself, everything else as a `URLTaskError` whose code says what happened.
    init(_ error: any Error, backend: String = "") {
        let oauth = (error as? URLTaskError)?.underlying as? OAuth2Error
        switch error {
        case let error as AppError:
            self = error
        // The transport, a refresh whose token endpoint cannot be reached, an offline hold that gave up.
        case let error as URLError where Self.offlineCodes.contains(error.code):
            self = .offline
        // The token endpoint refused the refresh (invalid_grant), or the user signed out.
        case let error as URLTaskError where error.code == .authenticationFailed && oauth?.requiresSignIn == true:
            self = .sessionExpired(backend: backend)
        // The token endpoint failed (a 5xx, a malformed answer): the next request tries again.
        case let error as URLTaskError where error.code == .authenticationFailed && oauth?.isConfigurationError == false:
            self = .unavailable(retryAfter: nil)
        case let error as URLTaskError where error.code == .circuitOpen:
            self = .unavailable(retryAfter: (error.underlying as? CircuitOpenError)?.retryAfter)
        case let error as URLTaskError where [.rateLimitQueueFull, .reactorTimedOut].contains(error.code):
            self = .unavailable(retryAfter: nil)
        case let error as URLTaskError where error.code == .responseRejected:
            self = .rejected(status: error.response?.statusCode ?? 0)
        default:  // a client misconfiguration, a failing component of the app's own, a bug
            self = .unexpected(String(describing: error))
        }
    }

    /// The `URLError`s that mean the network or the host cannot be reached (a request that
    /// waited past its `timeoutInterval` too).
    static let offlineCodes: Set<URLError.Code> = [
        .notConnectedToInternet, .networkConnectionLost, .cannotConnectToHost, .cannotFindHost, .timedOut,
    ]
}
// DocC error mapping: end
