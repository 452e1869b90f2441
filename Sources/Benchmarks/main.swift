// The manager's cost against a plain URLSession, in one process, over loopback:
//
//     swift run -c release Benchmarks            # latency, CPU time and context switches
//     swift run -c release Benchmarks lifetime   # what a dropped session leaves behind
//     swift run -c release Benchmarks coalescing # 100 identical GETs: server hits and wall time
//     swift run -c release Benchmarks soak-refresh [REQUESTS] [IN-FLIGHT]   # tokens revoked again and again
//     swift run -c release Benchmarks hosts [HOSTS]     # per-host state of a limiter and a breaker (`hosts-row`: one row, a child)
//     swift run -c release Benchmarks soak [REQUESTS] [IN-FLIGHT]   # memory and threads over a long run, plain and kit
//     swift run -c release Benchmarks streaming [MEGABYTES]   # peak memory of a large body read as it arrives (400 MB)
//     swift run -c release Benchmarks concurrent-memory [COUNT] [KIB]   # peak memory of 1,000 whole 1 MiB bodies at once, per door
//     swift run -c release Benchmarks profile N CONCURRENCY SECONDS   # configuration N alone, for perf
//     scripts/bench-netem.sh       # over a veth pair with netem delay (1 and 20 ms round trip)
//     scripts/bench-callgrind.sh   # instructions per request under callgrind
//     scripts/walk-401.sh          # library file boundaries one 401 -> refresh -> 200 crosses (`walk-401`)
//
// The last two use the modes `serve-at ADDRESS PORT [DELAY-MS]` (a server apart from the client),
// `against URL ...` (the rounds below against that server) and `requests CONFIGURATION N URL`
// (N sequential GETs and nothing else): see AddressServer.swift and RemoteBenchmark.swift.
//
// The default run compares plain URLSession (configuration 0) and a bare forwarding URLProtocol
// (1) with the manager's session door (2 to 5) and its own `data(for:)` (11 and 12): see
// `LatencyBenchmark.names`. The server runs in a child process (`serve`), so getrusage counts
// the client alone. Each configuration runs 2,000 sequential GETs and 10 / 200 / 1,000
// concurrent GETs, in rounds that interleave the configurations so drift (CPU frequency, other
// load) spreads over all of them alike. Every figure is the median of the rounds, per request,
// and each ratio is against plain URLSession in the same run. `streaming` is described in
// StreamingBenchmark.swift. Never run by the tests.

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager

/// Runs `body` on the cooperative pool while the main thread waits, then exits (1 after an error).
///
/// Not an `async` top level: that parks the main thread in libdispatch's `dispatch_main`, whose
/// `sigsuspend` on a signal mask in read-only memory kills valgrind 3.19 (its wrapper writes to
/// the mask: "VALGRIND INTERNAL ERROR ... SIGSEGV" before the first line of ours runs), so no
/// mode could be counted under callgrind.
func run(_ body: @escaping @Sendable () async throws -> Void) -> Never {
    final class Outcome: @unchecked Sendable {  // written once before `finished` is signalled, read after
        var error: (any Error)?
    }
    let outcome = Outcome()
    let finished = DispatchSemaphore(value: 0)
    Task.detached {
        do { try await body() } catch { outcome.error = error }
        finished.signal()
    }
    finished.wait()
    if let error = outcome.error {
        FileHandle.standardError.write(Data("Benchmarks: \(error)\n".utf8))
        exit(1)
    }
    exit(0)
}

switch CommandLine.arguments.dropFirst().first {
case "serve":
    try ServerProcess.serve()
case "serve-at":
    let arguments = Array(CommandLine.arguments.dropFirst(2))
    guard (2...3).contains(arguments.count), let port = UInt16(arguments[1]),
        let delay = arguments.count == 3 ? Double(arguments[2]) : 0, delay >= 0
    else {
        throw AddressServer.Failure(description: "usage: Benchmarks serve-at IPV4-ADDRESS PORT [DELAY-MS] (port 0: any free port)")
    }
    try AddressServer.serve(address: arguments[0], port: port, delay: delay)
case "profile":
    let arguments = CommandLine.arguments.dropFirst(2).compactMap(Double.init)
    run {
        try await LatencyBenchmark.profile(
            configuration: Int(arguments.first ?? 1),
            concurrency: Int(arguments.dropFirst().first ?? 200),
            seconds: arguments.dropFirst(2).first ?? 10
        )
    }
case "against":
    let arguments = try RemoteBenchmark.Arguments(Array(CommandLine.arguments.dropFirst(2)))
    run { try await RemoteBenchmark.run(arguments) }
case "requests":
    let arguments = Array(CommandLine.arguments.dropFirst(2))
    run { try await RemoteBenchmark.requests(arguments) }
case "coalescing":
    run { try await CoalescingBenchmark.run() }
case "soak-refresh":
    let arguments = Array(CommandLine.arguments.dropFirst(2))
    run { try await SoakRefreshBenchmark.run(arguments) }
case "lifetime":
    run { try await LifetimeBenchmark.run(iterations: 10_000) }
case "soak":
    do { try SoakMemoryBenchmark.run(Array(CommandLine.arguments.dropFirst(2))) } catch {
        print("soak failed: \(error)")
        exit(1)
    }
    exit(0)
case "serve-oauth":
    try SoakMemoryBenchmark.serve()
case "soak-client":
    let arguments = Array(CommandLine.arguments.dropFirst(2))
    run { try await SoakMemoryBenchmark.client(arguments) }
case "hosts-row":
    let arguments = Array(CommandLine.arguments.dropFirst(2))
    run { try await HostsBenchmark.row(arguments) }
case "hosts":
    let arguments = Array(CommandLine.arguments.dropFirst(2))
    run { try await HostsBenchmark.run(arguments) }
case "streaming":
    let arguments = Array(CommandLine.arguments.dropFirst(2))
    run { try await StreamingBenchmark.run(arguments) }
case "concurrent-memory":
    let arguments = Array(CommandLine.arguments.dropFirst(2))
    run { try await ConcurrentMemoryBenchmark.run(arguments) }
case "concurrent-memory-row":
    let arguments = Array(CommandLine.arguments.dropFirst(2))
    run { try await ConcurrentMemoryBenchmark.row(arguments) }
case "walk-401":
    let arguments = Array(CommandLine.arguments.dropFirst(2))
    run { try await Walk401Benchmark.run(arguments) }
default:
    run { try await LatencyBenchmark.run() }
}
