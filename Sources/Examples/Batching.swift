import Foundation
import LoopbackServer
import URLTaskManager

extension Scenario {
    static let batching = Scenario(name: "batching", summary: "Requests held and released together: by count, then by time window") {
        transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(nil, "/events") { _ in .status(204) }
        server.route(nil, "/profile") { _ in .text("me") }

        // DocC batching: begin
        // Release analytics events 5 at a time, or 300 ms after the first one waited; other requests pass.
        let batch = BatchInterceptor(size: 5, window: .milliseconds(300)) { $0.url?.path.hasPrefix("/events") == true }
        let manager = URLTaskManager(interceptors: [batch], options: .init(maximumHoldTime: .seconds(30)))
        // DocC batching: end

        transcript.client("5 events at once: the 5th fills the batch")
        let counted = await concurrentGETs(manager.session, server.url("/events"), count: 5)
        try transcript.check(counted.allSatisfy { (try? $0.get()) == 204 }, "events failed: \(counted)")
        let burst = server.requests(path: "/events")
        transcript.server("\(burst.count) requests arrived within \(spreadInMilliseconds(burst)) ms")
        try transcript.check(burst.count == 5, "expected 5 requests, saw \(burst.count)")

        server.resetRecords()
        transcript.client("3 events, and GET /profile meanwhile")
        let started = ContinuousClock.now
        async let events = concurrentGETs(manager.session, server.url("/events"), count: 3)
        _ = try await manager.session.data(from: server.url("/profile"))
        let profileTime = started.duration(to: .now)
        let windowed = await events
        try transcript.check(windowed.allSatisfy { (try? $0.get()) == 204 }, "events failed: \(windowed)")
        let waited = started.duration(to: .now)
        let windowBurst = server.requests(path: "/events")
        transcript.server("/profile answered after \(profileTime.formatted(.units(allowed: [.milliseconds], width: .narrow))), not held")
        transcript.server(
            "\(windowBurst.count) events arrived within \(spreadInMilliseconds(windowBurst)) ms, \(waited.formatted(.units(allowed: [.milliseconds], width: .narrow))) after they started"
        )
        try transcript.check(windowBurst.count == 3 && waited >= .milliseconds(280), "the window batch did not wait")
        try transcript.check(profileTime < .milliseconds(250), "/profile was held")
        transcript.conclude("one burst of 5 at once, one burst of 3 after the window; other requests not held")
    }
}

private func spreadInMilliseconds(_ requests: [RecordedRequest]) -> Int {
    guard let first = requests.map(\.arrivedAt).min(), let last = requests.map(\.arrivedAt).max() else { return 0 }
    let spread = first.duration(to: last)
    return Int(spread.components.seconds * 1000 + spread.components.attoseconds / 1_000_000_000_000_000)
}
