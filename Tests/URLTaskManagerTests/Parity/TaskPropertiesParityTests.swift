import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

/// The outer task's own properties after it completed, through a manager and through a plain
/// session. On Linux, corelibs sets `error` and the byte counts only from its own protocol
/// (their setters are internal), so through any custom `URLProtocol` some of them stay at
/// their initial values: this test pins exactly which, so that a toolchain change is noticed,
/// and the Linux notes list them.
final class TaskPropertiesParityTests: XCTestCase {
    private var harness: ParityHarness!
    private let upload = Data(GeneratedBody.bytes(offset: 0, count: 20_000))

    override func setUpWithError() throws {
        harness = try ParityHarness()
        harness.route("/echo") { ParityHarness.echo($1) }
        harness.route("/body") { _, _ in ServerResponse(body: .generated(length: 50_000)) }
        harness.route("/slow") { _, _ in .text("too late").with { $0.delay = .seconds(4) } }
    }

    override func tearDown() {
        harness.shutdown()
        harness = nil
    }

    /// The properties a caller can read off a completed task.
    private struct Properties: Equatable, CustomStringConvertible {
        var state: URLSessionTask.State
        var hasError: Bool
        var hasResponse: Bool
        var received: Int64
        var expectedToReceive: Int64
        var sent: Int64
        var expectedToSend: Int64
        var progress: String

        init(_ task: URLSessionTask) {
            state = task.state
            hasError = task.error != nil
            hasResponse = task.response != nil
            received = task.countOfBytesReceived
            expectedToReceive = task.countOfBytesExpectedToReceive
            sent = task.countOfBytesSent
            expectedToSend = task.countOfBytesExpectedToSend
            progress = "\(task.progress.completedUnitCount)/\(task.progress.totalUnitCount)"
        }

        var description: String {
            "state \(state.rawValue), error \(hasError), response \(hasResponse), received \(received)/\(expectedToReceive), "
                + "sent \(sent)/\(expectedToSend), progress \(progress)"
        }
    }

    /// Runs `make`'s task to completion on a delegate session of this side.
    private func properties(_ client: ParityClient, _ make: (URLSession) -> URLSessionTask) async throws -> Properties {
        let delegate = RecordingDelegate(handling: .hashOnly)
        let session = client.makeSession(delegate: delegate)
        let task = make(session)
        task.resume()
        try await delegate.completion(of: task)
        // corelibs marks the task completed right after the delegate's last call, on its queue.
        let drained = Latch<Void>("delegate queue drained")
        session.delegateQueue.addOperation { drained.fulfill(()) }
        try await drained.wait(timeout: .seconds(10))
        return Properties(task)
    }

    func testPropertiesAfterADownloadAnUploadAndAFailure() async throws {
        let download = try await harness.both { client in try await properties(client) { $0.dataTask(with: client.url("/body")) } }
        let upload = try await harness.both { client in
            try await properties(client) { session in
                var request = URLRequest(url: client.url("/echo"))
                request.httpMethod = "POST"
                return session.uploadTask(with: request, from: self.upload)
            }
        }
        let failure = try await harness.both { client in
            try await properties(client) { session in
                var request = URLRequest(url: client.url("/slow"))
                request.timeoutInterval = 1
                return session.dataTask(with: request)
            }
        }
        for (name, pair) in [("download", download), ("upload", upload), ("failure", failure)] {
            if ParityLog.isVerbose { print("TASK| \(name): plain \(pair.plain) | manager \(pair.manager)") }
            XCTAssertEqual(pair.manager.state, .completed, name)
            XCTAssertEqual(pair.manager.state, pair.plain.state, name)
            XCTAssertEqual(pair.manager.hasResponse, pair.plain.hasResponse, name)
            // corelibs counts received bytes only for download tasks: 0 on both sides.
            XCTAssertEqual(pair.manager.received, 0, name)
            XCTAssertEqual(pair.plain.received, 0, name)
            // Set only by corelibs' own protocol (internal setters): 0 through any custom URLProtocol.
            XCTAssertEqual(pair.manager.expectedToReceive, 0, name)
            XCTAssertEqual(pair.manager.sent, 0, name)
            XCTAssertEqual(pair.manager.expectedToSend, 0, name)
        }
        // What a plain session sets that a custom protocol's task cannot.
        XCTAssertEqual(download.plain.expectedToReceive, 50_000)
        XCTAssertEqual(upload.plain.sent, 20_000)
        XCTAssertEqual(upload.plain.expectedToSend, 20_000)
        XCTAssertTrue(failure.plain.hasError)
        XCTAssertFalse(failure.manager.hasError, "corelibs now sets task.error for a custom protocol: say so in the Linux notes")
        // The bridge moves progress itself (see ProgressTests).
        XCTAssertEqual(download.manager.progress, "50000/50000")
    }
}
