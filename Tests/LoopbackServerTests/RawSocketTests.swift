import Foundation
import LoopbackServer
import XCTest

/// Wire-level behaviour checked with `RawHTTPConnection`, where URLSession would hide the details.
final class RawSocketTests: XCTestCase {
    private var server: LoopbackServer!

    override func setUpWithError() throws {
        server = try LoopbackServer()
        server.route("/echo") { request in
            ServerResponse(headers: ["X-Method": request.method], body: .data(request.body))
        }
    }

    override func tearDown() {
        server.shutdown()
    }

    private func connect() throws -> RawHTTPConnection {
        try RawHTTPConnection(port: server.port, readTimeout: .seconds(5))
    }

    func testClientConnectionCloseIsHonoured() throws {
        let connection = try connect()
        try connection.send("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        let response = try connection.readResponse()
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.headers["connection"], "close")
        XCTAssertTrue(try connection.serverClosed())
    }

    func testHTTP10Closes() throws {
        let connection = try connect()
        try connection.send("GET /echo HTTP/1.0\r\n\r\n")
        let response = try connection.readResponse()
        XCTAssertEqual(response.status, 200)
        XCTAssertTrue(try connection.serverClosed())
        XCTAssertEqual(server.requests.first?.version, "HTTP/1.0")
    }

    func testKeepAliveAndPipelining() throws {
        let connection = try connect()
        try connection.send(
            "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\none"
                + "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\ntwo"
        )
        XCTAssertEqual(try connection.readResponse().bodyText, "one")
        XCTAssertEqual(try connection.readResponse().bodyText, "two")
        try connection.send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        XCTAssertEqual(try connection.readResponse().status, 200)
        XCTAssertEqual(Set(server.requests.map(\.connectionID)).count, 1)
        XCTAssertEqual(server.requests.map(\.sequence), [1, 2, 3])
    }

    func testExpectContinue() throws {
        let connection = try connect()
        try connection.send("PUT /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        let interim = try connection.readResponse(skippingInformational: false)
        XCTAssertEqual(interim.status, 100)
        try connection.send("hello")
        let final = try connection.readResponse()
        XCTAssertEqual(final.status, 200)
        XCTAssertEqual(final.bodyText, "hello")
    }

    func testChunkedRequestBody() throws {
        let connection = try connect()
        try connection.send(
            "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                + "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
        )
        XCTAssertEqual(try connection.readResponse().bodyText, "hello world")
        let recorded = try XCTUnwrap(server.requests.first)
        XCTAssertTrue(recorded.wasChunked)
        XCTAssertEqual(recorded.bodyLength, 11)
        XCTAssertEqual(recorded.bodySHA256, SHA256.hex(Data("hello world".utf8)))
    }

    func testHeadAndNoContentSendNoBody() throws {
        server.route("/empty") { _ in .status(204) }
        let connection = try connect()
        try connection.send("HEAD /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody")
        let head = try connection.readResponse(forHEAD: true)
        XCTAssertEqual(head.headers["Content-Length"], "4")
        XCTAssertEqual(head.headers["X-Method"], "HEAD")
        try connection.send("GET /empty HTTP/1.1\r\nHost: x\r\n\r\n")
        let noContent = try connection.readResponse()
        XCTAssertEqual(noContent.status, 204)
        XCTAssertNil(noContent.headers["Content-Length"])
        // If either response had carried a body, this one would be misparsed.
        try connection.send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        XCTAssertEqual(try connection.readResponse().headers["X-Method"], "GET")
    }

    func testGeneratedChunkedResponseFraming() throws {
        server.route("/gen") { _ in ServerResponse(body: .generated(length: 10_000, chunkSize: 4096, chunked: true)) }
        let connection = try connect()
        try connection.send("GET /gen HTTP/1.1\r\nHost: x\r\n\r\n")
        let response = try connection.readResponse()
        XCTAssertTrue(response.wasChunked)
        XCTAssertEqual(Array(response.body), GeneratedBody.bytes(offset: 0, count: 10_000))
    }

    func testMalformedRequestGets400AndClose() throws {
        let connection = try connect()
        try connection.send("NONSENSE\r\n\r\n")
        let response = try connection.readResponse()
        XCTAssertEqual(response.status, 400)
        XCTAssertTrue(try connection.serverClosed())
        XCTAssertTrue(server.requests.isEmpty)
    }

    func testLargeStreamedUploadKeepsOnlyRecordLimit() throws {
        server.shutdown()
        server = try LoopbackServer(configuration: .init(bodyRecordLimit: 1000))
        server.route("POST", "/sink") { request in .text("\(request.bodyLength)") }
        let length = 24 * 1024 * 1024 + 7
        let connection = try connect()
        try connection.send("POST /sink HTTP/1.1\r\nHost: x\r\nContent-Length: \(length)\r\n\r\n")
        var offset = 0
        while offset < length {
            let count = min(1 << 20, length - offset)
            try connection.send(Data(GeneratedBody.bytes(offset: offset, count: count)))
            offset += count
        }
        XCTAssertEqual(try connection.readResponse().bodyText, "\(length)")
        let recorded = try XCTUnwrap(server.requests.first)
        XCTAssertEqual(recorded.bodyLength, length)
        XCTAssertEqual(recorded.body.count, 1000)
        XCTAssertTrue(recorded.isBodyTruncated)
        XCTAssertEqual(Array(recorded.body), GeneratedBody.bytes(offset: 0, count: 1000))
        XCTAssertEqual(recorded.bodySHA256, GeneratedBody.sha256(length: length))
    }

    func testHundredsOfConcurrentConnections() throws {
        let gate = Gate()
        server.route("/wait") { _ in
            gate.wait(timeout: .seconds(10))
            return .text("done")
        }
        let count = 300
        let connections = try (0..<count).map { _ in try connect() }
        for (index, connection) in connections.enumerated() {
            try connection.send("GET /wait?i=\(index) HTTP/1.1\r\nHost: x\r\n\r\n")
        }
        // All of them are parked in the handler at once, each on its own connection thread.
        let done = expectation(description: "all arrived")
        let server = self.server!
        Task {
            _ = try await server.waitForRequests(path: "/wait", count: count)
            done.fulfill()
        }
        wait(for: [done], timeout: 20)
        XCTAssertEqual(server.openConnectionCount, count)
        gate.open()
        for connection in connections {
            XCTAssertEqual(try connection.readResponse().bodyText, "done")
        }
        XCTAssertEqual(Set(server.requests.map(\.connectionID)).count, count)
    }
}
