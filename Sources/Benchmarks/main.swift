// The manager's cost against a plain URLSession, in one process, over loopback:
//
//     swift run -c release Benchmarks            # latency, CPU time and context switches
//     swift run -c release Benchmarks lifetime   # what a dropped session leaves behind
//     swift run -c release Benchmarks coalescing # 100 identical GETs: server hits and wall time
//     swift run -c release Benchmarks profile N CONCURRENCY SECONDS   # configuration N alone, for perf
//
// The server runs in a child process (`serve`), so getrusage counts the client alone. Each
// configuration runs 2,000 sequential GETs and 10 / 200 / 1,000 concurrent GETs, in rounds that
// interleave the configurations so drift (CPU frequency, other load) spreads over all of them
// alike. Every figure is the median of the rounds, per request, and each ratio is against plain
// URLSession in the same run. Never run by the tests.

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager

switch CommandLine.arguments.dropFirst().first {
case "serve":
    try ServerProcess.serve()
case "profile":
    let arguments = CommandLine.arguments.dropFirst(2).compactMap(Double.init)
    try await LatencyBenchmark.profile(
        configuration: Int(arguments.first ?? 1),
        concurrency: Int(arguments.dropFirst().first ?? 200),
        seconds: arguments.dropFirst(2).first ?? 10
    )
    exit(0)
case "coalescing":
    try await CoalescingBenchmark.run()
    exit(0)
case "lifetime":
    try await LifetimeBenchmark.run(iterations: 10_000)
    exit(0)
default:
    try await LatencyBenchmark.run()
}
