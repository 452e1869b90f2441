import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskResilience

/// `swift run -c release Benchmarks coalescing`: 100 concurrent identical GETs of a 64 KiB answer
/// the server takes 100 ms to give, through a plain URLSession, a manager without coalescing, and
/// a manager with a ``CoalescingInterceptor``. Server hits and wall time per burst, median of the
/// rounds (which interleave the three), each ratio against plain URLSession in the same run.
enum CoalescingBenchmark {
    static func run(rounds: Int = 7, concurrency: Int = 100) async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let body = Data(repeating: 0x5A, count: 64 << 10)
        server.route("/answer") { _ in ServerResponse(body: .data(body)).with { $0.delay = .milliseconds(100) } }
        let url = server.url("/answer")

        let names = ["plain URLSession", "URLTaskManager", "URLTaskManager + CoalescingInterceptor"]
        var walls: [[Double]] = Array(repeating: [], count: names.count)
        var hits: [[Int]] = Array(repeating: [], count: names.count)
        for _ in 0..<rounds {
            for index in names.indices {
                let configuration = URLSessionConfiguration.ephemeral
                let session: URLSession
                var keep: URLTaskManager?
                switch index {
                case 0:
                    session = URLSession(configuration: configuration)
                case 1:
                    keep = URLTaskManager(configuration: configuration)
                    session = keep!.session
                default:
                    let coalescing = CoalescingInterceptor()
                    keep = URLTaskManager(interceptors: [coalescing], configuration: configuration)
                    session = keep!.session
                }
                server.resetRecords()
                let started = ContinuousClock.now
                let sizes = try await withThrowingTaskGroup(of: Int.self) { group in
                    for _ in 0..<concurrency { group.addTask { try await session.data(from: url).0.count } }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                let wall = started.duration(to: .now)
                precondition(sizes.allSatisfy { $0 == body.count }, "a caller got a partial body")
                walls[index].append(Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18)
                hits[index].append(server.requestCount(path: "/answer"))
                session.finishTasksAndInvalidate()
                _ = keep
            }
        }
        func median<T: Comparable>(_ values: [T]) -> T { values.sorted()[values.count / 2] }
        print("\(concurrency) concurrent identical GETs of a 64 KiB answer taking 100 ms, median of \(rounds) rounds")
        print("configuration".padding(toLength: 42, withPad: " ", startingAt: 0) + "server hits   wall (ms)   vs plain")
        let plain = median(walls[0])
        for index in names.indices {
            let wall = median(walls[index])
            print(
                names[index].padding(toLength: 42, withPad: " ", startingAt: 0)
                    + String(median(hits[index])).padding(toLength: 14, withPad: " ", startingAt: 0)
                    + String(format: "%-12.0f%.2fx", wall * 1_000, wall / plain))
        }
    }
}
