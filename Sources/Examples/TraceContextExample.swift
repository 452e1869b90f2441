import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskResilience

extension Scenario {
    static let traceContext = Scenario(
        name: "trace-context",
        summary: "traceparent on every request: a retry keeps its trace with a new span; a caller's trace continues with its tracestate"
    ) { transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let calls = Counter()
        server.route("GET", "/report") { request in
            transcript.server("GET /report traceparent: \(request.headers["traceparent"] ?? "-")")
            return calls.next() == 1 ? .status(503).with { $0.headers["Retry-After"] = "0" } : .text("ready")
        }
        server.route("GET", "/orders") { request in
            transcript.server(
                "GET /orders traceparent: \(request.headers["traceparent"] ?? "-") tracestate: \(request.headers["tracestate"] ?? "-")")
            return .text("orders")
        }

        // DocC trace-interceptor: begin
        let manager = URLTaskManager(interceptors: [TraceContextInterceptor()], reactors: [RetryReactor()])
        let events = manager.events()
        let traceparents = Task {
            var sent: [String] = []
            for await event in events {
                if case .annotated("traceparent", let value) = event.kind { sent.append(value) }  // the trace id, in your logs
            }
            return sent
        }
        // DocC trace-interceptor: end

        _ = try await manager.session.data(from: server.url("/report"))

        // DocC trace-task-local: begin
        // A server continuing the trace its own caller sent: the incoming headers, as a context.
        let incoming = TraceContext(
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tracestate: "rojo=00f067aa0ba902b7")
        try await TraceContext.$current.withValue(incoming) {
            var request = URLRequest(url: server.url("/orders"))
            TraceContext.setTraceContext(on: &request)  // reads TraceContext.current here, in the caller's task
            _ = try await manager.session.data(for: request)
        }
        // DocC trace-task-local: end

        manager.finishTasksAndInvalidate()
        let sent = await traceparents.value
        let report = server.requests(path: "/report").compactMap { $0.headers["traceparent"].flatMap { TraceContext(traceparent: $0) } }
        let orders = server.requests(path: "/orders").compactMap { request in
            request.headers["traceparent"].flatMap { TraceContext(traceparent: $0, tracestate: request.headers["tracestate"]) }
        }
        try transcript.check(report.count == 2 && report[0].traceID == report[1].traceID, "the retry left the trace")
        try transcript.check(report[0].spanID != report[1].spanID, "the retry reused its span id")
        try transcript.check(
            orders.count == 1 && orders[0].traceID == incoming?.traceID && orders[0].spanID != incoming?.spanID
                && orders[0].traceState == "rojo=00f067aa0ba902b7",
            "the caller's trace was not continued")
        try transcript.check(sent == (report + orders).map(\.traceparent), "the events do not name every traceparent sent")
        transcript.conclude("3 requests, 2 traces, every traceparent valid and in the events")
    }
}
