// Per-host state over many hosts: `swift run -c release Benchmarks hosts [HOSTS] [MAXIMUM-HOSTS]`.
//
// A rate limiter and a circuit breaker keep state per host. This drives HOSTS (200,000 by
// default) distinct hosts through each, through their public API as the manager would call it
// (`intercept` before the request, `observe` after, then `observeEnd` where a part wants the
// task's end: a success for the limiter, a refused connection for the breaker, so every host has
// a failure on record), without the network, and
// reads resident memory (after `malloc_trim`) before and after. The loop alone is measured first:
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
    static func run(_ arguments: [String]) async throws {
        let hosts = arguments.first.flatMap(Int.init) ?? 200_000
        let bound = arguments.dropFirst().first.flatMap(Int.init) ?? 4_096
        print(
            "\(hosts) distinct hosts through each part's intercept and observe (no network), maximumHosts \(bound); "
                + "resident memory after malloc_trim")
        print("configuration".padding(toLength: 34, withPad: " ", startingAt: 0) + "before     after      growth     per host")
        let configurations: [(name: String, make: () -> [any URLTaskInterceptor & URLTaskOutcomeObserver])] = [
            ("the loop alone", { [] }),
            ("RateLimiter (10/s, burst 1)", { [RateLimiter(policy: .init(rate: 10, burst: 1, maximumHosts: bound))] }),
            ("CircuitBreaker (5 in 30 s)", { [CircuitBreaker(policy: .init(maximumHosts: bound))] }),
            (
                "both",
                {
                    [
                        RateLimiter(policy: .init(rate: 10, burst: 1, maximumHosts: bound)),
                        CircuitBreaker(policy: .init(maximumHosts: bound)),
                    ]
                }
            ),
        ]
        for configuration in configurations {
            let before = ProcessStatus.residentKiBAfterTrim()
            var parts: [any URLTaskInterceptor & URLTaskOutcomeObserver]? = configuration.make()
            try await drive(hosts: hosts, through: parts!)
            let after = ProcessStatus.residentKiBAfterTrim()
            parts = nil
            let growth = after - before
            print(
                configuration.name.padding(toLength: 34, withPad: " ", startingAt: 0)
                    + "\(before / 1024) MiB".padding(toLength: 11, withPad: " ", startingAt: 0)
                    + "\(after / 1024) MiB".padding(toLength: 11, withPad: " ", startingAt: 0)
                    + String(format: "%+.1f MiB", Double(growth) / 1024).padding(toLength: 11, withPad: " ", startingAt: 0)
                    + "\(growth * 1024 / max(1, hosts)) B")
            _ = parts
        }
    }

    private static func drive(hosts: Int, through parts: [any URLTaskInterceptor & URLTaskOutcomeObserver]) async throws {
        let context = InterceptContext(currentBatchCount: 0)
        let refused = URLTaskOutcome.failure(URLError(.cannotConnectToHost))
        for index in 0..<hosts {
            let url = URL(string: "https://h\(index).example.com/v1/items")!
            var task = URLTask(request: URLRequest(url: url))
            for part in parts { _ = try await part.intercept(&task, context: context) }
            let outcome =
                parts.contains { $0 is CircuitBreaker }
                ? refused : .response(HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: nil)!)
            for part in parts {
                part.observe(outcome, of: task)
                // The manager tells the task's end to the observers that want it (the breaker
                // counts a task there).
                if part.observesEnds { part.observeEnd(of: task, error: nil) }
            }
        }
    }
}
