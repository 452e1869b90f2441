import Foundation
import TestSupport
import LoopbackServer
import URLTaskManager
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

/// A Redis that answers "not yet" (`LOADING` while it loads its data, `BUSY` while a script
/// runs too long, `MASTERDOWN` from a replica that lost its master) is a Redis away for
/// ``FleetRateLimiter``: every request still succeeds, at the local share, the fall back says
/// which reply it was, and the limiter rejoins once Redis answers. Each is a real `redis-server`
/// put in that state (`TRYAGAIN`, a cluster's, takes the same path: any error reply).
final class FleetRateLimitNotYetTests: XCTestCase {
    /// `DEBUG RELOAD` with a delay per key: Redis answers `LOADING` for a second or two (it
    /// answers others every KB it loads).
    func testALoadingRedisIsRedisAway() async throws {
        let redisServer = try RedisServerProcess()
        defer { redisServer.stop() }
        let admin = try RawRedis(port: redisServer.port)
        defer { admin.close() }
        XCTAssertEqual(try admin.command(["DEBUG", "POPULATE", "20000"]), "+OK")
        XCTAssertEqual(try admin.command(["CONFIG", "SET", "key-load-delay", "100"]), "+OK")
        XCTAssertEqual(try admin.command(["CONFIG", "SET", "loading-process-events-interval-bytes", "1024"]), "+OK")
        try await notYet("LOADING", redisServer, prefix: "fleet-loading") {
            let reload = try RawRedis(port: redisServer.port)
            try reload.send(["DEBUG", "RELOAD"])
            return reload
        } until: { reload in
            // The reload's own answer comes when the data is loaded.
            XCTAssertEqual(try reload.line(timeout: 60), "+OK")
            reload.close()
        }
    }

    /// A script that never ends, past `busy-reply-threshold`: Redis answers `BUSY` to the others
    /// until `SCRIPT KILL`.
    func testABusyRedisIsRedisAway() async throws {
        let redisServer = try RedisServerProcess(extraArguments: ["--busy-reply-threshold", "100"])
        defer { redisServer.stop() }
        try await notYet("BUSY", redisServer, prefix: "fleet-busy") {
            let looping = try RawRedis(port: redisServer.port)
            try looping.send(["EVAL", "while true do end", "0"])
            return looping
        } until: { looping in
            let admin = try RawRedis(port: redisServer.port)
            defer { admin.close() }
            XCTAssertEqual(try admin.command(["SCRIPT", "KILL"]), "+OK")
            _ = try looping.line(timeout: 10)  // the script's error: killed
            looping.close()
        }
    }

    /// Made a replica of a master that is not there, with `replica-serve-stale-data no`:
    /// `MASTERDOWN` until it is made a master again.
    func testAReplicaWithoutItsMasterIsRedisAway() async throws {
        let redisServer = try RedisServerProcess()
        defer { redisServer.stop() }
        let admin = try RawRedis(port: redisServer.port)
        defer { admin.close() }
        try await notYet("MASTERDOWN", redisServer, prefix: "fleet-masterdown") {
            XCTAssertEqual(try admin.command(["CONFIG", "SET", "replica-serve-stale-data", "no"]), "+OK")
            XCTAssertEqual(try admin.command(["REPLICAOF", "127.0.0.1", String(try TestSockets.freePort())]), "+OK")
            return admin
        } until: { admin in
            XCTAssertEqual(try admin.command(["REPLICAOF", "NO", "ONE"]), "+OK")
        }
    }

    /// Puts Redis in the "not yet" state (`enter`), checks that Redis answers `code` to a command,
    /// sends requests through a limiter (all succeed; it fell back, saying `code`), ends the state
    /// (`leave`) and sends requests until the limiter rejoins.
    private func notYet(
        _ code: String, _ redisServer: RedisServerProcess, prefix: String, enter: () throws -> RawRedis,
        until leave: (RawRedis) throws -> Void
    ) async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/n") { _ in .text("ok") }
        let policy = FleetRateLimiter.Policy(
            rate: 20, burst: 2, processCount: 2, keyPrefix: prefix, probeDelay: .milliseconds(100), maximumProbeDelay: .milliseconds(200))
        let member = FleetRateLimitHTTPTests.Member(redisServer, policy: policy)
        defer { member.redis.close() }
        let state = try enter()
        // Redis says `code` now: asked until it does (each reply waited for, no sleep; a command
        // read before the state began is answered as usual).
        let probe = try RawRedis(port: redisServer.port)
        defer { probe.close() }
        var said = ""
        for _ in 0..<100_000 where !said.hasPrefix("-") { said = try probe.command(["GET", "\(prefix):nothing"], timeout: 10) }
        XCTAssertTrue(said.hasPrefix("-\(code)"), "Redis answered \(said)")
        for index in 0..<3 {
            let result = await fetched(member.manager.session, URLRequest(url: server.url("/n?away=\(index)")))
            XCTAssertEqual(result.status, 200, "no request fails because Redis said \(code): \(String(describing: result.error))")
        }
        try await member.events.wait("the fall back on \(code)") { event in
            if case .fellBack(let reason, 10, _) = event, reason.kind == .reply(code: code) { return true } else { return false }
        }
        XCTAssertFalse(member.limiter.isShared)
        try leave(state)
        var sent = 0
        while !member.limiter.isShared, sent < 100 {
            let result = await fetched(member.manager.session, URLRequest(url: server.url("/n?back=\(sent)")))
            XCTAssertEqual(result.status, 200)
            sent += 1
        }
        XCTAssertTrue(member.limiter.isShared, "back to Redis after \(sent) requests")
        try await member.events.wait("the rejoin") { event in
            if case .rejoined = event { return true } else { return false }
        }
        printFigures("Redis answering \(code): 3 requests answered at the local share; rejoined after \(sent) more once it answered")
    }
}

/// A raw connection to Redis for the tests' own commands (not the client under test): one
/// command, one line of reply.
final class RawRedis: @unchecked Sendable {  // Used from one test at a time; `fd` is set once.
    private let fd: Int32

    init(port: Int) throws { fd = try TestSockets.connect(port: port) }

    func close() {
        #if canImport(Glibc)
        _ = Glibc.close(fd)
        #else
        _ = Darwin.close(fd)
        #endif
    }

    func send(_ command: [String]) throws {
        var bytes = Array("*\(command.count)\r\n".utf8)
        for argument in command { bytes += Array("$\(argument.utf8.count)\r\n\(argument)\r\n".utf8) }
        try TestSockets.sendAll(fd, bytes)
    }

    /// One line of reply, without its CRLF (a status, an error, a length).
    func line(timeout: TimeInterval = 10) throws -> String {
        var bytes: [UInt8] = []
        while !(bytes.count >= 2 && bytes[bytes.count - 2] == 13 && bytes[bytes.count - 1] == 10) {
            let byte = try TestSockets.receive(fd, count: 1, timeout: timeout)
            guard !byte.isEmpty else { throw TestFailure("Redis closed the connection") }
            bytes += byte
        }
        return String(decoding: bytes.dropLast(2), as: UTF8.self)
    }

    /// Sends `command` and returns the first line of its reply.
    func command(_ command: [String], timeout: TimeInterval = 10) throws -> String {
        try send(command)
        return try line(timeout: timeout)
    }
}
