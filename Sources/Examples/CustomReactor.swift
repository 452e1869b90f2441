import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager

extension Scenario {
    static let customReactor = Scenario(
        name: "custom-reactor", summary: "Your own reactor in 20 lines: a token refresh on 401 without the OAuth2 kit"
    ) { transcript in
        let api = DemoAuthServer()
        let server = try LoopbackServer()
        defer { server.shutdown() }
        api.install(on: server)

        let tokens = TokenBox(access: "expired-token")
        let manager = URLTaskManager(
            interceptors: [HeaderInterceptor(["Authorization": .computed { _ in "Bearer \(await tokens.access)" }])],
            reactors: [RefreshOn401(tokens: tokens, refreshURL: server.url("/token"))]
        )

        transcript.client("20 GET /api/profile with a token the server no longer accepts, all at once")
        let results = await concurrentGETs(manager.session, server.url("/api/profile"), count: 20)
        let ok = results.filter { (try? $0.get()) == 200 }.count
        let refreshes = server.requestCount(path: "/token")
        transcript.client("\(ok) of 20 answered 200; the token is now \(await tokens.access)")
        transcript.server("POST /token called \(refreshes) time(s); \(api.unauthorizedCount) requests answered 401")
        try transcript.check(ok == 20, "only \(ok) succeeded")
        try transcript.check(refreshes == 1, "token endpoint hit \(refreshes) times")
        transcript.conclude("20/20 ok, 1 refresh by a 20-line reactor, \(api.unauthorizedCount) × 401 absorbed")
    }
}

/// A demo API: `/api/*` answers 401 unless the bearer is the current token; `/token` issues a
/// new one.
final class DemoAuthServer: @unchecked Sendable {  // all state is guarded by `lock`.
    private let lock = NSLock()
    private var current = "valid-1"
    private var issued = 1
    private var unauthorized = 0

    var unauthorizedCount: Int { lock.withLock { unauthorized } }

    func install(on server: LoopbackServer) {
        server.route(nil, prefix: "/api/") { [self] request in
            let valid = lock.withLock { request.headers["authorization"] == "Bearer \(current)" }
            guard valid else {
                lock.withLock { unauthorized += 1 }
                return .status(401)
            }
            return .text("profile of the signed-in user")
        }
        server.route("POST", "/token") { [self] _ in
            let token = lock.withLock {
                issued += 1
                current = "valid-\(issued)"
                return current
            }
            return .text(token)
        }
    }
}

// DocC token box: begin
/// The app's token, shared by the interceptor and the reactor.
actor TokenBox {
    var access: String

    init(access: String) {
        self.access = access
    }

    func replace(with token: String) {
        access = token
    }
}
// DocC token box: end

/// Refreshes the token on a 401, once for all the tasks that got one.
// DocC reactor: begin
struct RefreshOn401: URLTaskReactor {
    let tokens: TokenBox
    let refreshURL: URL
    /// The refreshes go through a plain session of their own, made once with the reactor:
    /// they must not wait behind the manager's gate.
    let refreshSession = URLSession(configuration: .ephemeral)

    var configuration: URLTaskReactorConfiguration { .authentication }

    func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
        outcome.statusCode == 401
    }

    func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
        var request = URLRequest(url: refreshURL)
        request.httpMethod = "POST"
        let (data, _) = try await refreshSession.data(for: request)
        await tokens.replace(with: String(decoding: data, as: UTF8.self))
    }
}
// DocC reactor: end
