import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

/// Every way of attaching a request body delivers every byte to the server through a manager,
/// as through a plain session. The echo route reports what the server received (method,
/// length, SHA-256) in response headers, so the outcomes compare the server's view too.
final class UploadParityTests: XCTestCase {
    private var harness: ParityHarness!
    /// 300 KB: larger than any single socket write or read buffer.
    private let payload = Data(GeneratedBody.bytes(offset: 7, count: 300_000))
    private var payloadSHA: String { SHA256.hex(payload) }
    private var file: URL!

    override func setUpWithError() throws {
        harness = try ParityHarness()
        harness.route("/echo") { ParityHarness.echo($1) }
        file = FileManager.default.temporaryDirectory.appendingPathComponent("parity-upload-\(UUID().uuidString).bin")
        try payload.write(to: file)
    }

    override func tearDown() {
        harness.shutdown()
        harness = nil
        try? FileManager.default.removeItem(at: file)
    }

    private func post(_ client: ParityClient) -> URLRequest {
        var request = URLRequest(url: client.url("/echo"))
        request.httpMethod = "POST"
        request.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
        return request
    }

    /// The server records of every side the last scenario ran (the methods door's too, when it
    /// ran) for the echo path received the whole payload.
    private func assertServerReceivedPayload(file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(harness.lastSides.contains(.manager), file: file, line: line)
        for side in harness.lastSides {
            let records = harness.server.requests(path: side.pathPrefix + "/echo")
            XCTAssertEqual(records.last?.bodyLength, payload.count, "\(side)", file: file, line: line)
            XCTAssertEqual(records.last?.bodySHA256, payloadSHA, "\(side)", file: file, line: line)
            XCTAssertEqual(records.last?.method, "POST", "\(side)", file: file, line: line)
        }
        harness.server.resetRecords()
    }

    private func assertReceived(
        _ result: (plain: Outcome, manager: Outcome), _ scenario: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertParity(result, scenario, file: file, line: line)
        XCTAssertEqual(result.manager.status, 200, file: file, line: line)
        XCTAssertEqual(result.manager.header("X-Body-Length"), String(payload.count), file: file, line: line)
        XCTAssertEqual(result.manager.header("X-Body-SHA256"), payloadSHA, file: file, line: line)
        assertServerReceivedPayload(file: file, line: line)
    }

    func testHTTPBody() async throws {
        let result = try await harness.both { client in
            var request = post(client)
            request.httpBody = payload
            return await client.asyncData(request)
        }
        assertReceived(result, "httpBody, async data(for:)")

        let completion = try await harness.both { client in
            var request = post(client)
            request.httpBody = payload
            return try await client.completionData(request)
        }
        assertReceived(completion, "httpBody, dataTask completion handler")
    }

    func testHTTPBodyStream() async throws {
        let result = try await harness.both { client in
            var request = post(client)
            request.httpBodyStream = InputStream(data: payload)
            return await client.asyncData(request)
        }
        assertReceived(result, "httpBodyStream, async data(for:)")

        let delegate = try await harness.both { client in
            var request = post(client)
            request.httpBodyStream = InputStream(data: payload)
            return try await client.delegateTask(RecordingDelegate()) { $0.dataTask(with: request) }.outcome
        }
        assertReceived(delegate, "httpBodyStream, delegate dataTask")
    }

    func testAsyncUploadFromData() async throws {
        let result = try await harness.both { client in
            await client.asyncUpload(post(client), from: payload)
        }
        assertReceived(result, "upload(for:from:)")
    }

    func testAsyncUploadFromFile() async throws {
        let result = try await harness.both { client in
            await client.asyncUpload(post(client), fromFile: file)
        }
        assertReceived(result, "upload(for:fromFile:)")
    }

    func testCompletionHandlerUploadFromData() async throws {
        let result = try await harness.both { client in
            let request = post(client)
            return try await client.completion { $0.uploadTask(with: request, from: payload, completionHandler: $1) }.outcome
        }
        assertReceived(result, "uploadTask(with:from:completionHandler:)")
    }

    func testCompletionHandlerUploadFromFile() async throws {
        let result = try await harness.both { client in
            let request = post(client)
            let file = file!
            return try await client.completion { $0.uploadTask(with: request, fromFile: file, completionHandler: $1) }.outcome
        }
        assertReceived(result, "uploadTask(with:fromFile:completionHandler:)")
    }

    func testDelegateUploadTasks() async throws {
        let fromData = try await harness.both { client in
            let request = post(client)
            return try await client.delegateTask(RecordingDelegate()) { $0.uploadTask(with: request, from: payload) }.outcome
        }
        assertReceived(fromData, "delegate uploadTask(with:from:)")

        let fromFile = try await harness.both { client in
            let request = post(client)
            let file = file!
            return try await client.delegateTask(RecordingDelegate()) { $0.uploadTask(with: request, fromFile: file) }.outcome
        }
        assertReceived(fromFile, "delegate uploadTask(with:fromFile:)")
    }

    /// `uploadTask(withStreamedRequest:)` asks the session delegate for the body stream.
    func testStreamedRequestUploadAsksTheDelegate() async throws {
        let payload = self.payload
        let result = try await harness.both { client in
            let delegate = RecordingDelegate(bodyStream: { InputStream(data: payload) })
            let (outcome, record, _) = try await client.delegateTask(delegate) { $0.uploadTask(withStreamedRequest: post(client)) }
            XCTAssertEqual(record.bodyStreamRequests, 1, "\(client.side)")
            return outcome
        }
        assertReceived(result, "uploadTask(withStreamedRequest:) + needNewBodyStream")

        // A delegate that provides no stream: the request goes out with an empty body.
        let noStream = try await harness.both { client in
            let delegate = RecordingDelegate(bodyStream: { nil })
            let (outcome, record, _) = try await client.delegateTask(delegate) { $0.uploadTask(withStreamedRequest: post(client)) }
            return [outcome.description, "asked \(record.bodyStreamRequests)"]
        }
        XCTAssertParity(noStream, "uploadTask(withStreamedRequest:), delegate returns nil")
        harness.server.resetRecords()
    }

    /// A streamed upload cancelled while its delegate has not yet provided the body ends with
    /// -999 once, and the body provided afterwards is never sent. Manager only: a plain
    /// corelibs session crashes (`try!` in `_MultiHandle.updateTimeoutTimer`) when the answer
    /// comes after the cancel, so there is nothing to compare with.
    func testStreamedRequestCancelledBeforeTheDelegateAnswers() async throws {
        let payload = self.payload
        let result = try await harness.run(.manager) { client in
            let delegate = LateBodyDelegate()
            let session = client.makeSession(delegate: delegate)
            let task = session.uploadTask(withStreamedRequest: post(client))
            task.resume()
            let answer = try await delegate.asked.wait()
            task.cancel()
            let error = try await delegate.completed.wait()
            answer.call(InputStream(data: payload))
            try await client.barrier(session)
            return [
                "\((error as NSError?)?.code ?? 0)", "completions \(delegate.completions.value)",
                "server saw \(harness.server.requestCount(path: client.path("/echo")))",
            ]
        }
        XCTAssertEqual(result, ["\(NSURLErrorCancelled)", "completions 1", "server saw 0"])
    }

    /// PUT with an empty body and a GET with no body stay that way.
    func testEmptyBodies() async throws {
        let result = try await harness.both { client in
            var request = post(client)
            request.httpMethod = "PUT"
            request.httpBody = Data()
            return await client.asyncData(request)
        }
        XCTAssertParity(result, "PUT with empty httpBody")
        XCTAssertEqual(result.manager.header("X-Method"), "PUT")
        XCTAssertEqual(result.manager.header("X-Body-Length"), "0")
    }
}

/// A delegate that keeps `needNewBodyStream`'s completion handler for the test to call later.
// @unchecked Sendable: only latches and a counter, all thread-safe.
private final class LateBodyDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    struct Answer: @unchecked Sendable {  // the handler is called once, by the test.
        let handler: (InputStream?) -> Void
        func call(_ stream: InputStream?) { handler(stream) }
    }

    let asked = Latch<Answer>("needNewBodyStream")
    let completed = Latch<(any Error)?>("didCompleteWithError")
    let completions = CallCounter()

    func urlSession(_ session: URLSession, task: URLSessionTask, needNewBodyStream completionHandler: @escaping (InputStream?) -> Void) {
        asked.fulfill(Answer(handler: completionHandler))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        completions.increment()
        completed.fulfill(error)
    }
}
