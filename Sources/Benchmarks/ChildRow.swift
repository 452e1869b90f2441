import Foundation

/// This executable run again as a child for one row of a table: the per-row benchmarks (`hosts`,
/// `concurrent-memory`) give each row a process of its own, so that no row measures the heap
/// another row left behind.
enum ChildRow {
    /// Runs the child with `arguments` to its end: its exit status and what it printed.
    static func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, text)
    }
}
