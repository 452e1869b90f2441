import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
import TestSupport

/// No body the pipeline holds for itself grows without a bound (issue 49, item 2): a server that
/// answers with an endless body ends the task with `responseTooLarge` where the body is held
/// whole for the caller (a 401's challenge, a delivering reactor's answer, a requeued task's
/// answer), and has its transfer stopped where the caller never sees the body (a reactor's first
/// answer, a rejected answer). The session and `bytes(for:)` stream their transfers, so an endless
/// body is cut there; `data(for:)` sends a GET as a whole transfer, whose body corelibs collects
/// before anyone sees it, as a plain session's `data(for:)` does (a 401's challenge included):
/// there a large finite body gets the same error.
final class HeldBodyLimitTests: XCTestCase {
    private var server: LoopbackServer!
    /// A body no test waits for the end of: 1 TiB, generated as it is sent.
    private let endless = 1 << 40
    private let limit = 1 << 20

    override func setUpWithError() throws {
        server = try LoopbackServer()
        let endless = endless
        server.route("/basic-401-endless") { _ in
            ServerResponse(
                status: 401, headers: ["WWW-Authenticate": "Basic realm=\"endless\""], body: .generated(length: endless, chunked: true))
        }
        // Every answer, before the refresh and after it: an endless 401.
        server.route("/bearer-401-endless") { _ in
            ServerResponse(status: 401, headers: ["WWW-Authenticate": "Bearer"], body: .generated(length: endless, chunked: true))
        }
        for (status, headers) in [(401, ["WWW-Authenticate": "Basic realm=\"large\""]), (503, [:])] as [(Int, HTTPFields)] {
            server.route("/\(status)-3mib") { _ in ServerResponse(status: status, headers: headers, body: .generated(length: 3 << 20)) }
        }
        server.route("/500-3mib") { _ in ServerResponse(status: 500, body: .data(Data(repeating: 65, count: 3 << 20))) }
        server.route("/503-endless") { _ in ServerResponse(status: 503, body: .generated(length: endless, chunked: true)) }
        // Text, so that the error's prefix shows it; 50 s to send whole, 20 ms a chunk.
        server.route("/500-endless") { _ in
            ServerResponse(
                status: 500, body: .chunked(Array(repeating: Data(repeating: 65, count: 300), count: 2500), chunkDelay: .milliseconds(20)))
        }
        server.route("/basic-401-long") { _ in
            ServerResponse(status: 401, headers: ["WWW-Authenticate": "Basic realm=\"long\""], body: .generated(length: endless))
        }
    }

    override func tearDown() {
        server.shutdown()
        server = nil
    }

    private func options(_ limit: Int? = nil) -> URLTaskManager.Options {
        var options = URLTaskManager.Options()
        options.maximumHeldBodySize = limit ?? self.limit
        return options
    }

    /// Runs `call` with a deadline: an endless body that is not bounded never ends.
    private func ended(
        within deadline: Duration = .seconds(60), _ call: @escaping @Sendable () async throws -> Void
    ) async throws -> (any Error)? {
        let done = Latch<String?>("the call ended")
        let error = LockedBox<(any Error)?>(nil)
        let task = Task {
            do {
                try await call()
                done.fulfill(nil)
            } catch let caught {
                error.withLock { $0 = caught }
                done.fulfill("\(caught)")
            }
        }
        defer { task.cancel() }
        _ = try await done.wait(timeout: deadline)
        return error.snapshot
    }

    private func assertTooLarge(_ error: (any Error)?, status: Int, limit: Int, file: StaticString = #filePath, line: UInt = #line) {
        guard let error = error as? URLTaskError else {
            return XCTFail("expected responseTooLarge, got \(String(describing: error))", file: file, line: line)
        }
        XCTAssertEqual(error.code, .responseTooLarge, "\(error)", file: file, line: line)
        XCTAssertEqual(error.byteLimit, limit, file: file, line: line)
        XCTAssertEqual(error.response?.statusCode, status, file: file, line: line)
    }

    func testAnEndlessBodyOfABasicChallengeFailsThroughEveryDoor() async throws {
        let manager = URLTaskManager(configuration: ParityHarness.defaultConfiguration(), options: options())
        defer { manager.invalidateAndCancel() }
        let url = server.url("/basic-401-endless")
        let session = manager.session
        assertTooLarge(try await ended { _ = try await session.data(from: url) }, status: 401, limit: limit)
        let large = server.url("/401-3mib")
        assertTooLarge(try await ended { _ = try await manager.data(from: large) }, status: 401, limit: limit)
        assertTooLarge(
            try await ended {
                let (bytes, _) = try await manager.bytes(from: url)
                for try await _ in bytes.chunks {}
            }, status: 401, limit: limit)
    }

    func testTheDefaultLimitIs16MiBAndEveryManagerHasOne() {
        XCTAssertEqual(URLTaskManager.Options().maximumHeldBodySize, 16 << 20)
        XCTAssertEqual(URLTaskManager.Options.default.maximumHeldBodySize, URLTaskManager.Options.defaultMaximumHeldBodySize)
    }

    func testHeldBodiesStayWithinTheLimitInMemory() async throws {
        let manager = URLTaskManager(configuration: ParityHarness.defaultConfiguration(), options: options(4 << 20))
        defer { manager.invalidateAndCancel() }
        let url = server.url("/basic-401-long")
        MemoryProbe.resetPeak()
        let before = MemoryProbe.peakKiB ?? 0
        for _ in 0..<3 {
            assertTooLarge(try await ended { _ = try await manager.session.data(from: url) }, status: 401, limit: 4 << 20)
        }
        let grown = (MemoryProbe.peakKiB ?? 0) - before
        printFigures("[held body] three endless 401s through the session, 4 MiB limit: peak +\(grown / 1024) MiB")
        XCTAssertLessThan(grown, 100 << 10, "bounded by the limit, not by the server (unbounded: +637 MB in 10 s)")
    }

    /// A reactor that delivers what it reacted to, so its answer is held whole.
    struct Deliver: URLTaskReactor {
        var configuration: URLTaskReactorConfiguration {
            var configuration = URLTaskReactorConfiguration.default
            configuration.mode = .singleFlight(loopGuard: configuration.loopGuard, afterwards: .deliverResponse)
            return configuration
        }
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 503 }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
    }

    func testAnEndlessAnswerForADeliveringReactorFailsNamingIt() async throws {
        let manager = URLTaskManager(reactors: [Deliver()], configuration: ParityHarness.defaultConfiguration(), options: options())
        defer { manager.invalidateAndCancel() }
        let url = server.url("/503-endless")
        let session = manager.session
        let error = try await ended { _ = try await session.data(from: url) }
        assertTooLarge(error, status: 503, limit: limit)
        XCTAssertEqual((error as? URLTaskError)?.component?.name, "Deliver")
        let large = server.url("/503-3mib")
        assertTooLarge(try await ended { _ = try await manager.data(from: large) }, status: 503, limit: limit)
    }

    /// A refresh: the first 401 is its to read (its first MiB), the answer after the requeue may
    /// reach the caller, so it is held whole.
    struct Refresh: URLTaskReactor {
        let runs: CallCounter
        let firstBody: LockedBox<Int>
        var configuration: URLTaskReactorConfiguration { .authentication }
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 401 }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
            runs.increment()
            firstBody.withLock { $0 = body.count }
        }
    }

    func testARefreshReadsTheFirstMiBThenTheRequeuedAnswerIsBounded() async throws {
        let runs = CallCounter()
        let firstBody = LockedBox(0)
        let manager = URLTaskManager(
            interceptors: [HeaderInterceptor(["Authorization": "Bearer fresh"])],
            reactors: [Refresh(runs: runs, firstBody: firstBody)], configuration: ParityHarness.defaultConfiguration(), options: options())
        defer { manager.invalidateAndCancel() }
        let url = server.url("/bearer-401-endless")
        let error = try await ended { _ = try await manager.session.data(from: url) }
        XCTAssertEqual(runs.value, 1, "the first endless 401 was reacted to: its transfer was stopped after the first MiB")
        XCTAssertEqual(firstBody.snapshot, TaskStateMachine.reactionBodyLimit)
        assertTooLarge(error, status: 401, limit: limit)
    }

    func testARejectedEndlessAnswerFailsWithoutWaitingForItsEnd() async throws {
        var options = options()
        options.responseValidation = .successfulStatusCodes
        let manager = URLTaskManager(configuration: ParityHarness.defaultConfiguration(), options: options)
        defer { manager.invalidateAndCancel() }
        let url = server.url("/500-endless")
        let large = server.url("/500-3mib")
        for call in [{ _ = try await manager.session.data(from: url) }, { _ = try await manager.data(from: large) }]
            as [@Sendable () async throws -> Void]
        {
            let error = try await ended(within: .seconds(25), call)
            XCTAssertEqual((error as? URLTaskError)?.code, .responseRejected, "\(String(describing: error))")
            XCTAssertEqual((error as? URLTaskError)?.bodyPrefix?.count, ResponseValidation.bodyPrefixLimit)
        }
    }
}
