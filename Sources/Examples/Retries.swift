import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskResilience

extension Scenario {
    static let retries = Scenario(name: "retries", summary: "A flaky endpoint answers 503 with Retry-After; GET is retried, POST is not") {
        transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let flaky = Counter()
        server.route(nil, "/flaky") { _ in
            flaky.next() == 1 ? .status(503).with { $0.headers["Retry-After"] = "1" } : .text("recovered")
        }
        server.route("POST", "/orders") { _ in .status(503) }

        // DocC retries: begin
        let manager = URLTaskManager(reactors: [RetryReactor(policy: .default)])
        // DocC retries: end

        let started = ContinuousClock.now
        let (data, _) = try await manager.session.data(from: server.url("/flaky"))
        let waited = started.duration(to: .now)
        transcript.client(
            "GET /flaky → \(String(decoding: data, as: UTF8.self)) after \(waited.formatted(.units(allowed: [.milliseconds], width: .narrow)))"
        )
        transcript.server("/flaky answered \(server.requestCount(path: "/flaky")) times (503 with Retry-After: 1, then 200)")

        var order = URLRequest(url: server.url("/orders"))
        order.httpMethod = "POST"
        let (_, orderResponse) = try await manager.session.data(for: order)
        let status = (orderResponse as? HTTPURLResponse)?.statusCode ?? 0
        transcript.client("POST /orders → \(status), not retried (POST is not idempotent)")
        transcript.server("/orders answered \(server.requestCount(path: "/orders")) time(s)")

        try transcript.check(String(decoding: data, as: UTF8.self) == "recovered", "GET did not recover")
        try transcript.check(waited >= .milliseconds(900), "Retry-After was not honoured (\(waited))")
        try transcript.check(server.requestCount(path: "/orders") == 1 && status == 503, "POST was retried")
        transcript.conclude("GET recovered after Retry-After, POST sent once")
    }
}
