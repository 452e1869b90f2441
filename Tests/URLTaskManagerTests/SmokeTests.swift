import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
import TestSupport

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

    struct Refresh: URLTaskReactor {
        let token: LockedBox<(value: String, refreshes: Int)>
        var configuration: URLTaskReactorConfiguration { .authentication }
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 401 }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
            token.withLock { $0 = (value: "new", refreshes: $0.refreshes + 1) }
        }
    }

    func testInterceptorsAndRefresh() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(nil, "/api") { req in
            req.headers["authorization"] == "Bearer new" ? .text("ok") : .status(401)
        }
        let token = LockedBox((value: "old", refreshes: 0))
        let manager = URLTaskManager(
            interceptors: [HeaderInterceptor(["Authorization": .computed { _ in "Bearer \(token.snapshot.value)" }])],
            reactors: [Refresh(token: token)]
        )
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    let (_, r) = try await manager.session.data(from: server.url("/api"))
                    return (r as! HTTPURLResponse).statusCode
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        XCTAssertEqual(results, Array(repeating: 200, count: 50))
        XCTAssertEqual(token.snapshot.refreshes, 1)
        printFigures("requests seen \(server.requestCount(path: "/api"))")
    }

    func testBatchReleasesOnTenth() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(nil, "/b") { _ in .text("ok") }
        let manager = URLTaskManager(interceptors: [BatchInterceptor(size: 10)])
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<10 {
                group.addTask {
                    let (_, r) = try await manager.session.data(from: server.url("/b")); return (r as! HTTPURLResponse).statusCode
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        XCTAssertEqual(results.count, 10)
    }
}
