import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

/// Transport failures reach the caller through a manager with the same domain and code as
/// through a plain session: request timeout, connection refused, connection dropped mid-body.
final class TransportErrorParityTests: XCTestCase {
    private var harness: ParityHarness!

    override func setUpWithError() throws {
        harness = try ParityHarness()
        harness.route("/slow") { _, _ in .text("too late").with { $0.delay = .seconds(4) } }
        harness.route("/drop") { _, _ in
            ServerResponse(headers: ["Content-Type": "application/octet-stream"], body: .generated(length: 200_000))
                .with { $0.dropAfterBodyBytes = 50_000 }
        }
        harness.route("/drop-after-head") { _, _ in
            ServerResponse(body: .generated(length: 10_000)).with { $0.dropAfterBodyBytes = 0 }
        }
    }

    override func tearDown() {
        harness.shutdown()
        harness = nil
    }

    /// corelibs counts timeouts in whole seconds (a `timeoutInterval` below 1 s fails at once,
    /// see `PlatformPinTests`), so the shortest meaningful timeout is 1 s.
    func testRequestTimeout() async throws {
        let asyncResult = try await harness.both { client in
            var request = URLRequest(url: client.url("/slow"))
            request.timeoutInterval = 1
            let start = ContinuousClock.now
            let outcome = await client.asyncData(request)
            let elapsed = ContinuousClock.now - start
            XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(900), "\(client.side): the timeout must be honoured, not fire at once")
            XCTAssertLessThan(elapsed, .milliseconds(3500), "\(client.side): the timeout must fire before the server answers")
            return outcome
        }
        XCTAssertParity(asyncResult, "timeoutInterval 1 s, server delays 4 s (async)")
        XCTAssertEqual(asyncResult.manager.errorDomain, NSURLErrorDomain)
        XCTAssertEqual(asyncResult.manager.errorCode, NSURLErrorTimedOut)

        let delegate = try await harness.both { client in
            var request = URLRequest(url: client.url("/slow"))
            request.timeoutInterval = 1
            let (outcome, record, _) = try await client.delegateTask(RecordingDelegate()) { $0.dataTask(with: request) }
            return [outcome.description, "completions \(record.completionCount)"]
        }
        XCTAssertParity(delegate, "timeoutInterval 1 s, server delays 4 s (delegate)")
        XCTAssertTrue(delegate.manager[0].contains("error \(NSURLErrorDomain) \(NSURLErrorTimedOut)"), delegate.manager[0])
    }

    /// corelibs fires a `timeoutInterval` under one second almost at once, and the manager's
    /// session does the same as a plain one: -1001 long before the 0.5 s (the server here never
    /// answers within the test). The time each side took is in the verbose log.
    func testSubSecondTimeoutFiresAlmostAtOnceAsOnAPlainSession() async throws {
        var elapsed: [Side: Duration] = [:]
        let result = try await harness.both { client in
            var request = URLRequest(url: client.url("/slow"))
            request.timeoutInterval = 0.5
            let start = ContinuousClock.now
            let outcome = await client.asyncData(request)
            elapsed[client.side] = ContinuousClock.now - start
            return outcome
        }
        XCTAssertParity(result, "timeoutInterval 0.5 s, server delays 4 s (async)")
        XCTAssertEqual(result.manager.errorCode, NSURLErrorTimedOut)
        ParityLog.record(
            "timeoutInterval 0.5 s fired after", plain: elapsed[.plain].map(String.init(describing:)) ?? "?",
            manager: elapsed[.manager].map(String.init(describing:)) ?? "?")
        #if canImport(FoundationNetworking)
        for (side, time) in elapsed {
            XCTAssertLessThan(time, .milliseconds(250), "\(side): corelibs now honours sub-second timeouts; update LinuxNotes.md")
        }
        #endif
    }

    func testConnectionRefused() async throws {
        let gone = try LoopbackServer()
        let port = gone.port
        gone.shutdown()
        let url = URL(string: "http://127.0.0.1:\(port)/nobody-listens")!
        let result = try await harness.both { client in
            await client.asyncData(URLRequest(url: url))
        }
        XCTAssertParity(result, "connection refused (async)")
        XCTAssertEqual(result.manager.errorDomain, NSURLErrorDomain)
        XCTAssertEqual(result.manager.errorCode, NSURLErrorCannotConnectToHost)

        let completion = try await harness.both { client in
            try await client.completionData(URLRequest(url: url))
        }
        XCTAssertParity(completion, "connection refused (completion handler)")
        XCTAssertEqual(completion.manager.errorCode, NSURLErrorCannotConnectToHost)
    }

    func testServerDropsConnectionMidBody() async throws {
        let asyncResult = try await harness.both { client in
            await client.asyncData(URLRequest(url: client.url("/drop")))
        }
        XCTAssertParity(asyncResult, "server drops connection after 50 KB of 200 KB (async)")
        XCTAssertEqual(asyncResult.manager.errorDomain, NSURLErrorDomain)
        XCTAssertNotNil(asyncResult.manager.errorCode)

        let delegate = try await harness.both { client in
            let (outcome, record, _) = try await client.delegateTask(RecordingDelegate()) { $0.dataTask(with: client.url("/drop")) }
            XCTAssertEqual(record.completionCount, 1)
            return outcome
        }
        XCTAssertParity(delegate, "server drops connection after 50 KB of 200 KB (delegate)")
        XCTAssertEqual(delegate.manager.errorCode, asyncResult.manager.errorCode)
        XCTAssertEqual(delegate.manager.status, 200)

        let afterHead = try await harness.both { client in
            try await client.completionData(URLRequest(url: client.url("/drop-after-head")))
        }
        XCTAssertParity(afterHead, "server drops connection right after the head")
        XCTAssertEqual(afterHead.manager.errorDomain, NSURLErrorDomain)
    }
}
