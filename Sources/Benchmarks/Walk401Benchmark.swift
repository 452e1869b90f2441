import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2

/// `Benchmarks walk-401 WALKS [core|oauth2]`: the workload `scripts/walk-401.sh` counts under
/// callgrind, the path issue 31 follows by hand. One warm-up walk, then WALKS more (the script runs
/// 0 and 1 and takes the difference), each a single GET that goes out with a token the server no
/// longer takes, gets a 401, starts one refresh (a `.refresh` reactor: the engine's single flight),
/// is requeued through the interceptors with the new token and ends 200. The warm-up pays the
/// one-time costs (lazy globals, generic metadata, the connection), so a measured walk is the
/// path alone; after the last walk the process idles a second so work that trails the caller's
/// answer (releases, a timer's cancellation) falls inside the count, then exits without tearing
/// the manager down (the same exit in both runs).
///
/// `core` (the default) uses the core library alone: a synchronous interceptor setting the bearer
/// from a token box and a 10-line reactor whose work swaps the token in memory after 100 ms (no
/// token request: the walk is the engine's). `oauth2` uses the OAuth2 kit against an `OAuthServer`: a
/// `BearerInterceptor` and an `OAuth2RefreshReactor` with one `OAuth2Authenticator`, whose refresh
/// posts to the token endpoint through the kit's own plain session.
///
/// Prints one line per walk (`walk N: 401 then 200, refreshes R`) and fails if a walk did not
/// see exactly one 401 and one refresh.
enum Walk401Benchmark {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func run(_ arguments: [String]) async throws {
        guard let walks = arguments.first.flatMap(Int.init), walks >= 0, arguments.count <= 2 else {
            throw Failure(description: "usage: Benchmarks walk-401 WALKS [core|oauth2]")
        }
        switch arguments.dropFirst().first ?? "core" {
        case "core": try await core(walks: walks)
        case "oauth2": try await oauth2(walks: walks)
        case let other: throw Failure(description: "walk-401: unknown kit \(other) (core or oauth2)")
        }
        // Work that trails the last answer (the task's release, a cancelled timer) ends inside the
        // count in both runs alike; under callgrind a second is ample for one request's leftovers.
        try await Task.sleep(for: .seconds(1))
    }

    /// The client's token and the one the server takes, each changed by one side only.
    final class Tokens: @unchecked Sendable {  // both fields are guarded by `lock`.
        private let lock = NSLock()
        private var client = "token-0"
        private var server = "token-1"

        var clientToken: String { lock.withLock { client } }
        func accepts(_ authorization: String?) -> Bool { lock.withLock { authorization == "Bearer \(server)" } }
        /// The refresh: the client takes the token the server takes now.
        func refresh() { lock.withLock { client = server } }
        /// The server moves on: the client's token is refused until the next refresh.
        func revoke(next: Int) { lock.withLock { server = "token-\(next)" } }
    }

    /// Sets the bearer from memory without suspending, as `BearerInterceptor` does while its token
    /// is fresh. Not `HeaderInterceptor` with a computed value: that runs in a Swift task of its
    /// own, and whether the request is answered before the pipeline notes the interceptor's wait
    /// is a race (a timer armed or not), which moved the count from run to run.
    struct BearerFromMemory: SynchronousInterceptor {
        let tokens: Tokens
        func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand? {
            task.request.setValue("Bearer \(tokens.clientToken)", forHTTPHeaderField: "Authorization")
            return .execute
        }
        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            try interceptWithoutSuspending(&task, context: context) ?? .execute
        }
    }

    /// Refreshes the token on a 401; the work is an in-memory swap so the walk is the engine's.
    struct RefreshOn401: URLTaskReactor {
        let tokens: Tokens
        let refreshes: Counter
        var configuration: URLTaskReactorConfiguration { .authentication }
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 401 }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
            refreshes.increment()
            // A refresh takes a moment, as a token request does. With work that ends at once,
            // whether the engine is done with the run before the task's own bookkeeping of the
            // 401 is a race, which moved the count from run to run (by how much: the Performance
            // article, "Figures behind other choices").
            try await Task.sleep(for: .milliseconds(100))
            tokens.refresh()
        }
    }

    final class Counter: @unchecked Sendable {  // `value` is guarded by `lock`.
        private let lock = NSLock()
        private var count = 0
        var value: Int { lock.withLock { count } }
        func increment() { lock.withLock { count += 1 } }
    }

    private static func core(walks: Int) async throws {
        let tokens = Tokens()
        let unauthorized = Counter()
        let refreshes = Counter()
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/api/profile") { request in
            guard tokens.accepts(request.headers["authorization"]) else {
                unauthorized.increment()
                return .status(401)
            }
            return .text("ok")
        }
        let manager = URLTaskManager(
            interceptors: [BearerFromMemory(tokens: tokens)],
            reactors: [RefreshOn401(tokens: tokens, refreshes: refreshes)]
        )
        let url = server.url("/api/profile")
        for walk in 0...walks {
            if walk > 0 { tokens.revoke(next: walk + 1) }
            let (before401, beforeRefreshes) = (unauthorized.value, refreshes.value)
            try await walkOnce(manager.session, url, walk: walk) {
                (unauthorized.value - before401, refreshes.value - beforeRefreshes)
            }
        }
    }

    private static func oauth2(walks: Int) async throws {
        let api = try OAuthServer(access: "token-0")
        defer { api.shutdown() }
        let endpoint = OAuth2TokenEndpoint(url: api.tokenURL, clientID: "walk")
        let auth = OAuth2Authenticator(
            origins: [api.baseURL],
            store: InMemoryCredentialStore(
                OAuth2Credential(accessToken: "token-0", refreshToken: "refresh-0", expiresAt: Date().addingTimeInterval(3600))),
            isTokenRequest: { endpoint.matches($0) },
            refresh: { try await endpoint.refresh($0) }
        )
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)],
            reactors: [OAuth2RefreshReactor(authenticator: auth)]
        )
        let url = api.apiURL()
        for walk in 0...walks {
            api.revokeAccess()
            let (before401, beforeRefreshes) = (api.unauthorizedCount, api.tokenRequestCount)
            try await walkOnce(manager.session, url, walk: walk) {
                (api.unauthorizedCount - before401, api.tokenRequestCount - beforeRefreshes)
            }
        }
    }

    /// One GET that must end 200 after exactly one 401 and one refresh.
    private static func walkOnce(
        _ session: URLSession, _ url: URL, walk: Int, counts: () -> (unauthorized: Int, refreshes: Int)
    ) async throws {
        let (_, response) = try await session.data(from: url)
        let status = (response as? HTTPURLResponse)?.statusCode ?? -1
        let (unauthorized, refreshes) = counts()
        print("walk \(walk)\(walk == 0 ? " (warm-up)" : ""): \(unauthorized == 1 ? "401 then " : "")\(status), refreshes \(refreshes)")
        guard status == 200, unauthorized == 1, refreshes == 1 else {
            throw Failure(description: "walk \(walk): status \(status), \(unauthorized) × 401, \(refreshes) refreshes (want 200, 1, 1)")
        }
    }
}
