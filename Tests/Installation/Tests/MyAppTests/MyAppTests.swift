import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest

/// A test target of the depending package uses both products: LoopbackServer serves on
/// 127.0.0.1, URLTaskManager's session adds its header on the way.
final class MyAppTests: XCTestCase {
    func testBothProductsWorkTogether() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/hello") { request in .text(request.headers["x-client"] ?? "no header") }
        let session = URLTaskManager(interceptors: [HeaderInterceptor(["X-Client": "installed"])]).session

        let (body, response) = try await session.data(from: server.url("/hello"))

        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        XCTAssertEqual(String(decoding: body, as: UTF8.self), "installed")
    }
}
