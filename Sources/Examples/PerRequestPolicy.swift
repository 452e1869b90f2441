import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskResilience

extension Scenario {
    static let perRequest = Scenario(
        name: "per-request", summary: "One request skips the bearer token and the retries; the others keep both"
    ) { transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("GET", "/public/status") { request in .text(request.headers["Authorization"] == nil ? "open" : "token seen") }
        server.route("GET", "/me") { request in .text(request.headers["Authorization"] ?? "no token") }
        let manager = URLTaskManager(
            interceptors: [HeaderInterceptor(["Authorization": "Bearer app-token"])], reactors: [RetryReactor(policy: .default)])
        defer { manager.invalidateAndCancel() }

        // DocC per-request policy: begin
        var request = URLRequest(url: server.url("/public/status"))
        URLTaskPolicy(skipping: [HeaderInterceptor.self], skippingReactors: [RetryReactor.self]).apply(to: &request)
        let (open, _) = try await manager.session.data(for: request)
        // DocC per-request policy: end
        let (me, _) = try await manager.session.data(from: server.url("/me"))
        transcript.client("GET /public/status with a policy → \(String(decoding: open, as: UTF8.self))")
        transcript.client("GET /me → \(String(decoding: me, as: UTF8.self))")
        try transcript.check(String(decoding: open, as: UTF8.self) == "open", "the public request carried the token")
        try transcript.check(String(decoding: me, as: UTF8.self) == "Bearer app-token", "the other request lost its token")
        try transcript.check(server.requests.allSatisfy { $0.headers["X-URLTaskManager-Policy"] == nil }, "the policy reached the wire")
        transcript.conclude("one request without the token, the policy never on the wire")
    }

    static let validation = Scenario(
        name: "validation", summary: "A 404 becomes a typed error with its status, headers and a masked body prefix"
    ) { transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("GET", "/orders/7") { _ in
            ServerResponse(status: 404, headers: ["Content-Type": "application/json"], body: .data(Data(#"{"error":"no order 7"}"#.utf8)))
        }
        // DocC validation: begin
        let manager = URLTaskManager(options: URLTaskManager.Options(responseValidation: .successfulStatusCodes))
        var rejection: URLTaskError?
        do {
            _ = try await manager.session.data(from: server.url("/orders/7"))
        } catch let error as URLTaskError where error.code == .responseRejected {
            rejection = error  // status and headers in `response`, the body's start in `bodyPrefix`, secrets masked
        }
        // DocC validation: end
        defer { manager.invalidateAndCancel() }
        let body = String(decoding: rejection?.bodyPrefix ?? Data(), as: UTF8.self)
        transcript.client("GET /orders/7 → \(rejection.map { "\($0)" } ?? "accepted")")
        transcript.client("status \(rejection?.response?.statusCode ?? 0), body begins \(body)")
        try transcript.check(rejection?.response?.statusCode == 404, "the 404 was accepted, or the error lost its status")
        try transcript.check(body.contains("no order 7"), "the error lost the server's message")
        transcript.conclude("the server's answer judged once, as a typed error")
    }
}
