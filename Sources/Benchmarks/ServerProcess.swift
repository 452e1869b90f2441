import Foundation
import LoopbackServer

/// The benchmark's HTTP server, in a child process (this same executable, `serve`), so that the
/// client's CPU time, context switches and memory are measured without the server's.
enum ServerProcess {
    /// Runs the server until standard input closes: `Benchmarks serve` prints its port, then serves.
    static func serve() throws -> Never {
        let server = try LoopbackServer()
        server.route("GET", "/small") { _ in .text("ok") }
        // `/generated/N`: N bytes of `GeneratedBody`'s pattern, made 64 KiB at a time as they
        // are sent (the `streaming` mode's large bodies, never held by the server).
        server.route("GET", prefix: "/generated/") { request in
            guard let length = Int(request.path.dropFirst("/generated/".count)), length >= 0 else { return .text("no length", status: 400) }
            return ServerResponse(headers: ["Content-Type": "application/octet-stream"], body: .generated(length: length))
        }
        FileHandle.standardOutput.write(Data("\(server.port)\n".utf8))
        while FileHandle.standardInput.availableData.count > 0 {}
        server.shutdown()
        exit(0)
    }

    /// Starts the child and returns it with its base URL.
    static func start() throws -> (Process, URL) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = ["serve"]
        let output = Pipe()
        let input = Pipe()
        process.standardOutput = output
        process.standardInput = input
        try process.run()
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { throw URLError(.cannotConnectToHost) }
            line.append(chunk)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw URLError(.cannotConnectToHost)
        }
        // Keep `input` open: the child exits when it closes (when this process ends).
        Self.keepOpen = input
        return (process, URL(string: "http://127.0.0.1:\(port)")!)
    }

    nonisolated(unsafe) private static var keepOpen: Pipe?
}
