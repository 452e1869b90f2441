import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

/// Per-task delegates of the async APIs and upload progress reach the caller through a
/// manager as through a plain session: corelibs calls both only from its own protocol, so the
/// bridge makes those calls itself.
final class TaskDelegateParityTests: XCTestCase {
    private var harness: ParityHarness!
    /// 300 KB: several chunks each way.
    private let payload = Data(GeneratedBody.bytes(offset: 3, count: 300_000))

    override func setUpWithError() throws {
        harness = try ParityHarness()
        harness.route("/echo") { ParityHarness.echo($1) }
        harness.route("/300kb") { _, _ in ServerResponse(body: .generated(length: 300_000, chunkSize: 16 * 1024, chunked: true)) }
    }

    override func tearDown() {
        harness.shutdown()
        harness = nil
    }

    /// What a per-task delegate saw: its callbacks in order, the body it was streamed, and
    /// the upload progress it was told, beside what the async call returned.
    private struct Seen: Equatable {
        var events: [String]
        var streamedBytes: Int
        var streamedSHA: String
        var returnedBytes: Int
        var lastTotalSent: Int64?
    }

    /// What `delegate` saw once `session`'s delegate queue has run every callback queued before
    /// the call returned (a plain session returns as soon as the body is complete, while the
    /// per-task delegate's calls may still be queued).
    private func seen(_ delegate: RecordingDelegate, returned: Data, session: URLSession) async throws -> Seen {
        let drained = Latch<Void>("delegate queue drained")
        session.delegateQueue.addOperation { drained.fulfill(()) }
        try await drained.wait(timeout: .seconds(10))
        let records = delegate.allRecords
        XCTAssertEqual(records.count, 1, "one task")
        let record = try XCTUnwrap(records.first)
        return Seen(
            events: record.events, streamedBytes: record.byteCount, streamedSHA: SHA256.hex(record.body), returnedBytes: returned.count,
            lastTotalSent: record.totalsSent.last)
    }

    func testDataForRequestCallsTheTaskDelegate() async throws {
        let result = try await harness.both { client in
            let delegate = RecordingDelegate()
            let (data, _) = try await client.session.data(for: URLRequest(url: client.url("/300kb")), delegate: delegate)
            return try await seen(delegate, returned: data, session: client.session)
        }
        XCTAssertParity(result, "data(for:delegate:) per-task delegate")
        XCTAssertEqual(result.manager.streamedBytes, 300_000, "the task delegate gets every chunk")
        XCTAssertEqual(result.manager.events.first, "response")
    }

    func testDataFromURLCallsTheTaskDelegate() async throws {
        let result = try await harness.both { client in
            let delegate = RecordingDelegate()
            let (data, _) = try await client.session.data(from: client.url("/300kb"), delegate: delegate)
            return try await seen(delegate, returned: data, session: client.session)
        }
        XCTAssertParity(result, "data(from:delegate:) per-task delegate")
        XCTAssertEqual(result.manager.streamedBytes, 300_000)
    }

    func testUploadCallsTheTaskDelegateWithProgress() async throws {
        let result = try await harness.both { client in
            let delegate = RecordingDelegate()
            var request = URLRequest(url: client.url("/echo"))
            request.httpMethod = "POST"
            let (data, _) = try await client.session.upload(for: request, from: payload, delegate: delegate)
            return try await seen(delegate, returned: data, session: client.session)
        }
        XCTAssertParity(result, "upload(for:from:delegate:) per-task delegate")
        XCTAssertEqual(result.manager.lastTotalSent, Int64(payload.count), "upload progress ends at the body's size")
    }

    /// What a session delegate was told of an upload: the last total, the expected size, the
    /// sum of the increments, and whether the totals only grew.
    private struct Progress: Equatable {
        var lastTotal: Int64?
        var expected: Int64?
        var sumOfIncrements: Int64
        var monotonic: Bool
        var status: Int?
    }

    /// A 16 KiB upload to a delegate, by every way of giving the body: the delegate hears
    /// `didSendBodyData` up to 16,384, through a manager as through a plain session.
    func testUploadProgressForEveryBodyKind() async throws {
        let body = Data(GeneratedBody.bytes(offset: 0, count: 16_384))
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("progress-\(UUID().uuidString).bin")
        try body.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let kinds: [(String, @Sendable (URLSession, URLRequest) -> URLSessionTask)] = [
            ("uploadTask(with:from:)", { $0.uploadTask(with: $1, from: body) }),
            ("uploadTask(with:fromFile:)", { $0.uploadTask(with: $1, fromFile: file) }),
            ("uploadTask(withStreamedRequest:)", { $0.uploadTask(withStreamedRequest: $1) }),
            (
                "dataTask with httpBody",
                { session, request in
                    var request = request
                    request.httpBody = body
                    return session.dataTask(with: request)
                }
            ),
        ]
        for (kind, make) in kinds {
            let result = try await harness.both { client in
                let delegate = RecordingDelegate(bodyStream: { InputStream(data: body) })
                var request = URLRequest(url: client.url("/echo"))
                request.httpMethod = "POST"
                let (_, record, _) = try await client.delegateTask(delegate) { make($0, request) }
                let totals = record.totalsSent
                return Progress(
                    lastTotal: totals.last, expected: record.expectedToSend, sumOfIncrements: record.bytesSentSum,
                    monotonic: zip(totals, totals.dropFirst()).allSatisfy { $0 < $1 },
                    status: (record.response as? HTTPURLResponse)?.statusCode)
            }
            XCTAssertParity(result, "upload progress, \(kind)")
            XCTAssertEqual(result.manager.lastTotal, 16_384, kind)
            XCTAssertEqual(result.manager.sumOfIncrements, 16_384, kind)
            XCTAssertTrue(result.manager.monotonic, kind)
        }
    }

    /// Requeues once on a 401.
    private struct RequeueOn401: URLTaskReactor {
        var configuration: URLTaskReactorConfiguration { .authentication }
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 401 }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
    }

    /// A body sent twice (a 401, then a requeue) is one progress sequence for the caller: it
    /// only grows and ends at the body's size, where a plain session on a 307 keeps adding.
    func testARequeuedUploadReportsOneSequence() async throws {
        let body = Data(GeneratedBody.bytes(offset: 0, count: 16_384))
        let sends = LockedBox(0)
        harness.server.route("POST", "/once-401") { request in
            let send = sends.withLock { count in
                count += 1
                return count
            }
            return send == 1 ? .status(401) : .text("\(request.bodyLength)")
        }
        let delegate = RecordingDelegate()
        let manager = URLTaskManager(reactors: [RequeueOn401()], configuration: ParityHarness.defaultConfiguration(), delegate: delegate)
        defer { manager.invalidateAndCancel() }
        var request = URLRequest(url: harness.server.url("/once-401"))
        request.httpMethod = "POST"
        let task = manager.session.uploadTask(with: request, from: body)
        task.resume()
        try await delegate.completion(of: task)
        let record = delegate.record(for: task)
        XCTAssertEqual((record.response as? HTTPURLResponse)?.statusCode, 200)
        XCTAssertEqual(sends.snapshot, 2, "sent twice")
        XCTAssertEqual(harness.server.requests(path: "/once-401").map(\.bodyLength), [16_384, 16_384])
        XCTAssertEqual(record.totalsSent.last, 16_384)
        XCTAssertEqual(record.bytesSentSum, 16_384)
        XCTAssertEqual(record.totalsSent, record.totalsSent.sorted(), "progress went back")
        XCTAssertEqual(Set(record.totalsSent).count, record.totalsSent.count, "progress repeated itself")
    }
}
