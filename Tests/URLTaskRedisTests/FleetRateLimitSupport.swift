import Foundation
import XCTest
@testable import URLTaskRedis
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A `redis-server` of the test's own on a free port of 127.0.0.1, without persistence, that can
/// be stopped and started again on the same port. Ready means the server logged "Ready to accept
/// connections" (read from its output, not waited for by the clock).
final class FleetRedisServer: @unchecked Sendable {  // `process` is touched by the test's task only.
    static let path = "/usr/bin/redis-server"
    static let missing = "redis-server is not installed: apt-get install redis-server"

    let port: Int
    private var process: Process?

    /// Starts a server, or skips the test where `redis-server` is absent.
    init() async throws {
        guard FileManager.default.isExecutableFile(atPath: Self.path) else { throw XCTSkip(Self.missing) }
        port = try Self.freePort()
        try await start()
    }

    deinit { stop() }

    /// A client configuration for this server, with short timeouts.
    var configuration: RedisClient.Configuration {
        .init(
            endpoint: .tcp(host: "127.0.0.1", port: port), connectTimeout: .milliseconds(500), replyTimeout: .milliseconds(500),
            reconnectDelay: .milliseconds(20), maximumReconnectDelay: .milliseconds(100))
    }

    /// Starts it (again) on ``port`` and returns once it accepts connections.
    func start() async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.path)
        process.arguments = [
            "--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "notice",
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = process
        let handle = output.fileHandleForReading
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            DispatchQueue.global().async {
                var text = ""
                while true {
                    let chunk = handle.availableData
                    guard !chunk.isEmpty else {
                        continuation.resume(throwing: FleetTestFailure("redis-server exited before it was ready: \(text.suffix(300))"))
                        return
                    }
                    text += String(decoding: chunk, as: UTF8.self)
                    if text.contains("Ready to accept connections") { break }
                }
                continuation.resume()
                // Keep draining, so that a full pipe never blocks the server.
                while !handle.availableData.isEmpty {}
            }
        }
    }

    /// Stops it (SIGTERM) and returns once it exited.
    func stop() {
        guard let process else { return }
        self.process = nil
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }

    private static func freePort() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw XCTSkip("no socket for a free port") }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bind(descriptor, socketAddress, length) == 0 && getsockname(descriptor, socketAddress, &length) == 0
            }
        }
        guard bound else { throw XCTSkip("no free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// Collects a stream's events and lets a test wait for a count of those that match (no sleeps).
final class FleetEvents<Event: Sendable>: @unchecked Sendable {  // `events` and `waiters` are guarded by `lock`.
    private struct Waiter {
        let matches: @Sendable (Event) -> Bool
        let count: Int
        let continuation: CheckedContinuation<Void, any Error>
    }

    private let lock = NSLock()
    private var events: [Event] = []
    private var waiters: [Int: Waiter] = [:]
    private var nextWaiter = 0
    private var reader: Task<Void, Never>?

    init(_ stream: AsyncStream<Event>) {
        reader = Task { [weak self] in
            for await event in stream { self?.append(event) }
        }
    }

    deinit { reader?.cancel() }

    var all: [Event] { lock.withLock { events } }

    func count(where matches: (Event) -> Bool) -> Int { lock.withLock { events.filter(matches).count } }

    private func append(_ event: Event) {
        let due: [Waiter] = lock.withLock {
            events.append(event)
            let ready = waiters.filter { _, waiter in events.filter(waiter.matches).count >= waiter.count }
            for key in ready.keys { waiters[key] = nil }
            return Array(ready.values)
        }
        for waiter in due { waiter.continuation.resume() }
    }

    /// Returns once `count` events match, failing after `timeout` (a bound, not a wait).
    func wait(
        _ what: String, count: Int = 1, timeout: Duration = .seconds(10), where matches: @escaping @Sendable (Event) -> Bool
    ) async throws {
        let key: Int = lock.withLock {
            nextWaiter += 1
            return nextWaiter
        }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            guard let self else { return }
            let waiter = self.lock.withLock { self.waiters.removeValue(forKey: key) }
            waiter?.continuation.resume(throwing: FleetTestFailure("no \(what) within \(timeout)"))
        }
        defer { timer.cancel() }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let ready: Bool = lock.withLock {
                if events.filter(matches).count >= count { return true }
                waiters[key] = Waiter(matches: matches, count: count, continuation: continuation)
                return false
            }
            if ready { continuation.resume() }
        }
    }
}

struct FleetTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// What a request ended with: a status and body, or an error.
struct FleetFetched: Sendable {
    var status: Int?
    var text: String?
    var error: (any Error)?

    static func fetch(_ session: URLSession, _ request: URLRequest) async -> FleetFetched {
        do {
            let (data, response) = try await session.data(for: request)
            return FleetFetched(status: (response as? HTTPURLResponse)?.statusCode, text: String(decoding: data, as: UTF8.self))
        } catch {
            return FleetFetched(error: error)
        }
    }
}

/// The most arrivals in any window of `window` (each window starting at an arrival).
func fleetBusiestWindow(_ arrivals: [ContinuousClock.Instant], window: Duration = .seconds(1)) -> Int {
    let sorted = arrivals.sorted()
    var best = 0
    var end = 0
    for start in sorted.indices {
        while end < sorted.count, sorted[end] < sorted[start] + window { end += 1 }
        best = max(best, end - start)
    }
    return best
}
