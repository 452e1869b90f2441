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
