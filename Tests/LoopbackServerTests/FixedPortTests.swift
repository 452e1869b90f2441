import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest

/// `Configuration.port`: a server started again where a stopped one listened (a host that
/// comes back, for the offline tests).
final class FixedPortTests: XCTestCase {
    func testAServerCanListenWhereAStoppedOneDid() async throws {
        let client = TestHTTPClient()
        defer { client.invalidate() }
        let first = try LoopbackServer()
        let port = first.port
        first.route("/who") { _ in .text("first") }
        let (firstBody, _) = try await client.get(first.url("/who"))
        XCTAssertEqual(String(decoding: firstBody, as: UTF8.self), "first")
        first.shutdown()

        let second = try LoopbackServer(configuration: .init(port: port))
        defer { second.shutdown() }
        XCTAssertEqual(second.port, port)
        second.route("/who") { _ in .text("second") }
        let (secondBody, _) = try await client.get(second.url("/who"))
        XCTAssertEqual(String(decoding: secondBody, as: UTF8.self), "second")
    }
}
