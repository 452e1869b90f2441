import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

/// A cancelled task ends with `URLError.cancelled`, exactly once, whenever it is cancelled:
/// before it starts, while the server holds the response, or in the middle of the body.
final class CancellationParityTests: XCTestCase {
    /// What a cancellation scenario observed: the outcome, how many completions were delivered
    /// (checked after a barrier request on the same session), and how many requests the server saw.
    struct Cancelled: Equatable, CustomStringConvertible {
        var outcome: Outcome
        var completions: Int
        var requestsSeen: Int
        var bytesBeforeCancel: Int?
        var description: String {
            "\(outcome.summary); completions \(completions); server saw \(requestsSeen)"
                + (bytesBeforeCancel.map { "; \($0) B before cancel" } ?? "")
        }
    }

    private var harness: ParityHarness!
    private let gates = Dictionary(uniqueKeysWithValues: Side.allCases.map { ($0, Gate()) })

    override func setUpWithError() throws {
        harness = try ParityHarness()
        let gates = self.gates
        harness.route("/held") { side, _ in
            gates[side]!.wait(timeout: .seconds(30))
            return .text("released")
        }
        harness.route("/stall") { _, _ in
            // One 4 KB chunk (well inside one curl read), then a pause longer than any test:
            // the body stalls mid-way.
            ServerResponse(
                body: .chunked(
                    [Data(repeating: 0x61, count: 4096), Data(repeating: 0x62, count: 4096)],
                    chunkDelay: .seconds(60)))
        }
        harness.route("/never") { _, _ in .text("should not be requested") }
    }

    override func tearDown() {
        for gate in gates.values { gate.open() }
        harness.shutdown()
        harness = nil
    }

    private func assertCancelled(
        _ result: (plain: Cancelled, manager: Cancelled), _ scenario: String, requests: Int, file: StaticString = #filePath,
        line: UInt = #line
    ) {
        XCTAssertParity(result, scenario, file: file, line: line)
        XCTAssertTrue(result.manager.outcome.isCancelled, "\(result.manager)", file: file, line: line)
        XCTAssertEqual(result.manager.completions, 1, file: file, line: line)
        XCTAssertEqual(result.manager.requestsSeen, requests, file: file, line: line)
    }

    func testCancelBeforeResume() async throws {
        let completion = try await harness.both { client in
            let (task, done, calls) = client.start { $0.dataTask(with: client.url("/never"), completionHandler: $1) }
            task.cancel()
            task.resume()
            let outcome = try await done.wait()
            try await client.barrier()
            return Cancelled(
                outcome: outcome, completions: calls.value, requestsSeen: harness.server.requestCount(path: client.path("/never")))
        }
        assertCancelled(completion, "cancel() before resume(), completion handler", requests: 0)

        let delegate = try await harness.both { client in
            let recorder = RecordingDelegate()
            let session = client.makeSession(delegate: recorder)
            let task = session.dataTask(with: client.url("/never"))
            task.cancel()
            task.resume()
            try await recorder.completion(of: task)
            try await client.barrier(session)
            return Cancelled(
                outcome: recorder.outcome(for: task, side: client.side), completions: recorder.record(for: task).completionCount,
                requestsSeen: harness.server.requestCount(path: client.path("/never")))
        }
        assertCancelled(delegate, "cancel() before resume(), delegate", requests: 0)
    }

    func testCancelWhileServerHoldsTheResponse() async throws {
        let asyncResult = try await harness.both { client in
            let request = URLRequest(url: client.url("/held"))
            let task = Task { await client.asyncData(request) }
            _ = try await harness.server.waitForRequests(path: client.path("/held"), count: 1)
            task.cancel()
            let outcome = await task.value
            try await client.barrier()
            return Cancelled(outcome: outcome, completions: 1, requestsSeen: harness.server.requestCount(path: client.path("/held")))
        }
        assertCancelled(asyncResult, "held response, async Task.cancel()", requests: 1)
        harness.server.resetRecords()

        let completion = try await harness.both { client in
            let (task, done, calls) = client.start { $0.dataTask(with: client.url("/held"), completionHandler: $1) }
            task.resume()
            _ = try await harness.server.waitForRequests(path: client.path("/held"), count: 1)
            task.cancel()
            let outcome = try await done.wait()
            try await client.barrier()
            return Cancelled(
                outcome: outcome, completions: calls.value, requestsSeen: harness.server.requestCount(path: client.path("/held")))
        }
        assertCancelled(completion, "held response, completion handler task.cancel()", requests: 1)
        harness.server.resetRecords()

        let delegate = try await harness.both { client in
            let recorder = RecordingDelegate()
            let session = client.makeSession(delegate: recorder)
            let task = session.dataTask(with: client.url("/held"))
            task.resume()
            _ = try await harness.server.waitForRequests(path: client.path("/held"), count: 1)
            task.cancel()
            try await recorder.completion(of: task)
            try await client.barrier(session)
            let record = recorder.record(for: task)
            XCTAssertEqual(record.events, ["complete"], "\(client.side)")
            return Cancelled(
                outcome: recorder.outcome(for: task, side: client.side), completions: record.completionCount,
                requestsSeen: harness.server.requestCount(path: client.path("/held")))
        }
        assertCancelled(delegate, "held response, delegate task.cancel()", requests: 1)
    }

    /// The server sends one 4 KB chunk and stalls; the delegate cancels on the first chunk.
    func testCancelMidBody() async throws {
        let result = try await harness.both { client in
            let recorder = RecordingDelegate(onFirstData: { $0.cancel() })
            let session = client.makeSession(delegate: recorder)
            let task = session.dataTask(with: client.url("/stall"))
            task.resume()
            try await recorder.completion(of: task)
            try await client.barrier(session)
            let record = recorder.record(for: task)
            XCTAssertEqual(record.events, ["response", "data", "complete"], "\(client.side)")
            return Cancelled(
                outcome: recorder.outcome(for: task, side: client.side), completions: record.completionCount,
                requestsSeen: harness.server.requestCount(path: client.path("/stall")), bytesBeforeCancel: record.byteCount)
        }
        assertCancelled(result, "mid-body, delegate cancels on first chunk", requests: 1)
        XCTAssertEqual(result.manager.outcome.status, 200, "the response arrived before the cancel")
        XCTAssertEqual(result.manager.bytesBeforeCancel, 4096)
    }
}
