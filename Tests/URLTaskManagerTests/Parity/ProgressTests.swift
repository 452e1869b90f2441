import Foundation
import LoopbackServer
import URLTaskManager
import URLTaskResilience
import XCTest
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The outer task's `progress` follows the body through a manager: it moves as chunks arrive
/// and ends complete, for delegate-driven and completion-handler tasks alike, and a resend
/// (a retried 503) never sets it back (corelibs traps on a total set back to 0, #3263).
final class ProgressTests: XCTestCase {
    private static let size = 2 << 20
    private var server: LoopbackServer!

    override func setUpWithError() throws {
        server = try LoopbackServer()
        let body = Data(GeneratedBody.bytes(offset: 0, count: Self.size))
        server.route("GET", "/big") { _ in
            ServerResponse(status: 200, headers: ["Content-Type": "application/octet-stream"], body: .data(body))
        }
        let pieces = (0..<4).map { Data(GeneratedBody.bytes(offset: $0 * 16_384, count: 16_384)) }
        server.route("GET", "/slow") { _ in ServerResponse(status: 200, body: .chunked(pieces, chunkDelay: .milliseconds(100))) }
        server.route("GET", "/empty") { _ in ServerResponse(status: 204) }
        let attempts = LockedBox(0)
        server.route("GET", "/flaky") { _ in
            attempts.withLock {
                $0 += 1; return $0
            } == 1
                ? ServerResponse(status: 503, headers: ["Retry-After": "0"], body: .data(Data("busy".utf8)))
                : ServerResponse(status: 200, body: .data(body))
        }
    }

    override func tearDown() {
        server.shutdown()
        server = nil
    }

    /// Runs a delegate task for `path` to its end: the task, what its progress said when the
    /// delegate got the first chunk, and the bytes the delegate received. The bridge completes
    /// the progress before it reports the end, so it is final when this returns.
    private func delegateTask(_ path: String) async throws -> (URLSessionTask, first: (completed: Int64, total: Int64), bytes: Int) {
        let seenAtFirstChunk = LockedBox<(completed: Int64, total: Int64)?>(nil)
        let delegate = RecordingDelegate(
            handling: .hashOnly,
            onFirstData: { task in
                seenAtFirstChunk.withLock { $0 = (task.progress.completedUnitCount, task.progress.totalUnitCount) }
            })
        let session = URLTaskManager(delegate: delegate).session
        defer { session.invalidateAndCancel() }
        let task = session.dataTask(with: server.url(path))
        task.resume()
        try await delegate.completion(of: task)
        let first = try XCTUnwrap(seenAtFirstChunk.withLock { $0 })
        return (task, first, delegate.record(for: task).byteCount)
    }

    func testADelegateTasksProgressMovesWithTheBodyAndEndsComplete() async throws {
        let (task, first, bytes) = try await delegateTask("/big")
        XCTAssertEqual(bytes, Self.size)
        XCTAssertEqual(first.total, Int64(Self.size), "the total is the Content-Length")
        XCTAssertGreaterThan(first.completed, 0, "the first chunk counts")
        XCTAssertEqual(task.progress.completedUnitCount, Int64(Self.size))
        XCTAssertEqual(task.progress.totalUnitCount, Int64(Self.size))
        XCTAssertEqual(task.progress.fractionCompleted, 1)
    }

    /// A body that arrives over 400 ms in four chunks of unknown total length: the first chunk
    /// is counted before the rest has arrived, and the end is complete.
    func testProgressMovesAsChunksArrive() async throws {
        let (task, first, bytes) = try await delegateTask("/slow")
        XCTAssertEqual(bytes, 4 * 16_384)
        XCTAssertGreaterThan(first.completed, 0)
        XCTAssertLessThan(first.completed, 4 * 16_384, "counted before the last chunk arrived")
        XCTAssertEqual(first.total, -1, "no Content-Length: the total is unknown")
        XCTAssertEqual(task.progress.completedUnitCount, 4 * 16_384)
        XCTAssertEqual(task.progress.fractionCompleted, 1)
    }

    func testACompletionHandlerTaskEndsWithItsBodyCounted() async throws {
        for path in ["/big", "/flaky"] {
            let session = URLTaskManager(reactors: [
                RetryReactor(policy: RetryPolicy(maximumAttempts: 3, backoff: .init(base: .milliseconds(1), jitter: 0)))
            ]).session
            defer { session.invalidateAndCancel() }
            let done = Latch<Int>("completion of \(path)")
            let task = session.dataTask(with: server.url(path)) { data, _, _ in done.fulfill(data?.count ?? -1) }
            task.resume()
            let count = try await done.wait(timeout: .seconds(10))
            XCTAssertEqual(count, Self.size, path)
            // The bridge completes it before it reports the end: final once the handler ran.
            XCTAssertEqual(task.progress.completedUnitCount, Int64(Self.size), path)
            XCTAssertEqual(task.progress.totalUnitCount, Int64(Self.size), path)
        }
    }

    func testAnEmptyBodyEndsComplete() async throws {
        let session = URLTaskManager().session
        defer { session.invalidateAndCancel() }
        let done = Latch<Int>("completion")
        let task = session.dataTask(with: server.url("/empty")) { data, _, _ in done.fulfill(data?.count ?? -1) }
        task.resume()
        let count = try await done.wait(timeout: .seconds(10))
        XCTAssertEqual(count, 0)
        XCTAssertEqual(task.progress.fractionCompleted, 1)
    }
}
