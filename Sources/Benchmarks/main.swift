// Latency of URLTaskManager against a plain URLSession, over one loopback server.
//
//     swift run -c release Benchmarks
//
// Sequential: 1,000 small GETs one after another, per configuration, in interleaved blocks so
// that drift (CPU frequency, other load) spreads over every configuration alike. Concurrent:
// 100 GETs started together; the wall time until the last completes, median of several runs.
// Never run by the tests. `swift run -c release Benchmarks lifetime` measures instead what a
// dropped session leaves behind (Lifetime.swift).

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager

struct Configuration {
    let name: String
    let session: URLSession
}

func percentile(_ sorted: [Duration], _ p: Double) -> Duration {
    sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))]
}

func milliseconds(_ duration: Duration) -> Double {
    let (seconds, attoseconds) = duration.components
    return Double(seconds) * 1_000 + Double(attoseconds) / 1e15
}

func get(_ session: URLSession, _ request: URLRequest) async throws {
    let (_, response) = try await session.data(for: request)
    guard (response as? HTTPURLResponse)?.statusCode == 200 else {
        throw URLError(.badServerResponse)
    }
}

/// Sends `count` GETs one after another; returns each one's latency.
func sequential(_ session: URLSession, _ request: URLRequest, count: Int) async throws -> [Duration] {
    let clock = ContinuousClock()
    var samples: [Duration] = []
    samples.reserveCapacity(count)
    for _ in 0..<count {
        samples.append(try await clock.measure { try await get(session, request) })
    }
    return samples
}

/// Starts `count` GETs together; returns the time until the last one completed.
func concurrent(_ session: URLSession, _ request: URLRequest, count: Int) async throws -> Duration {
    try await ContinuousClock().measure {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<count {
                group.addTask { try await get(session, request) }
            }
            try await group.waitForAll()
        }
    }
}

if CommandLine.arguments.dropFirst().first == "lifetime" {
    try await LifetimeBenchmark.run(iterations: 10_000)
    exit(0)
}

let server = try LoopbackServer()
server.route("GET", "/small") { _ in .text("ok") }
let request = URLRequest(url: server.url("/small"))

let plain = URLSession(configuration: .default)
let bare = URLTaskManager()
let headers = URLTaskManager(interceptors: (1...5).map { HeaderInterceptor(["X-Bench-\($0)": "value-\($0)"]) })
// The OAuth2 kit with a valid token: a bearer header on every request, and a refresh reactor
// that holds new tasks, so the manager also keeps the per-host send queue.
let authenticator = OAuth2Authenticator(
    origins: [server.baseURL],
    store: InMemoryCredentialStore(OAuth2Credential(accessToken: "bench", refreshToken: "r", expiresAt: .distantFuture)),
    refresh: { _ in fatalError("the benchmark's token never needs a refresh") }
)
let oauth = URLTaskManager(
    interceptors: [BearerInterceptor(authenticator: authenticator)],
    reactors: [OAuth2RefreshReactor(authenticator: authenticator)]
)
let sequentialConfigurations = [
    Configuration(name: "plain URLSession", session: plain),
    Configuration(name: "manager, no interceptors", session: bare.session),
    Configuration(name: "manager, 5 HeaderInterceptors", session: headers.session),
    Configuration(name: "manager, OAuth2 bearer + refresh", session: oauth.session),
]
let concurrentConfigurations = [sequentialConfigurations[0], sequentialConfigurations[1], sequentialConfigurations[3]]

let sequentialCount = 1_000
let blocks = 10
let concurrentCount = 100
let concurrentRuns = 9

// Warm up: connections, caches, lazy initialisation.
for configuration in sequentialConfigurations {
    _ = try await sequential(configuration.session, request, count: 100)
    _ = try await concurrent(configuration.session, request, count: concurrentCount)
}
guard server.requests(path: "/small").contains(where: { $0.headers["X-Bench-5"] == "value-5" }),
      server.requests(path: "/small").contains(where: { $0.headers["authorization"] == "Bearer bench" }) else {
    fatalError("the interceptors' headers did not reach the server")
}
server.resetRecords()

var latencies = Array(repeating: [Duration](), count: sequentialConfigurations.count)
for _ in 0..<blocks {
    for (index, configuration) in sequentialConfigurations.enumerated() {
        latencies[index] += try await sequential(configuration.session, request, count: sequentialCount / blocks)
    }
}
var walls = Array(repeating: [Duration](), count: concurrentConfigurations.count)
for _ in 0..<concurrentRuns {
    for (index, configuration) in concurrentConfigurations.enumerated() {
        walls[index].append(try await concurrent(configuration.session, request, count: concurrentCount))
    }
}
let expected = sequentialCount * sequentialConfigurations.count + concurrentCount * concurrentRuns * concurrentConfigurations.count
guard server.requestCount(path: "/small") == expected else {
    fatalError("the server saw \(server.requestCount(path: "/small")) requests, expected \(expected)")
}

// MARK: Report

func cell(_ text: String, _ width: Int, left: Bool = false) -> String {
    let pad = String(repeating: " ", count: max(0, width - text.count))
    return left ? text + pad : pad + text
}

func format(_ value: Double, _ digits: Int = 3) -> String { String(format: "%.\(digits)f", value) }

let nameWidth = 2 + sequentialConfigurations.map { "\(sequentialCount) sequential GETs, \($0.name)".count }.max()!
print("URLTaskManager benchmarks: \(ProcessInfo.processInfo.activeProcessorCount) cores, loopback server, tiny GET (200, 2-byte body)")
print("")
print(cell("", nameWidth, left: true) + cell("median", 10) + cell("p90", 10) + cell("ratio (median)", 16) + cell("ratio (p90)", 13))
let plainSorted = latencies[0].sorted()
for (index, configuration) in sequentialConfigurations.enumerated() {
    let sorted = latencies[index].sorted()
    let median = percentile(sorted, 0.5)
    let p90 = percentile(sorted, 0.9)
    print(cell("\(sequentialCount) sequential GETs, \(configuration.name)", nameWidth, left: true)
          + cell(format(milliseconds(median)) + " ms", 10)
          + cell(format(milliseconds(p90)) + " ms", 10)
          + cell(format(milliseconds(median) / milliseconds(percentile(plainSorted, 0.5)), 2) + "x", 16)
          + cell(format(milliseconds(p90) / milliseconds(percentile(plainSorted, 0.9)), 2) + "x", 13))
}
print("")
print(cell("", nameWidth, left: true) + cell("wall (median of \(concurrentRuns))", 22) + cell("min", 10) + cell("ratio", 10))
let plainWall = walls[0].sorted()
for (index, configuration) in concurrentConfigurations.enumerated() {
    let sorted = walls[index].sorted()
    print(cell("\(concurrentCount) concurrent GETs, \(configuration.name)", nameWidth, left: true)
          + cell(format(milliseconds(percentile(sorted, 0.5)), 1) + " ms", 22)
          + cell(format(milliseconds(sorted[0]), 1) + " ms", 10)
          + cell(format(milliseconds(percentile(sorted, 0.5)) / milliseconds(percentile(plainWall, 0.5)), 2) + "x", 10))
}

bare.invalidateAndCancel()
headers.invalidateAndCancel()
oauth.invalidateAndCancel()
plain.invalidateAndCancel()
server.shutdown()
