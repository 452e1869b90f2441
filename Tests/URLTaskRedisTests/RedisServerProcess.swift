import Foundation
import TestSupport
import XCTest

@testable import URLTaskRedis

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A `redis-server` of the test's own: a free TCP port on 127.0.0.1 and a Unix socket in a
/// temporary folder, no persistence, no daemon. Started, restarted on the same port, stopped
/// (SIGTERM, then SIGKILL after a deadline) or killed; every wait is on an event (the server's
/// "ready" line, the process's exit) with a deadline, never a fixed sleep.
final class RedisServerProcess: @unchecked Sendable {  // Used from one test at a time; `output` is locked by `condition`.
    static let missingMessage = "redis-server is not installed: apt-get install redis-server (Debian/Ubuntu) or brew install redis"

    /// `redis-server` on the PATH (Debian's is /usr/bin/redis-server), or `nil`.
    static var executable: String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        return path.split(separator: ":").map { "\($0)/redis-server" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    let port: Int
    let directory: URL
    var socketPath: String { directory.appendingPathComponent("redis.sock").path }
    private let executable: String
    private let extraArguments: [String]
    private var process: Process?
    private let condition = NSCondition()
    private var output = ""
    private var exited = false

    /// Starts a server, or skips the test where `redis-server` is not installed.
    init(extraArguments: [String] = []) throws {
        guard let executable = Self.executable else { throw XCTSkip(Self.missingMessage) }
        self.executable = executable
        self.extraArguments = extraArguments
        self.port = try TestSockets.freePort()
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("redis-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try start()
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    var pid: Int32 { process?.processIdentifier ?? 0 }

    func configuration(replyTimeout: Duration = .seconds(5)) -> RedisClient.Configuration {
        .init(endpoint: .tcp(host: "127.0.0.1", port: port), connectTimeout: .seconds(2), replyTimeout: replyTimeout)
    }

    /// Starts `redis-server` and waits (at most 10 s) until it says it is ready and answers PING.
    func start() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments =
            [
                "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--unixsocket", socketPath, "--unixsocketperm", "700", "--dir", directory.path, "--enable-debug-command", "local",
            ] + extraArguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        condition.lock()
        output = ""
        exited = false
        condition.unlock()
        process.terminationHandler = { [weak self] _ in
            guard let self else { return }
            condition.lock()
            exited = true
            condition.broadcast()
            condition.unlock()
        }
        try process.runWithEverySignalUnblocked()
        self.process = process
        let reader = pipe.fileHandleForReading
        Thread.detachNewThread { [weak self] in
            while true {
                let data = reader.availableData
                if data.isEmpty { return }
                guard let self else { return }
                condition.lock()
                output += String(decoding: data, as: UTF8.self)
                condition.broadcast()
                condition.unlock()
            }
        }
        let deadline = Date().addingTimeInterval(10)
        condition.lock()
        while !output.contains("ready to accept connections at"), !exited, Date() < deadline {
            _ = condition.wait(until: deadline)
        }
        let ready = output.contains("ready to accept connections at")
        let log = output
        condition.unlock()
        guard ready else { throw TestFailure("redis-server did not become ready: \(log.suffix(600))") }
        try ping()
    }

    /// SIGTERM, and SIGKILL if it has not exited within `deadline` seconds; waits for the exit.
    func stop(deadline: TimeInterval = 5) {
        guard let process, process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        if !waitForExit(deadline) {
            kill(process.processIdentifier, SIGKILL)
            _ = waitForExit(5)
        }
    }

    /// SIGKILL: the server dies at once, its connections reset.
    func killNow() {
        guard let process, process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        _ = waitForExit(5)
    }

    func restart() throws {
        stop()
        try start()
    }

    private func waitForExit(_ seconds: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        condition.lock()
        defer { condition.unlock() }
        // The handler cannot reach this object once it is being released (`deinit` stops the
        // server): the process's own state is read too, every 20 ms, until the deadline.
        while !exited, process?.isRunning ?? false, Date() < deadline {
            _ = condition.wait(until: min(deadline, Date().addingTimeInterval(0.02)))
        }
        return exited || !(process?.isRunning ?? false)
    }

    /// One PING on a raw socket (not the client under test).
    private func ping() throws {
        let fd = try TestSockets.connect(port: port)
        defer { close(fd) }
        try TestSockets.sendAll(fd, Array("PING\r\n".utf8))
        let reply = try TestSockets.receive(fd, count: 7, timeout: 5)
        guard reply == Array("+PONG\r\n".utf8) else { throw TestFailure("redis-server did not answer PING") }
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Raw sockets for the test's own helpers: a port probe, a PING, a proxy, listeners that never
/// accept.
enum TestSockets {
    static func makeSocket() throws -> Int32 {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw TestFailure("socket failed") }
        return fd
    }

    static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        #if canImport(Darwin)
        address.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
        #endif
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr = in_addr(s_addr: UInt32(0x7F00_0001).bigEndian)
        return address
    }

    /// A socket bound to 127.0.0.1 on a port the system chose (not listening); with its port.
    static func bound(reuse: Bool = true) throws -> (fd: Int32, port: Int) {
        let fd = try makeSocket()
        var yes: Int32 = 1
        if reuse { _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size)) }
        var address = loopback(port: 0)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else { throw TestFailure("bind failed") }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return (fd, Int(UInt16(bigEndian: actual.sin_port)))
    }

    /// A port nothing listens on now: bound to port 0, read, closed (redis cannot take port 0).
    static func freePort() throws -> Int {
        let (fd, port) = try bound()
        close(fd)
        return port
    }

    static func listener(backlog: Int32) throws -> (fd: Int32, port: Int) {
        let (fd, port) = try bound()
        guard listen(fd, backlog) == 0 else { throw TestFailure("listen failed") }
        return (fd, port)
    }

    static func connect(port: Int) throws -> Int32 {
        let fd = try makeSocket()
        var address = loopback(port: port)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                #if canImport(Glibc)
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                #else
                Darwin.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                #endif
            }
        }
        guard result == 0 else {
            close(fd)
            throw TestFailure("connect failed")
        }
        return fd
    }

    /// Starts a connection without waiting for it (fills a listener's backlog).
    static func connectNonBlocking(port: Int) throws -> Int32 {
        let fd = try makeSocket()
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        var address = loopback(port: port)
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                #if canImport(Glibc)
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                #else
                Darwin.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                #endif
            }
        }
        return fd
    }

    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes {
                #if canImport(Glibc)
                send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
                #else
                send(fd, $0.baseAddress! + offset, $0.count - offset, 0)
                #endif
            }
            guard sent > 0 else { throw TestFailure("send failed") }
            offset += sent
        }
    }

    /// Reads exactly `count` bytes (or fewer at end of stream) within `timeout` seconds.
    static func receive(_ fd: Int32, count: Int, timeout: TimeInterval) throws -> [UInt8] {
        let deadline = Date().addingTimeInterval(timeout)
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while bytes.count < count {
            let left = Int32(max(0, deadline.timeIntervalSinceNow * 1000))
            guard left > 0 else { throw TestFailure("no reply in time") }
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, left) > 0 else { continue }
            let read = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, min($0.count, count - bytes.count), 0) }
            if read <= 0 { break }
            bytes += buffer[0..<read]
        }
        return bytes
    }

    static func accept(_ listener: Int32) -> Int32 {
        #if canImport(Glibc)
        Glibc.accept(listener, nil, nil)
        #else
        Darwin.accept(listener, nil, nil)
        #endif
    }
}
