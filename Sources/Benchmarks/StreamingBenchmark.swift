// Memory of a large body read as it arrives: `swift run -c release Benchmarks streaming [MEGABYTES]`.
//
// One GET of MEGABYTES MB (default 400; MB = 2^20 bytes here) of `GeneratedBody`'s pattern from
// the server in a child process (`serve`, route `/generated/N`), read four ways:
//
//     plain URLSession, data delegate   each piece consumed in `urlSession(_:dataTask:didReceive:)`
//     manager.session, data delegate    the same delegate through the session door
//     manager.bytes(for:), .chunks      the same per-piece work on `AsyncBytes.chunks`
//     manager.bytes(for:), byte by byte `for try await byte in bytes`, each byte summed
//
// "Consumed" is counting the bytes and summing them (cheap, but every byte is read); each run
// checks the count and the sum against the pattern's. Before each run freed memory goes back to
// the system (`malloc_trim`) and the peak resident set is reset (writing "5" to
// `/proc/self/clear_refs`); the run's growth is `VmHWM` at its end minus `VmRSS` at its start.
// Every way first runs once on a smaller body (connections, lazy initialisation, the byte
// stream's spill file), then 3 rounds interleave the four; the figures are the medians of the
// rounds, and "- plain" is a way's median growth minus plain URLSession's. All sessions have no
// URL cache (a cache would keep the body). Linux only (`/proc`); never run by the tests.

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager

enum StreamingBenchmark {
    static let rounds = 3

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// What a reader saw of a body: how many bytes, and their sum (wrapping).
    struct Tally: Equatable, Sendable {
        var count = 0
        var sum: UInt64 = 0

        /// Counts and sums one piece, every byte read.
        mutating func add(_ piece: UnsafeRawBufferPointer) {
            count += piece.count
            var sum = self.sum
            for byte in piece { sum &+= UInt64(byte) }
            self.sum = sum
        }

        mutating func add(_ piece: Data) {
            piece.withUnsafeBytes { add($0) }
        }

        /// What a reader must see of the first `length` bytes of `GeneratedBody`'s pattern.
        static func expected(length: Int) -> Tally {
            var tally = Tally()
            GeneratedBody.forEachPiece(length: length, pieceSize: 1 << 20) { tally.add($0) }
            return tally
        }
    }

    /// One way of reading a body: `read` returns what it saw of the body at a URL.
    struct Way: Sendable {
        let name: String
        let read: @Sendable (URL) async throws -> Tally
        let invalidate: @Sendable () -> Void
    }

    /// One run's figures.
    struct Measurement {
        var growthKiB: Int
        var seconds: Double
    }

    static func run(_ arguments: [String]) async throws {
        guard arguments.count <= 1, let megabytes = arguments.isEmpty ? 400 : Int(arguments[0]), megabytes > 0 else {
            throw Failure(description: "usage: Benchmarks streaming [MEGABYTES]")
        }
        guard ProcessStatus.resetPeak(), ProcessStatus.peakKiB != nil else {
            throw Failure(description: "streaming: cannot reset the peak resident set (/proc/self/clear_refs, VmHWM)")
        }
        let (server, base) = try ServerProcess.start()
        defer { server.terminate() }
        let length = megabytes << 20
        let warmUpLength = min(length, 16 << 20)
        let url = base.appendingPathComponent("generated/\(length)")
        let expected = Tally.expected(length: length)
        let ways = makeWays()
        defer { for way in ways { way.invalidate() } }

        for way in ways {
            _ = try await measure(way, base.appendingPathComponent("generated/\(warmUpLength)"), expected: .expected(length: warmUpLength))
        }
        var measurements = Array(repeating: [Measurement](), count: ways.count)
        for _ in 0..<rounds {
            for (index, way) in ways.enumerated() {
                measurements[index].append(try await measure(way, url, expected: expected))
            }
        }

        print(
            "URLTaskManager streaming: \(ProcessInfo.processInfo.activeProcessorCount) cores, server in a child process on 127.0.0.1, "
                + "GET of a \(megabytes) MB body (MB = 2^20 bytes)")
        print("peak resident set growth over one run (VmHWM at its end - VmRSS at its start); medians of \(rounds) interleaved rounds\n")
        report(ways, measurements, megabytes: megabytes)
    }

    /// Resets the peak, reads `url` the way `way` does and checks what it read.
    static func measure(_ way: Way, _ url: URL, expected: Tally) async throws -> Measurement {
        guard ProcessStatus.resetPeak(), let start = ProcessStatus.field("VmRSS") else {
            throw Failure(description: "streaming: cannot reset the peak resident set")
        }
        let clock = ContinuousClock()
        let began = clock.now
        let tally = try await way.read(url)
        let elapsed = began.duration(to: clock.now)
        guard let peak = ProcessStatus.peakKiB else { throw Failure(description: "streaming: no VmHWM") }
        guard tally == expected else {
            throw Failure(
                description:
                    "\(way.name): read \(tally.count) bytes summing to \(tally.sum), expected \(expected.count) summing to \(expected.sum)")
        }
        let (seconds, attoseconds) = elapsed.components
        return Measurement(growthKiB: peak - start, seconds: Double(seconds) + Double(attoseconds) / 1e18)
    }

    /// Plain URLSession and the manager's two doors, each with a session or manager of its own.
    static func makeWays() -> [Way] {
        let plainDelegate = ConsumingDelegate()
        let plain = URLSession(configuration: configuration(), delegate: plainDelegate, delegateQueue: nil)
        let doorDelegate = ConsumingDelegate()
        let door = URLTaskManager(configuration: configuration(), delegate: doorDelegate)
        let chunked = URLTaskManager(configuration: configuration())
        let bytewise = URLTaskManager(configuration: configuration())
        return [
            Way(
                name: "plain URLSession, data delegate", read: { try await plainDelegate.read($0, on: plain) },
                invalidate: { plain.finishTasksAndInvalidate() }),
            Way(
                name: "manager.session, data delegate", read: { try await doorDelegate.read($0, on: door.session) },
                invalidate: { door.finishTasksAndInvalidate() }),
            Way(
                name: "manager.bytes(for:), .chunks",
                read: { url in
                    let (bytes, response) = try await chunked.bytes(for: URLRequest(url: url))
                    try checkStatus(response)
                    var tally = Tally()
                    for try await piece in bytes.chunks { tally.add(piece) }
                    return tally
                }, invalidate: { chunked.finishTasksAndInvalidate() }),
            Way(
                name: "manager.bytes(for:), byte by byte",
                read: { url in
                    let (bytes, response) = try await bytewise.bytes(for: URLRequest(url: url))
                    try checkStatus(response)
                    var count = 0
                    var sum: UInt64 = 0
                    for try await byte in bytes {
                        count += 1
                        sum &+= UInt64(byte)
                    }
                    return Tally(count: count, sum: sum)
                }, invalidate: { bytewise.finishTasksAndInvalidate() }),
        ]
    }

    /// The default configuration without a URL cache, which would keep the body.
    static func configuration() -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        return configuration
    }

    static func checkStatus(_ response: URLResponse?) throws {
        guard let status = (response as? HTTPURLResponse)?.statusCode, status == 200 else {
            throw Failure(description: "streaming: the server answered \(String(describing: response))")
        }
    }

    static func report(_ ways: [Way], _ measurements: [[Measurement]], megabytes: Int) {
        func cell(_ text: String, _ width: Int, left: Bool = false) -> String {
            let pad = String(repeating: " ", count: max(0, width - text.count))
            return left ? text + pad : pad + text
        }
        func median(_ values: [Double]) -> Double {
            let sorted = values.sorted()
            return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
        }
        func megabytesText(_ kib: Double) -> String { String(format: "%.1f", kib / 1024) }
        let growths = measurements.map { median($0.map { Double($0.growthKiB) }) }
        let plainGrowth = growths[0]
        print(
            cell("", 36, left: true) + cell("growth MB", 11) + cell("- plain", 9) + cell("wall s", 8) + cell("MB/s", 7)
                + cell("growth MB by round", 22) + cell("wall s by round", 20))
        for (index, way) in ways.enumerated() {
            let seconds = median(measurements[index].map(\.seconds))
            let rounds = measurements[index]
            print(
                cell("  " + way.name, 36, left: true) + cell(megabytesText(growths[index]), 11)
                    + cell(index == 0 ? "" : (growths[index] >= plainGrowth ? "+" : "") + megabytesText(growths[index] - plainGrowth), 9)
                    + cell(String(format: "%.2f", seconds), 8) + cell(String(format: "%.0f", Double(megabytes) / seconds), 7)
                    + cell(rounds.map { megabytesText(Double($0.growthKiB)) }.joined(separator: " "), 22)
                    + cell(rounds.map { String(format: "%.2f", $0.seconds) }.joined(separator: " "), 20))
        }
        print("")
    }
}

/// A data delegate that consumes each piece of a body as it arrives (counts and sums its bytes)
/// and hands the tally of one transfer at a time to whoever waits for it.
final class ConsumingDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {  // state under `lock`
    private let lock = NSLock()
    private var tally = StreamingBenchmark.Tally()
    private var waiter: CheckedContinuation<StreamingBenchmark.Tally, any Error>?

    /// Reads `url` through `session` (whose delegate this is); one read at a time.
    func read(_ url: URL, on session: URLSession) async throws -> StreamingBenchmark.Tally {
        try await withCheckedThrowingContinuation { continuation in
            lock.withLock {
                tally = StreamingBenchmark.Tally()
                waiter = continuation
            }
            session.dataTask(with: url).resume()
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        var piece = StreamingBenchmark.Tally()
        piece.add(data)
        lock.withLock {
            tally.count += piece.count
            tally.sum &+= piece.sum
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let (waiter, tally) = lock.withLock {
            defer { self.waiter = nil }
            return (self.waiter, self.tally)
        }
        if let error {
            waiter?.resume(throwing: error)
        } else {
            waiter?.resume(with: Result { try StreamingBenchmark.checkStatus(task.response) }.map { tally })
        }
    }
}
