import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

#if canImport(FoundationNetworking)
/// On Linux a download task made with the session's own download APIs cannot pass through the
/// pipeline. Where an interceptor would have changed its request, it must fail loudly, before
/// anything is sent, never go out without the API key; where none would, it goes out as usual.
final class NativeDownloadGuardTests: XCTestCase {
    private var server: LoopbackServer!

    override func setUpWithError() throws {
        server = try LoopbackServer()
        server.route("/file") { request in
            .text(request.headers["X-API-Key"] == nil ? "no key" : "with key")
        }
    }

    override func tearDown() {
        server.shutdown()
    }

    /// Leaves every request as it is, and counts what it saw.
    private struct Observer: URLTaskInterceptor {
        let seen = LockedBox(0)
        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            seen.withLock { $0 += 1 }
            return .execute
        }
    }

    /// Holds every request in a batch.
    private struct Holder: URLTaskInterceptor {
        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand { .hold() }
    }

    private func assertRefused(_ error: (any Error)?, naming interceptor: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let failure = error as? URLTaskError, failure.code == .downloadNeedsPipeline, let name = failure.component?.name else {
            return XCTFail("expected downloadNeedsPipeline, got \(String(describing: error))", file: file, line: line)
        }
        XCTAssertEqual(name, interceptor, file: file, line: line)
        XCTAssertTrue("\(error!)".contains("manager.download(for:)"), "\(error!)", file: file, line: line)
        XCTAssertFalse("\(error!)".contains("secret-key"), "the description shows a header value", file: file, line: line)
    }

    func testADownloadAnInterceptorWouldChangeFailsUnsentThroughEveryAPI() async throws {
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["X-API-Key": "secret-key"])])
        defer { manager.invalidateAndCancel() }
        let session = manager.session
        let url = server.url("/file")

        do {
            _ = try await session.download(from: url)
            XCTFail("download(from:) went out without the interceptors")
        } catch {
            assertRefused(error, naming: "HeaderInterceptor")
        }

        let done = Latch<(URL?, (any Error)?)>("downloadTask completion")
        session.downloadTask(with: url) { location, _, error in done.fulfill((location, error)) }.resume()
        let (location, error) = try await done.wait(timeout: .seconds(10))
        XCTAssertNil(location)
        assertRefused(error, naming: "HeaderInterceptor")

        let delegate = RecordingDelegate()
        let delegated = URLTaskManager(interceptors: [HeaderInterceptor(["X-API-Key": "secret-key"])], delegate: delegate)
        defer { delegated.invalidateAndCancel() }
        let task = delegated.session.downloadTask(with: url)
        task.resume()
        try await delegate.completion(of: task)
        assertRefused(delegate.record(for: task).error, naming: "HeaderInterceptor")
        XCTAssertEqual(delegate.record(for: task).completionCount, 1)

        XCTAssertEqual(server.requestCount(path: "/file"), 0, "a refused download reached the server")
        // The right way still works, key included.
        let (file, _) = try await manager.download(for: URLRequest(url: url))
        XCTAssertEqual(try String(contentsOf: file, encoding: .utf8), "with key")
    }

    func testHoldingOrFailingInterceptorsRefuseTooAndHoldNothing() async throws {
        let holding = URLTaskManager(interceptors: [Holder()])
        defer { holding.invalidateAndCancel() }
        do {
            _ = try await holding.session.download(from: server.url("/file"))
            XCTFail("a held download went out")
        } catch {
            assertRefused(error, naming: "Holder")
        }
        XCTAssertEqual(holding.heldTaskCount(interceptorAt: 0), 0, "the check held a task")
        XCTAssertEqual(server.requestCount(path: "/file"), 0)
    }

    func testADownloadNoInterceptorChangesGoesOutAsUsual() async throws {
        let observer = Observer()
        let manager = URLTaskManager(interceptors: [observer])
        defer { manager.invalidateAndCancel() }
        let events = URLTaskEventTests.Collector(manager.events())
        let (file, response) = try await manager.session.download(from: server.url("/file"))
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        XCTAssertEqual(try String(contentsOf: file, encoding: .utf8), "no key")
        XCTAssertEqual(observer.seen.snapshot, 1, "the interceptor was asked")
        try await waitUntil("the download's events") { events.all.count >= 3 }
        XCTAssertEqual(events.all.map { "\($0.kind)" }.dropFirst(), ["Observer: execute", "download sent by URLSession itself, unchanged"])
    }

    func testARefusedDownloadIsInTheEvents() async throws {
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["X-API-Key": "secret-key"])])
        defer { manager.invalidateAndCancel() }
        let events = URLTaskEventTests.Collector(manager.events())
        _ = try? await manager.session.download(from: server.url("/file"))
        try await waitUntil("the refused download's events") { events.all.count >= 4 }
        let kinds = events.all.map { "\($0.kind)" }
        XCTAssertEqual(kinds.count, 4, "\(kinds)")
        XCTAssertEqual(kinds.dropFirst().first, "HeaderInterceptor: execute")
        XCTAssertEqual(kinds.dropFirst(2).first, "download refused: use manager.download(for:)")
        XCTAssertTrue(kinds.last?.hasPrefix("completed error") == true, "\(kinds)")
    }
}
#endif
