import Foundation
import LoopbackServer
import URLTaskManager

extension Scenario {
    static let batching = Scenario(name: "batching", summary: "Requests held and released together: by count, then by time window") { transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(nil, "/events") { _ in .status(204) }

        let byCount = URLTaskManager(interceptors: [BatchInterceptor(size: 5)])
        transcript.client("5 events through BatchInterceptor(size: 5)")
        try await sendEvents(5, through: byCount, to: server.url("/events"))
        let burst = server.requests(path: "/events")
        let spread = spreadInMilliseconds(burst)
        transcript.server("\(burst.count) requests arrived within \(spread) ms")
        try transcript.check(burst.count == 5, "expected 5 requests, saw \(burst.count)")

        server.resetRecords()
        let byWindow = URLTaskManager(interceptors: [BatchInterceptor(window: .milliseconds(300))])
        transcript.client("3 events through BatchInterceptor(window: 300 ms)")
        let started = ContinuousClock.now
        try await sendEvents(3, through: byWindow, to: server.url("/events"))
        let waited = started.duration(to: .now)
        let windowBurst = server.requests(path: "/events")
        transcript.server("\(windowBurst.count) requests arrived together after \(waited.formatted(.units(allowed: [.milliseconds], width: .narrow)))")
        try transcript.check(windowBurst.count == 3 && waited >= .milliseconds(280), "window batch did not wait")
        transcript.conclude("one burst of 5, one burst of 3 after the window")
    }
}

private func sendEvents(_ count: Int, through manager: URLTaskManager, to url: URL) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        for _ in 0..<count {
            group.addTask { _ = try await manager.session.data(from: url) }
        }
        try await group.waitForAll()
    }
}

private func spreadInMilliseconds(_ requests: [RecordedRequest]) -> Int {
    guard let first = requests.map(\.arrivedAt).min(), let last = requests.map(\.arrivedAt).max() else { return 0 }
    let spread = first.duration(to: last)
    return Int(spread.components.seconds * 1000 + spread.components.attoseconds / 1_000_000_000_000_000)
}
