import Foundation
import TestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One member of a fleet in a process of its own: this test binary run again with one test,
/// `FleetProcessTests/testWorker`, and the worker's settings in its environment. The parent
/// talks to it on its standard input (one command a line) and reads its answers, lines that
/// begin with `FLEET-`, from its standard output. Every wait has a deadline; a child that misses
/// one is killed and the error carries the tail of its output.
final class FleetChildProcess: @unchecked Sendable {  // `output`, `exited` are guarded by `condition`.
    let name: String
    private let process = Process()
    private let input = Pipe()
    private let condition = NSCondition()
    private var output = ""
    private var consumed = 0
    private var exited = false

    init(name: String, mode: String, environment: [String: String]) throws {
        self.name = name
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = ["URLTaskRedisTests.FleetProcessTests/testWorker"]
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            .merging([FleetWorker.modeVariable: mode, FleetWorker.nameVariable: name]) { $1 }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = input
        process.terminationHandler = { [weak self] _ in
            guard let self else { return }
            condition.lock()
            exited = true
            condition.broadcast()
            condition.unlock()
        }
        try process.runWithEverySignalUnblocked()
        let reader = pipe.fileHandleForReading
        Thread.detachNewThread { [weak self] in
            while true {
                let data = reader.availableData
                guard let self else { return }
                condition.lock()
                if data.isEmpty {
                    // End of output: the child is gone (or closed it); wake every waiter.
                    exited = exited || !process.isRunning
                    condition.broadcast()
                    condition.unlock()
                    return
                }
                output += String(decoding: data, as: UTF8.self)
                condition.broadcast()
                condition.unlock()
            }
        }
    }

    deinit { kill() }

    var pid: Int32 { process.processIdentifier }

    /// Sends one command line.
    func send(_ line: String) {
        try? input.fileHandleForWriting.write(contentsOf: Data((line + "\n").utf8))
    }

    /// The next line of the child's output that begins with `prefix` (after the last one
    /// returned), waited for at most `seconds`; kills the child and throws on the deadline or
    /// when the child ends first.
    func line(_ prefix: String, within seconds: TimeInterval) async throws -> String {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<String, any Error>) in
            // A thread of its own: the wait blocks, and the concurrency pool has only 2 threads here.
            Thread.detachNewThread { [self] in
                let deadline = Date().addingTimeInterval(seconds)
                condition.lock()
                while true {
                    if let found = nextLine(prefix) {
                        condition.unlock()
                        continuation.resume(returning: found)
                        return
                    }
                    if exited || Date() >= deadline { break }
                    _ = condition.wait(until: deadline)
                }
                let why = exited ? "ended" : "said nothing in \(Int(seconds)) s"
                condition.unlock()
                kill()
                continuation.resume(throwing: TestFailure("\(name) \(why) before a \(prefix) line; its output ends:\n\(tail)"))
            }
        }
    }

    /// Must be called with `condition` locked.
    private func nextLine(_ prefix: String) -> String? {
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        // The last piece may be a line still being written.
        for (index, line) in lines.enumerated().dropLast() where index >= consumed {
            if line.hasPrefix(prefix) {
                consumed = index + 1
                return String(line)
            }
        }
        return nil
    }

    /// The last 40 lines the child wrote.
    var tail: String {
        condition.lock()
        defer { condition.unlock() }
        return output.split(separator: "\n", omittingEmptySubsequences: false).suffix(40).joined(separator: "\n")
    }

    /// SIGKILL, and waits (at most 10 s) for the exit.
    func kill() {
        guard process.isRunning else { return }
        #if canImport(Glibc)
        Glibc.kill(process.processIdentifier, SIGKILL)
        #else
        Darwin.kill(process.processIdentifier, SIGKILL)
        #endif
        _ = waitForExit(within: 10)
    }

    /// Whether the child exited within `seconds`.
    @discardableResult
    func waitForExit(within seconds: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        condition.lock()
        defer { condition.unlock() }
        while !exited, Date() < deadline { _ = condition.wait(until: deadline) }
        return exited
    }

    /// Sends `END`, reads the `FLEET-RESULT` line and waits for the exit: the child's figures.
    func finish(within seconds: TimeInterval) async throws -> [String: Int] {
        send("END")
        let result = try await line("FLEET-RESULT", within: seconds)
        if !waitForExit(within: seconds) {
            kill()
            throw TestFailure("\(name) did not exit after its result; its output ends:\n\(tail)")
        }
        return FleetWorker.figures(result)
    }
}
