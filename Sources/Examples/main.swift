import Foundation

// `swift run Examples` runs every scenario; `swift run Examples <name>` runs one;
// `swift run Examples --help` lists them. Exit status 0 only if every scenario's checks held.

let scenarios: [Scenario] = [
    .quickStart,
    .puttingItTogether,
    .headerEnrichment,
    .expiredToken,
    .signInAgain,
    .signOut,
    .twoBackends,
    .batching,
    .retries,
    .familiarAPIs,
    .twoWaysIn,
    .customReactor,
    .signedBody,
    .gzipUpload,
    .events,
    .curl,
    .perRequest,
    .validation,
    .traceContext,
    .coalescing,
    .circuitBreaker,
    .rateLimit,
    .offline,
    .fleet,
]

let arguments = Array(CommandLine.arguments.dropFirst())
// The fleet scenario's child processes: this executable run again (not a scenario).
if arguments.first == "fleet-worker" {
    exit(await Scenario.runFleetWorker(Array(arguments.dropFirst())))
}
if arguments.contains("--help") || arguments.contains("-h") {
    print("usage: swift run Examples [scenario ...]\n\nScenarios:")
    for scenario in scenarios {
        print("  \(scenario.name.padding(toLength: 20, withPad: " ", startingAt: 0)) \(scenario.summary)")
    }
    exit(0)
}

let unknown = arguments.filter { name in !scenarios.contains { $0.name == name } }
if !unknown.isEmpty {
    print("unknown scenario: \(unknown.joined(separator: ", ")) (see --help)")
    exit(2)
}
let selected = arguments.isEmpty ? scenarios : scenarios.filter { arguments.contains($0.name) }

var results: [(name: String, passed: Bool, skipped: Bool, line: String)] = []
for scenario in selected {
    print("\n▶ \(scenario.name): \(scenario.summary)")
    let transcript = Transcript()
    let started = ContinuousClock.now
    do {
        try await scenario.run(transcript)
        let elapsed = started.duration(to: .now)
        results.append(
            (
                scenario.name, true, false,
                "\(transcript.summary) (\(elapsed.formatted(.units(allowed: [.seconds, .milliseconds], width: .narrow))))"
            ))
    } catch let skipped as Scenario.Skipped {
        print("  \(skipped.reason)")
        results.append((scenario.name, true, true, skipped.reason))
    } catch {
        results.append((scenario.name, false, false, "\(error)"))
    }
}

print("\nSummary")
for result in results {
    let mark = result.skipped ? "skip" : result.passed ? "ok  " : "FAIL"
    print("  \(mark) \(result.name.padding(toLength: 20, withPad: " ", startingAt: 0)) \(result.line)")
}
exit(results.allSatisfy(\.passed) ? 0 : 1)
