// Per-host state over many hosts: `swift run -c release Benchmarks hosts [HOSTS] [MAXIMUM-HOSTS]`.
//
// A rate limiter and a circuit breaker keep state per host. This drives HOSTS (200,000 by
// default) distinct hosts through each, through their public API as the manager would call it
// (`intercept` before the request, `observe` after, then `observeEnd` where a part wants the
// task's end: a success for the limiter, a refused connection for the breaker, so every host has
// a failure on record), without the network, in two shapes: one host's task at a time, and all
// of them in flight at once (every task intercepted before any attempt ends, as a burst to many
// hosts does; a table that kept the burst's room after it ended shows there). It reads resident
// memory (after `malloc_trim`) before, after, and once the parts are released. The loop alone is measured first:
// its growth is the harness's, not the parts'. 0.2.0 kept every host forever (what this mode
// measured then and since: the Performance article, "The resilience parts"). MAXIMUM-HOSTS sets
// both parts' `maximumHosts` (default theirs, 4,096); a bound above HOSTS shows what no bound
// costs.

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import URLTaskManager
import URLTaskResilience

enum HostsBenchmark {
    /// How the hosts' tasks overlap.
    enum Shape: String, CaseIterable {
        /// Each host's task ends before the next host's begins.
        case oneAtATime = "one-at-a-time"
        /// Every host's task is intercepted, then every attempt observed, then every task ended:
        /// a burst of HOSTS requests in flight at once (what a fan-out to many hosts does).
        case allInFlight = "all-in-flight"
    }

    private static let configurations: [(name: String, make: @Sendable (Int) -> [any URLTaskInterceptor & URLTaskOutcomeObserver])] = [
        ("the loop alone", { _ in [] }),
        ("RateLimiter (10/s, burst 1)", { bound in [RateLimiter(policy: .init(rate: 10, burst: 1, maximumHosts: bound))] }),
        ("CircuitBreaker (5 in 30 s)", { bound in [CircuitBreaker(policy: .init(maximumHosts: bound))] }),
        (
            "both",
            { bound in
                [
                    RateLimiter(policy: .init(rate: 10, burst: 1, maximumHosts: bound)),
                    CircuitBreaker(policy: .init(maximumHosts: bound)),
                ]
            }
        ),
    ]

    /// The parent: one child process per shape and configuration, so that no row measures the
    /// heap another row left behind.
    static func run(_ arguments: [String]) async throws {
        let hosts = arguments.first.flatMap(Int.init) ?? 200_000
        let bound = arguments.dropFirst().first.flatMap(Int.init) ?? 4_096
        print(
            "\(hosts) distinct hosts through each part's intercept and observe (no network), maximumHosts \(bound); "
                + "resident memory after malloc_trim, each row in a process of its own; released: growth once the parts are released")
        print(
            "configuration".padding(toLength: 30, withPad: " ", startingAt: 0)
                + "shape          before     after      growth     per host   released")
        for shape in Shape.allCases {
            for index in configurations.indices {
                let (status, line) = try ChildRow.run(["hosts-row", shape.rawValue, "\(index)", "\(hosts)", "\(bound)"])
                let kib = line.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
                guard status == 0, kib.count == 3 else {
                    print("\(configurations[index].name): the child failed (\(status)): \(line)")
                    continue
                }
                let (before, after, released) = (kib[0], kib[1], kib[2])
                let growth = after - before
                print(
                    configurations[index].name.padding(toLength: 30, withPad: " ", startingAt: 0)
                        + shape.rawValue.padding(toLength: 15, withPad: " ", startingAt: 0)
                        + "\(before / 1024) MiB".padding(toLength: 11, withPad: " ", startingAt: 0)
                        + "\(after / 1024) MiB".padding(toLength: 11, withPad: " ", startingAt: 0)
                        + String(format: "%+.1f MiB", Double(growth) / 1024).padding(toLength: 11, withPad: " ", startingAt: 0)
                        + "\(growth * 1024 / max(1, hosts)) B".padding(toLength: 11, withPad: " ", startingAt: 0)
                        + String(format: "%+.1f MiB", Double(released - before) / 1024))
            }
        }
    }

    /// A child (`hosts-row SHAPE CONFIGURATION HOSTS BOUND`): drives the hosts and prints its
    /// resident KiB before, after, and once the parts are released.
    static func row(_ arguments: [String]) async throws {
        guard arguments.count == 4, let shape = Shape(rawValue: arguments[0]), let index = Int(arguments[1]),
            configurations.indices.contains(index), let hosts = Int(arguments[2]), let bound = Int(arguments[3])
        else { throw URLError(.badURL) }
        // Warm up: the runtime's and Foundation's first-use costs (type metadata, caches, the
        // allocator's arenas) are paid once per process, by other parts and other hosts, and
        // are not per-host state.
        try await driveAllInFlight(hosts: 2 * bound, through: configurations[index].make(bound), prefix: "warm")
        let before = ProcessStatus.residentKiBAfterTrim()
        var parts: [any URLTaskInterceptor & URLTaskOutcomeObserver]? = configurations[index].make(bound)
        switch shape {
        case .oneAtATime: try await driveOneAtATime(hosts: hosts, through: parts!)
        case .allInFlight: try await driveAllInFlight(hosts: hosts, through: parts!)
        }
        let after = ProcessStatus.residentKiBAfterTrim()
        parts = nil
        let released = ProcessStatus.residentKiBAfterTrim()
        print("\(before) \(after) \(released)")
        _ = parts
    }

    private static let context = InterceptContext(currentBatchCount: 0)
    private static let refused = URLTaskOutcome.failure(URLError(.cannotConnectToHost))

    private static func task(host index: Int, prefix: String = "h") -> URLTask {
        URLTask(request: URLRequest(url: URL(string: "https://\(prefix)\(index).example.com/v1/items")!))
    }

    /// A success for the limiter, a refused connection for the breaker: every host has a
    /// failure on record.
    private static func outcome(of task: URLTask, through parts: [any URLTaskInterceptor & URLTaskOutcomeObserver]) -> URLTaskOutcome {
        parts.contains { $0 is CircuitBreaker }
            ? refused : .response(HTTPURLResponse(url: task.request.url!, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: nil)!)
    }

    private static func driveOneAtATime(hosts: Int, through parts: [any URLTaskInterceptor & URLTaskOutcomeObserver]) async throws {
        for index in 0..<hosts {
            var task = task(host: index)
            for part in parts { _ = try await part.intercept(&task, context: context) }
            let outcome = outcome(of: task, through: parts)
            for part in parts {
                part.observe(outcome, of: task)
                // The manager tells the task's end to the observers that want it (the breaker
                // counts a task there).
                if part.observesEnds { part.observeEnd(of: task, error: nil) }
            }
        }
    }

    private static func driveAllInFlight(
        hosts: Int, through parts: [any URLTaskInterceptor & URLTaskOutcomeObserver], prefix: String = "h"
    ) async throws {
        var tasks: [URLTask] = []
        tasks.reserveCapacity(hosts)
        for index in 0..<hosts {
            var task = task(host: index, prefix: prefix)
            for part in parts { _ = try await part.intercept(&task, context: context) }
            tasks.append(task)
        }
        for task in tasks {
            let outcome = outcome(of: task, through: parts)
            for part in parts { part.observe(outcome, of: task) }
        }
        for task in tasks {
            for part in parts where part.observesEnds { part.observeEnd(of: task, error: nil) }
        }
    }
}
