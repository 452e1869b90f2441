import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager

final class ManagerDownloadTests: XCTestCase {
    func testDownloadRunsInterceptorsAndStreamsToFile() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let length = 10 * 1024 * 1024
        server.route(nil, "/file") { request in
            guard request.headers["authorization"] == "Bearer t" else { return .status(401) }
            return ServerResponse(body: .generated(length: length, chunked: true))
        }
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["Authorization": "Bearer t"])])
        let (location, response) = try await manager.download(for: URLRequest(url: server.url("/file")))
        defer { try? FileManager.default.removeItem(at: location) }
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        let data = try Data(contentsOf: location)
        XCTAssertEqual(data.count, length)
        XCTAssertEqual(SHA256.hex(data), GeneratedBody.sha256(length: length))
    }

    func testCancellingADownloadEndsWithCancelled() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = Gate()
        defer { gate.open() }
        server.route(nil, "/slow") { _ in
            gate.wait(timeout: .seconds(10))
            return .text("late")
        }
        let manager = URLTaskManager()
        let download = Task { try await manager.download(for: URLRequest(url: server.url("/slow"))) }
        _ = try await server.waitForRequests(path: "/slow", count: 1, timeout: .seconds(5))
        download.cancel()
        do {
            _ = try await download.value
            XCTFail("expected cancellation")
        } catch let error as URLError {
            XCTAssertEqual(error.code, .cancelled)
        }
    }
}
