import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

/// Download tasks (handed by the bridge to the native HTTP protocol) produce the same file.
final class DownloadParityTests: XCTestCase {
    private var harness: ParityHarness!
    private let length = 1_500_000

    override func setUpWithError() throws {
        harness = try ParityHarness()
        let length = self.length
        harness.route("/file") { _, _ in
            ServerResponse(
                headers: ["Content-Type": "application/octet-stream", "X-Custom": "download"],
                body: .generated(length: length))
        }
        harness.route("/missing") { _, _ in .text("not here", status: 404) }
    }

    override func tearDown() {
        harness.shutdown()
        harness = nil
    }

    private func assertFile(
        _ result: (plain: Outcome, manager: Outcome), _ scenario: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertParity(result, scenario, file: file, line: line)
        XCTAssertEqual(result.manager.status, 200, file: file, line: line)
        XCTAssertEqual(result.manager.bodyLength, length, file: file, line: line)
        XCTAssertEqual(result.manager.bodySHA256, GeneratedBody.sha256(length: length), file: file, line: line)
        XCTAssertEqual(result.manager.header("X-Custom"), "download", file: file, line: line)
    }

    func testAsyncDownload() async throws {
        let result = try await harness.both { client in
            await client.asyncDownload(URLRequest(url: client.url("/file")))
        }
        assertFile(result, "download(for:)")

        let missing = try await harness.both { client in
            await client.asyncDownload(URLRequest(url: client.url("/missing")))
        }
        XCTAssertParity(missing, "download(for:) 404")
        XCTAssertEqual(missing.manager.status, 404)
    }

    func testCompletionHandlerDownload() async throws {
        let result = try await harness.both { client in
            try await client.completionDownload(URLRequest(url: client.url("/file")))
        }
        assertFile(result, "downloadTask(with:completionHandler:)")
    }

    func testDelegateDownload() async throws {
        let result = try await harness.both { client in
            let delegate = RecordingDelegate()
            let (outcome, record, _) = try await client.delegateTask(delegate) { $0.downloadTask(with: client.url("/file")) }
            XCTAssertEqual(record.completionCount, 1, "\(client.side)")
            XCTAssertEqual(record.events.filter { $0 == "download" }.count, 1, "\(client.side)")
            return outcome
        }
        assertFile(result, "delegate downloadTask")
    }
}
