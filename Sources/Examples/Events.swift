import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskResilience

extension Scenario {
    static let events = Scenario(name: "events", summary: "One log line per task event, secrets redacted: a retried 503, then a 200") {
        transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let calls = Counter()
        server.route("GET", "/report") { _ in calls.next() == 1 ? .status(503).with { $0.headers["Retry-After"] = "0" } : .text("ready") }

        let manager = URLTaskManager(
            interceptors: [HeaderInterceptor(["Authorization": "Bearer s3cr3t-token"])],
            reactors: [RetryReactor(policy: .default)]
        )
        // DocC events: begin
        let events = manager.events()  // subscribe first: a task started before this is not reported
        let lines = Task {
            var lines: [String] = []
            for await event in events {
                print("  event  │ \(event)")  // no header values, no bodies, URLs without query
                lines.append(event.description)
            }
            return lines
        }
        // DocC events: end

        let (data, _) = try await manager.session.data(from: server.url("/report?api_key=s3cr3t-key"))
        manager.finishTasksAndInvalidate()  // ends the event stream once the task is done
        let log = await lines.value
        transcript.client("GET /report → \(String(decoding: data, as: UTF8.self))")

        try transcript.check(String(decoding: data, as: UTF8.self) == "ready", "the retry did not recover")
        try transcript.check(log.contains { $0.contains("requeued as attempt 2") }, "no requeue event")
        try transcript.check(log.last?.contains("completed 200") == true, "the last event is not the completion")
        try transcript.check(!log.contains { $0.contains("s3cr3t") }, "a secret reached the log")
        transcript.conclude("\(log.count) events for one task, no secret among them")
    }
}
