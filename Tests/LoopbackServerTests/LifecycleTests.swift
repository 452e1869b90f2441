import Foundation
import LoopbackServer
import XCTest

/// Start-up, shutdown and resource hygiene: tests create dozens of servers in one process.
final class LifecycleTests: XCTestCase {
    func testPortAndURLs() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        XCTAssertGreaterThan(server.port, 0)
        XCTAssertEqual(server.baseURL.absoluteString, "http://127.0.0.1:\(server.port)")
        XCTAssertEqual(server.url("/a?b=1").absoluteString, "http://127.0.0.1:\(server.port)/a?b=1")
        XCTAssertEqual(server.url("a").path, "/a")
    }

    func testShutdownClosesListenerAndIsIdempotent() throws {
        let server = try LoopbackServer()
        let port = server.port
        let idle = try RawHTTPConnection(port: port, readTimeout: .seconds(5))
        server.shutdown()
        server.shutdown()
        XCTAssertTrue(try idle.serverClosed(), "live connections are closed by shutdown")
        XCTAssertEqual(server.openConnectionCount, 0)
        XCTAssertThrowsError(try RawHTTPConnection(port: port)) { error in
            guard case LoopbackServerError.connectFailed = error else {
                return XCTFail("unexpected \(error)")
            }
        }
    }

    func testDeinitShutsDown() throws {
        var server: LoopbackServer? = try LoopbackServer()
        let port = try XCTUnwrap(server?.port)
        server = nil
        XCTAssertThrowsError(try RawHTTPConnection(port: port))
    }

    func testResetRecordsKeepsSequenceIncreasing() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let connection = try RawHTTPConnection(port: server.port, readTimeout: .seconds(5))
        try connection.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        XCTAssertEqual(try connection.readResponse().status, 404)
        server.resetRecords()
        XCTAssertTrue(server.requests.isEmpty)
        try connection.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        _ = try connection.readResponse()
        XCTAssertEqual(server.requests.map(\.sequence), [2])
        XCTAssertEqual(server.requestCount(path: "/a"), 1)
    }

    #if os(Linux)
    func testManyServersLeakNoDescriptors() throws {
        func openDescriptors() throws -> Int {
            try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
        }
        // Warm up lazily created process-wide descriptors before taking the baseline.
        try exercise(servers: 1)
        let before = try openDescriptors()
        try exercise(servers: 30)
        let after = try openDescriptors()
        // Each server holds at least 4 descriptors while running; a leak would show up as ~120.
        XCTAssertLessThanOrEqual(after - before, 5, "descriptors before \(before), after \(after)")
    }

    private func exercise(servers: Int) throws {
        for _ in 0..<servers {
            let server = try LoopbackServer()
            server.route("/x") { _ in .text("x") }
            let first = try RawHTTPConnection(port: server.port, readTimeout: .seconds(5))
            try first.send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
            _ = try first.readResponse()
            let second = try RawHTTPConnection(port: server.port, readTimeout: .seconds(5))
            try second.send("GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            _ = try second.readResponse()
            server.shutdown()
            first.close()
            second.close()
        }
    }
    #endif
}
