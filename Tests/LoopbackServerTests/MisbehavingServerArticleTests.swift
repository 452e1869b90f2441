import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest

/// The listings of LoopbackServer's "Misbehaving servers" article, run as written: a response
/// held until the test opens a gate, a connection reset mid-body, a malformed request on a raw
/// socket.
final class MisbehavingServerArticleTests: XCTestCase {
    // DocC held response: begin
    func testAHeldResponseKeepsTheRequestInFlightUntilTheTestOpensTheGate() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = Gate()
        server.route("/report") { _ in
            gate.wait(timeout: .seconds(10))  // the connection's thread blocks here
            return .text("done")
        }
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }

        let answer = Task { try await session.data(from: server.url("/report")).0 }
        // Recorded before the handler runs: the request is in flight, its answer held.
        let arrived = try await server.waitForRequests(path: "/report", count: 1)
        XCTAssertEqual(arrived[0].method, "GET")
        gate.open()

        let body = try await answer.value
        XCTAssertEqual(String(decoding: body, as: UTF8.self), "done")
    }
    // DocC held response: end

    // DocC dropped connection: begin
    func testAConnectionResetMidBodyFailsTheTransfer() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/download") { _ in
            // The head and 1,000 bytes of a 100,000-byte body, then a reset (RST).
            ServerResponse(body: .generated(length: 100_000)).with { $0.dropAfterBodyBytes = 1_000 }
        }
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }

        do {
            let (data, _) = try await session.data(from: server.url("/download"))
            XCTFail("expected the transfer to fail, got \(data.count) bytes")
        } catch let error as URLError {
            XCTAssertEqual(error.code, .networkConnectionLost)
        }
    }
    // DocC dropped connection: end

    // DocC raw connection: begin
    func testAMalformedRequestIsAnswered400AndTheConnectionClosed() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let connection = try RawHTTPConnection(port: server.port, readTimeout: .seconds(5))

        try connection.send("GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: twelve\r\n\r\n")
        let response = try connection.readResponse()

        XCTAssertEqual(response.status, 400)
        XCTAssertTrue(try connection.serverClosed())
        XCTAssertTrue(server.requests.isEmpty, "a request that could not be read is not recorded")
    }
    // DocC raw connection: end
}
