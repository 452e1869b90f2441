import Foundation
import LoopbackServer
import URLTaskManager

extension Scenario {
    static let headerEnrichment = Scenario(name: "headers", summary: "Interceptors add a user agent, a request id and Authorization") {
        transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(nil, "/echo") { request in
            let seen = ["user-agent", "x-request-id", "authorization"].map { "\($0)=\(request.headers[$0] ?? "-")" }
            return .text(seen.joined(separator: " "))
        }

        let tokens = TokenBox(access: "user-token")
        // DocC interceptors: begin
        let manager = URLTaskManager(interceptors: [
            HeaderInterceptor([
                "User-Agent": .fixed("ExampleApp/1.0"),
                "Authorization": .computed { _ in "Bearer \(await tokens.access)" },
            ]),
            RequestID(),
        ])
        // DocC interceptors: end

        for _ in 1...2 {
            let (data, _) = try await manager.session.data(from: server.url("/echo"))
            transcript.server(String(decoding: data, as: UTF8.self))
        }
        let ids = server.requests(path: "/echo").compactMap { $0.headers["x-request-id"] }
        try transcript.check(ids.count == 2 && Set(ids).count == 2, "request ids were \(ids)")
        try transcript.check(
            server.requests(path: "/echo").allSatisfy { $0.headers["authorization"] == "Bearer user-token" }, "Authorization missing")

        // The first request waits for the version on the async path, the second reads it inline.
        server.route(nil, "/version") { _ in .text("ok") }
        let versioned = URLTaskManager(interceptors: [APIVersionHeader(version: APIVersion())])
        defer { versioned.invalidateAndCancel() }
        for _ in 1...2 { _ = try await versioned.session.data(from: server.url("/version")) }
        let versions = server.requests(path: "/version").map { $0.headers["x-api-version"] }
        try transcript.check(versions == ["2026-11", "2026-11"], "API versions were \(versions)")
        transcript.conclude("2 requests, each with its own request id")
    }
}

// DocC interceptors: begin
struct RequestID: URLTaskInterceptor {
    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        task.request.setValue("req-\(task.id)", forHTTPHeaderField: "X-Request-ID")
        return .execute
    }
}
// DocC interceptors: end

// DocC synchronous interceptor: begin
/// Sends the API version without a Swift task once it is known; the requests before that
/// wait for it on the async path.
struct APIVersionHeader: SynchronousInterceptor {
    let version: APIVersion

    func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand? {
        guard let known = version.known else { return nil }  // not known yet: `intercept` below
        task.request.setValue(known, forHTTPHeaderField: "X-API-Version")
        return .execute
    }

    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        task.request.setValue(await version.load(), forHTTPHeaderField: "X-API-Version")
        return .execute
    }
}
// DocC synchronous interceptor: end

/// The API version the app speaks, looked up once (here a constant; in an app, a configuration
/// endpoint or a file).
// @unchecked Sendable: `value` is guarded by `lock`.
final class APIVersion: @unchecked Sendable {
    private let lock = NSLock()
    private var value: String?

    /// The version once loaded: read under a lock, never awaited.
    var known: String? { lock.withLock { value } }

    /// Looks the version up and keeps it.
    func load() async -> String {
        let loaded = "2026-11"
        lock.withLock { value = loaded }
        return loaded
    }
}
