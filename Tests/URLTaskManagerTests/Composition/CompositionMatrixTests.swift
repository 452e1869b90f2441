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

/// Every pair of the built-in parts, and the README's recommended stack, run one workload over
/// real HTTP: each request's outcome must be the one the parts present promise (an answer, a
/// `URLError` as a plain session gives it, or a `URLTaskError` with the documented code), a
/// credential goes only to its origin, each request's policy holds, and every task completes
/// exactly once. Adding a part to a stack changes no outcome that part does not decide. The
/// workload runs through both doors of each manager, its session and its own methods, with the
/// same expected outcomes.
final class CompositionMatrixTests: XCTestCase {
    /// The parts the matrix combines.
    enum Part: String, CaseIterable, Sendable {
        case oauth2, coalescing, breaker, limiter, offlineHold, retry, validation, batching, policies
    }

    /// How the workload's requests reach the manager.
    enum Door: String, CaseIterable, Sendable {
        /// `manager.session.data(for:)`.
        case session
        /// `manager.data(for:)`.
        case methods

        func fetch(_ manager: URLTaskManager, _ request: URLRequest) async -> Fetched {
            switch self {
            case .session: await fetched(manager.session, request)
            case .methods: await fetched(manager, request)
            }
        }
    }

    /// The servers the workload talks to: the API (the credential's origin), a failing host, a
    /// foreign host (never the credential's), and a port nobody listens on.
    final class World: Sendable {
        let api: LoopbackServer
        let failing: LoopbackServer
        let foreign: LoopbackServer
        let dead: URL

        init() throws {
            api = try LoopbackServer()
            failing = try LoopbackServer()
            foreign = try LoopbackServer()
            dead = try ResilienceTestKit.deadURL("/nobody")
            let echo: LoopbackServer.Handler = { request in .text("auth=\(request.headers["authorization"] ?? "none")") }
            api.route("/ok", echo)
            api.route("/protected") { request in
                request.headers["authorization"] == "Bearer fresh" ? .text("protected ok") : .status(401)
            }
            api.route("/missing") { _ in .status(404) }
            failing.route(prefix: "/") { _ in .status(500) }
            foreign.route("/echo", echo)
        }

        func shutdown() {
            api.shutdown()
            failing.shutdown()
            foreign.shutdown()
        }
    }

    /// A manager with `parts`, each placed where it belongs.
    static func makeManager(_ parts: Set<Part>, world: World) -> URLTaskManager {
        var interceptors: [any URLTaskInterceptor] = []
        var reactors: [any URLTaskReactor] = []
        var observers: [any URLTaskOutcomeObserver] = []
        var auth: OAuth2Authenticator?
        if parts.contains(.oauth2) {
            auth = OAuth2Authenticator(
                origins: [world.api.baseURL],
                store: InMemoryCredentialStore(
                    OAuth2Credential(accessToken: "stale", refreshToken: "r", expiresAt: Date().addingTimeInterval(3_600))),
                refresh: { _ in OAuth2Credential(accessToken: "fresh", refreshToken: "r", expiresAt: Date().addingTimeInterval(3_600)) })
        }
        if parts.contains(.breaker) {
            let breaker = CircuitBreaker(policy: .init(failureThreshold: 50))
            interceptors.append(breaker)
            observers.append(breaker)
        }
        if let auth { interceptors.append(BearerInterceptor(authenticator: auth)) }
        if parts.contains(.batching) { interceptors.append(BatchInterceptor(size: 2, window: .milliseconds(30))) }
        if parts.contains(.coalescing) { interceptors.append(CoalescingInterceptor()) }
        if parts.contains(.limiter) {
            let limiter = RateLimiter(policy: .init(rate: 1_000, burst: 100))
            interceptors.append(limiter)
            observers.append(limiter)
        }
        if let auth { reactors.append(OAuth2RefreshReactor(authenticator: auth)) }
        if parts.contains(.offlineHold) {
            // It gives up after 0.5 s, well before the request's timeout: the request ends with
            // the hold's answer, never with a transfer cancelled at its deadline.
            reactors.append(
                OfflineHold(
                    policy: .init(
                        probeInterval: .milliseconds(50), maximumProbeInterval: .milliseconds(100), maximumHold: .milliseconds(500))))
        }
        if parts.contains(.retry) {
            reactors.append(RetryReactor(policy: .init(backoff: .init(base: .milliseconds(1), maximum: .milliseconds(5)))))
        }
        let options = URLTaskManager.Options(responseValidation: parts.contains(.validation) ? .successfulStatusCodes : nil)
        return URLTaskManager(
            interceptors: interceptors, reactors: reactors, observers: observers, configuration: .ephemeral, options: options)
    }

    /// What a request's outcome must be: an answer's status and body, a `URLError` code, or a
    /// `URLTaskError` code.
    enum Expected: Equatable, CustomStringConvertible {
        case answer(Int, String?)
        case urlError(URLError.Code)
        case taskError(URLTaskError.Code)

        var description: String {
            switch self {
            case .answer(let status, let body): "\(status) \(body ?? "")"
            case .urlError(let code): "URLError \(code.rawValue)"
            case .taskError(let code): "URLTaskError \(code)"
            }
        }
    }

    static func outcome(_ fetched: Fetched) -> Expected? {
        switch fetched {
        case .response(let status, _, let body): return .answer(status, String(decoding: body, as: UTF8.self))
        case .failure(let error as URLError): return .urlError(error.code)
        case .failure(let error as URLTaskError):
            XCTAssertFalse(error.underlying is URLTaskError, "a URLTaskError never wraps another: \(error)")
            return .taskError(error.code)
        case .failure: return nil
        }
    }

    /// Runs the workload through a manager with `parts`, by `door`, and checks every outcome.
    static func check(_ parts: Set<Part>, world: World, door: Door, file: StaticString = #filePath, line: UInt = #line) async throws {
        let label = parts.map(\.rawValue).sorted().joined(separator: "+") + " through the \(door.rawValue) door"
        let manager = makeManager(parts, world: world)
        defer { manager.session.finishTasksAndInvalidate() }
        let completions = EventCollector(manager.events())
        let kit = parts.contains(.oauth2)
        let validation = parts.contains(.validation)
        var requests = 0

        func expect(_ request: URLRequest, _ expected: Expected, _ what: String) async {
            requests += 1
            let got = outcome(await door.fetch(manager, request))
            XCTAssertEqual(got, expected, "[\(label)] \(what)", file: file, line: line)
        }

        // A 401 under the kit is refreshed once and sent again; without it, it is the caller's.
        await expect(
            URLRequest(url: world.api.url("/protected")),
            kit ? .answer(200, "protected ok") : validation ? .taskError(.responseRejected) : .answer(401, ""),
            "a 401")
        // The credential goes to its origin only.
        await expect(URLRequest(url: world.api.url("/ok")), .answer(200, kit ? "auth=Bearer fresh" : "auth=none"), "the API")
        await expect(URLRequest(url: world.foreign.url("/echo")), .answer(200, "auth=none"), "a foreign host")
        // Identical requests at once each get the answer.
        let concurrent = await withTaskGroup(of: Expected?.self) { group in
            for _ in 0..<4 { group.addTask { outcome(await door.fetch(manager, URLRequest(url: world.api.url("/ok")))) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        requests += 4
        XCTAssertEqual(
            concurrent, Array(repeating: .answer(200, kit ? "auth=Bearer fresh" : "auth=none"), count: 4), "[\(label)] 4 at once",
            file: file, line: line)
        // A 500: the server's answer, or the documented rejection; the same whatever else is there.
        await expect(URLRequest(url: world.failing.url("/x")), validation ? .taskError(.responseRejected) : .answer(500, ""), "a 500")
        // An unreachable host: the URLError a plain session gives, whatever holds or retries it
        // (its timeout leaves room for the retries and the hold on a slow machine, such as under
        // the thread sanitizer, so that the refusal, not the deadline, ends it).
        var unreachable = URLRequest(url: world.dead)
        unreachable.timeoutInterval = 5
        await expect(unreachable, .urlError(.cannotConnectToHost), "an unreachable host")
        if parts.contains(.policies) {
            var accepting = URLRequest(url: world.api.url("/missing"))
            URLTaskPolicy(responseValidation: ResponseValidation(acceptableStatusCodes: 200..<500)).apply(to: &accepting)
            await expect(accepting, .answer(404, ""), "a policy accepting a 404")
            var bare = URLRequest(url: world.api.url("/ok"))
            URLTaskPolicy(skipping: [BearerInterceptor.self]).apply(to: &bare)
            await expect(bare, .answer(200, "auth=none"), "a policy skipping the bearer")
        }
        // Exactly once: one completion event per request.
        let expected = requests
        try await completions.waitFor("[\(label)] \(expected) completions") { $0.filter(\.isCompletion).count >= expected }
        let completed = completions.all.filter(\.isCompletion).map(\.task)
        XCTAssertEqual(completed.count, expected, "[\(label)] every task completes once", file: file, line: line)
        XCTAssertEqual(Set(completed).count, completed.count, "[\(label)] no task completes twice", file: file, line: line)
    }

    func testEveryPartAlone() async throws {
        let world = try World()
        defer { world.shutdown() }
        for door in Door.allCases {
            for part in Part.allCases { try await Self.check([part], world: world, door: door) }
        }
    }

    func testEveryPairOfParts() async throws {
        let world = try World()
        defer { world.shutdown() }
        let parts = Part.allCases
        for door in Door.allCases {
            for (i, first) in parts.enumerated() {
                for second in parts[(i + 1)...] { try await Self.check([first, second], world: world, door: door) }
            }
        }
    }

    /// The README's recommended stack (the kit, coalescing, the breaker, the limiter, the offline
    /// hold, retries, validation), with per-request policies and batching added.
    func testTheRecommendedStackAndEverythingTogether() async throws {
        let world = try World()
        defer { world.shutdown() }
        for door in Door.allCases {
            try await Self.check(
                [.oauth2, .coalescing, .breaker, .limiter, .offlineHold, .retry, .validation, .policies], world: world, door: door)
            try await Self.check(Set(Part.allCases), world: world, door: door)
        }
    }
}
