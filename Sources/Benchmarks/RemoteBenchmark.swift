// The modes that take a server started elsewhere (`serve-at`), so the client can run in another
// network namespace (`scripts/bench-netem.sh`) or under valgrind (`scripts/bench-callgrind.sh`):
//
//     Benchmarks against URL [--title TEXT] [--rounds R] [--sequential N] [--concurrent C]... [--batches B]
//                            [--configurations 0,1,2,5]
//     Benchmarks requests CONFIGURATION N URL [CONCURRENCY]

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

enum RemoteBenchmark {
    struct Arguments {
        var base: URL
        var title = "server at the URL given"
        var rounds = 3
        var sequential = 200
        var concurrency: [Int] = [10]
        /// How many groups of concurrent GETs, one after the other, make one round's figure.
        var batches = 1
        var configurations = [0, 1, 2, 5]

        init(_ arguments: [String]) throws {
            guard let first = arguments.first, let url = URL(string: first), url.host != nil else {
                throw AddressServer.Failure(
                    description:
                        "usage: Benchmarks against URL [--title TEXT] [--rounds R] [--sequential N] [--concurrent C]... [--batches B] [--configurations 0,1,2,5]"
                )
            }
            base = url
            var concurrencyGiven: [Int] = []
            var rest = arguments.dropFirst()
            while let option = rest.popFirst() {
                guard let value = rest.popFirst() else { throw AddressServer.Failure(description: "\(option) needs a value") }
                func number() throws -> Int {
                    guard let number = Int(value), number >= 0 else {
                        throw AddressServer.Failure(description: "\(option): not a count: \(value)")
                    }
                    return number
                }
                switch option {
                case "--title": title = value
                case "--rounds": rounds = max(1, try number())
                case "--sequential": sequential = try number()
                case "--concurrent": concurrencyGiven.append(try number())
                case "--batches": batches = max(1, try number())
                case "--configurations":
                    configurations = value.split(separator: ",").compactMap { Int($0) }.filter {
                        LatencyBenchmark.names.indices.contains($0)
                    }
                    if !configurations.contains(0) { configurations.insert(0, at: 0) }  // the ratios need plain
                default: throw AddressServer.Failure(description: "unknown option \(option)")
                }
            }
            if !concurrencyGiven.isEmpty { concurrency = concurrencyGiven.filter { $0 > 0 } }
        }
    }

    /// Interleaved rounds of the chosen configurations against `base/small`, as `LatencyBenchmark`
    /// does over loopback, with counts small enough for a network with delay.
    /// `others` come after the chosen configurations: ways of sending a GET built outside this
    /// package, compared in the same rounds (how the README's Alamofire rows were measured).
    static func run(_ arguments: Arguments, others: [LatencyBenchmark.Configuration] = []) async throws {
        let url = arguments.base.appendingPathComponent("small")
        let configurations = LatencyBenchmark.makeConfigurations(base: arguments.base, indices: arguments.configurations) + others
        defer { for configuration in configurations { configuration.invalidate() } }

        // Warm up: connections, caches, lazy initialisation.
        for configuration in configurations {
            try await LatencyBenchmark.sequential(configuration, url, count: 20)
            for count in arguments.concurrency { try await LatencyBenchmark.concurrent(configuration, url, count: count) }
        }

        let perRound = max(1, arguments.sequential / arguments.rounds)
        var sequentialRounds = Array(repeating: [PerRequest](), count: configurations.count)
        var concurrentRounds = Array(
            repeating: Array(repeating: [PerRequest](), count: configurations.count), count: arguments.concurrency.count)
        for _ in 0..<arguments.rounds {
            if arguments.sequential > 0 {
                for (index, configuration) in configurations.enumerated() {
                    let start = Usage.now
                    try await LatencyBenchmark.sequential(configuration, url, count: perRound)
                    sequentialRounds[index].append(Usage.perRequest(since: start, requests: perRound))
                }
            }
            for (level, count) in arguments.concurrency.enumerated() {
                for (index, configuration) in configurations.enumerated() {
                    let start = Usage.now
                    for _ in 0..<arguments.batches { try await LatencyBenchmark.concurrent(configuration, url, count: count) }
                    concurrentRounds[level][index].append(Usage.perRequest(since: start, requests: count * arguments.batches))
                }
            }
        }

        print("URLTaskManager benchmarks: \(ProcessInfo.processInfo.activeProcessorCount) cores, \(arguments.title), GET of a 2-byte body")
        print("medians of \(arguments.rounds) interleaved rounds, per request; ratio = configuration / plain URLSession in this run\n")
        if arguments.sequential > 0 {
            LatencyBenchmark.report("\(perRound * arguments.rounds) sequential GETs", configurations, sequentialRounds)
        }
        for (level, count) in arguments.concurrency.enumerated() {
            let title = arguments.batches == 1 ? "\(count) concurrent GETs" : "\(count) concurrent GETs, \(arguments.batches) times a round"
            LatencyBenchmark.report(title, configurations, concurrentRounds[level])
        }
    }

    /// `requests CONFIGURATION N URL [CONCURRENCY]`: `N` GETs of `URL/small` through
    /// configuration `CONFIGURATION` (an index of `LatencyBenchmark.names`), one after the other
    /// or in groups of `CONCURRENCY` at once, and nothing else: no child process, no timing.
    /// What `scripts/bench-callgrind.sh` counts the instructions of; two counts of the same
    /// configuration differ by the cost of the requests in between.
    static func requests(_ arguments: [String]) async throws {
        guard (3...4).contains(arguments.count), let index = Int(arguments[0]), LatencyBenchmark.names.indices.contains(index),
            let count = Int(arguments[1]), count >= 0, let base = URL(string: arguments[2]), base.host != nil,
            let concurrency = arguments.count == 4 ? Int(arguments[3]) : 1, concurrency >= 1
        else {
            let names = LatencyBenchmark.names.enumerated().map { "\($0.offset) \($0.element.trimmingCharacters(in: .whitespaces))" }
            throw AddressServer.Failure(
                description: "usage: Benchmarks requests CONFIGURATION N URL [CONCURRENCY]; configurations: "
                    + names.joined(separator: ", "))
        }
        let configuration = LatencyBenchmark.makeConfiguration(index, base: base)
        let url = base.appendingPathComponent("small")
        if concurrency == 1 {
            try await LatencyBenchmark.sequential(configuration, url, count: count)
        } else {
            var left = count
            while left > 0 {
                try await LatencyBenchmark.concurrent(configuration, url, count: min(concurrency, left))
                left -= concurrency
            }
        }
        print("\(LatencyBenchmark.names[index].trimmingCharacters(in: .whitespaces)): \(count) GETs")
    }
}
