import XCTest
import LoopbackServer
@testable import URLTaskManager

final class SmokeTests: XCTestCase {
    func testAsyncCompletionDelegateUploadDownload() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(nil, "/hello") { _ in .text("hello") }
        server.route(nil, "/big") { _ in ServerResponse(body: .generated(length: 1_000_000)) }
        server.route("POST", "/echo") { req in ServerResponse(status: 201, body: .data(req.body)) }
        let manager = URLTaskManager()
        let (data, response) = try await manager.session.data(from: server.url("/hello"))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "hello")
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        let (big, _) = try await manager.session.data(from: server.url("/big"))
        XCTAssertEqual(big.count, 1_000_000)
        var post = URLRequest(url: server.url("/echo")); post.httpMethod = "POST"
        let (up, upResponse) = try await manager.session.upload(for: post, from: Data("payload".utf8))
        XCTAssertEqual(String(decoding: up, as: UTF8.self), "payload")
        XCTAssertEqual((upResponse as? HTTPURLResponse)?.statusCode, 201)
        let (file, _) = try await manager.session.download(for: URLRequest(url: server.url("/hello")))
        XCTAssertEqual(try String(contentsOf: file, encoding: .utf8), "hello")
    }
}
