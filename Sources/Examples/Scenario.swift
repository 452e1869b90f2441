import Foundation

/// One live demonstration: it starts its own loopback server, drives the library, prints a
/// short transcript and checks that the outcome is the expected one.
struct Scenario: Sendable {
    let name: String
    let summary: String
    let run: @Sendable (Transcript) async throws -> Void

    /// Thrown by a scenario that cannot run here (a tool it needs is not installed): the
    /// scenario is reported as skipped, with `reason`, and does not fail the run.
    struct Skipped: Error, CustomStringConvertible {
        let reason: String
        var description: String { reason }
    }
}

/// What a scenario prints, and its checks. A failed check ends the scenario as failed.
final class Transcript: @unchecked Sendable {  // `summary` and printing are guarded by `lock`.
    struct CheckFailed: Error, CustomStringConvertible {
        let description: String
    }

    private let lock = NSLock()
    private(set) var summary = ""

    func client(_ line: String) { emit("client", line) }
    func server(_ line: String) { emit("server", line) }
    func note(_ line: String) { emit("", line) }

    /// Records the one-line result shown in the final table.
    func conclude(_ line: String) {
        lock.withLock { summary = line }
    }

    func check(_ condition: Bool, _ message: @autoclosure () -> String) throws {
        guard condition else { throw CheckFailed(description: message()) }
    }

    private func emit(_ side: String, _ line: String) {
        let label = side.padding(toLength: 6, withPad: " ", startingAt: 0)
        lock.withLock { print("  \(label) │ \(line)") }
    }
}
