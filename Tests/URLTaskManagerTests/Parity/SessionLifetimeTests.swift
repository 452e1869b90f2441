import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
@testable import URLTaskManager
import XCTest
import TestSupport

/// The session owns its pipeline: it works without its manager, runs only its own
/// interceptors, and its invalidation or release ends everything the manager set up.
final class SessionLifetimeTests: XCTestCase {
    private var server: LoopbackServer!
    private let gates = GateBook()

    override func setUpWithError() throws {
        server = try LoopbackServer()
        let gates = self.gates
        server.route(nil, prefix: "/held") { request in
            gates.gate(request.query ?? "").wait(timeout: .seconds(30))
            return .text(request.headers["X-Manager"] ?? "none")
        }
        server.route(nil, prefix: "/by") { .text($0.headers["X-Manager"] ?? "none") }
    }

    override func tearDown() {
        gates.openAll()
        server.shutdown()
        server = nil
    }

    private static func marking(_ name: String, _ extra: [any URLTaskInterceptor] = []) -> URLTaskManager {
        URLTaskManager(interceptors: [HeaderInterceptor(["X-Manager": .fixed(name)])] + extra)
    }

    /// The session of a manager marking its requests `name`, the manager itself dropped: the
    /// drop-in line. Fails the test if anything but the session kept the manager.
    private static func sessionOfDroppedManager(_ name: String, file: StaticString = #filePath, line: UInt = #line) -> URLSession {
        weak var weakManager: URLTaskManager?
        let session: URLSession = {
            let manager = marking(name)
            weakManager = manager
            return manager.session
        }()
        XCTAssertNil(weakManager, "nothing but the caller keeps a manager", file: file, line: line)
        return session
    }

    /// Completes a completion-handler task exactly once, or records that it did not.
    private func start(_ session: URLSession, _ url: URL) -> (task: URLSessionDataTask, done: Latch<Fetched>, calls: CallCounter) {
        let done = Latch<Fetched>("completion of \(url.path)")
        let calls = CallCounter()
        let task = session.dataTask(with: url) { data, response, error in
            calls.increment()
            done.fulfill(Fetched(data: data, response: response, error: error))
        }
        return (task, done, calls)
    }

    // MARK: Lifetime

    /// The drop-in line keeps nothing but the session, and the session works.
    func testTheSessionOfATemporaryManagerWorks() async throws {
        let session = Self.sessionOfDroppedManager("temporary")
        defer { session.finishTasksAndInvalidate() }

        let (data, response) = try await session.data(from: server.url("/by/temporary"))
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "temporary", "the interceptor of the session's own manager ran")
    }

    // MARK: Isolation

    /// Manager A is dropped while its session is kept, then B is created: A's session still
    /// runs A's interceptors, B's session B's, interleaved and concurrent.
    func testASessionOutlivingItsManagerRunsOnlyItsOwnInterceptors() async throws {
        let sessionA = Self.sessionOfDroppedManager("A")
        let b = Self.marking("B")
        defer {
            sessionA.invalidateAndCancel()
            b.invalidateAndCancel()
        }
        let server = self.server!
        try await withThrowingTaskGroup(of: Void.self) { group in
            for round in 0..<20 {
                for (name, session) in [("A", sessionA), ("B", b.session)] {
                    group.addTask { _ = try await session.data(from: server.url("/by/\(name)?\(round)")) }
                }
            }
            try await group.waitForAll()
        }
        for name in ["A", "B"] {
            let marks = server.requests(path: "/by/\(name)").map { $0.headers["X-Manager"] }
            XCTAssertEqual(marks.count, 20, name)
            XCTAssertEqual(Set(marks), [name], "a request of \(name)'s session went through another manager's chain")
        }
    }

    // MARK: Invalidation on the session itself

    /// `invalidateAndCancel()` called on `manager.session` (not the manager): a running task
    /// and a task held in a batch both end once with `cancelled`, the held one is never sent,
    /// and once the session is released (and the abandoned transfer has ended) the pipeline and
    /// the inner session are freed.
    func testInvalidateAndCancelOnTheSessionCancelsAndReleasesEverything() async throws {
        let released = Latch<Void>("the pipeline released")
        weak var weakPipeline: Pipeline?
        weak var weakTransport: Transport?
        weak var weakSession: URLSession?
        do {
            let session: URLSession
            do {
                let manager = Self.marking(
                    "A",
                    [
                        BatchInterceptor(size: 100) { $0.url?.path.hasPrefix("/by/batched") == true },
                        ReleaseSentinel { released.fulfill(()) },
                    ])
                weakPipeline = manager.pipeline
                weakTransport = manager.pipeline.transport
                session = manager.session
            }
            weakSession = session
            let running = start(session, server.url("/held?running"))
            let held = start(session, server.url("/by/batched"))
            running.task.resume()
            held.task.resume()
            _ = try await server.waitForRequests(path: "/held", count: 1)

            session.invalidateAndCancel()

            for (name, started) in [("running", running), ("held", held)] {
                let outcome = try await started.done.wait()
                XCTAssertEqual(outcome.urlErrorCode, .cancelled, "\(name): \(outcome.label)")
                XCTAssertEqual(started.calls.value, 1, name)
            }
            XCTAssertEqual(server.requestCount(path: "/by/batched"), 0, "a held task is never sent after the cancel")
            // The session's invalidation ends its pipeline; a transfer still being handed over
            // (created, not yet counted in) delays that by as long as the hand-over takes.
            try await waitUntil("the session's invalidation ends its pipeline") { weakPipeline?.isInvalidated == true }
            // The running transfer was abandoned, not cancelled (see `Pipeline.abandonsTransfers`):
            // the inner session is released once the server answers it.
            gates.gate("running").open()
        }
        try await released.wait(timeout: .seconds(10))
        XCTAssertNil(weakSession)
        XCTAssertNil(weakPipeline)
        try await waitUntil("the inner session lets go of its delegate") { weakTransport == nil }
    }

    /// `finishTasksAndInvalidate()` called on `manager.session`: the running task finishes
    /// through its own chain, then the inner session is released.
    func testFinishTasksAndInvalidateOnTheSessionLetsTheTaskFinishFirst() async throws {
        let manager = Self.marking("A")
        let pipeline = manager.pipeline
        let session = manager.session
        let running = start(session, server.url("/held?finishing"))
        running.task.resume()
        _ = try await server.waitForRequests(path: "/held", count: 1)

        session.finishTasksAndInvalidate()
        XCTAssertFalse(pipeline.isInvalidated, "a running task keeps the inner session")
        gates.gate("finishing").open()

        let outcome = try await running.done.wait()
        XCTAssertEqual(outcome.status, 200)
        XCTAssertEqual(outcome.text, "A")
        XCTAssertEqual(running.calls.value, 1)
        try await waitUntil("the pipeline ends after its last task") { pipeline.isInvalidated }
    }

    /// A task resumed right before `finishTasksAndInvalidate()` has not reached the bridge yet
    /// (its `startLoading` is queued): it is still sent, as by a plain session.
    func testATaskResumedJustBeforeFinishTasksAndInvalidateIsSent() async throws {
        for round in 0..<30 {
            let manager = Self.marking("R")
            let started = start(manager.session, server.url("/by/race?\(round)"))
            started.task.resume()
            manager.session.finishTasksAndInvalidate()
            let outcome = try await started.done.wait(timeout: .seconds(10))
            XCTAssertEqual(outcome.status, 200, "round \(round): \(outcome.label)")
            XCTAssertEqual(outcome.text, "R", "round \(round)")
        }
    }

    // MARK: Release

    /// 100 managers, each created, used for one request and dropped with its session without
    /// invalidation: every pipeline, inner session and outer session is freed, and the open
    /// descriptors come back to where they started (the server's side of each connection
    /// closes once curl closes its own). A plain session does the same loop first as a control.
    func testReleasedSessionsFreeEverything() async throws {
        let url = server.url("/by/loop")
        func loop(_ label: String, _ make: () -> (URLSession, [AnyObject])) async throws {
            let before = try XCTUnwrap(OpenDescriptors.count)
            var weakObjects: [WeakBox] = []
            for _ in 0..<100 {
                let (session, internals) = make()
                _ = try await session.data(from: url)
                weakObjects.append(WeakBox(session))
                weakObjects += internals.map(WeakBox.init)
            }
            try await waitUntil("\(label): every session and pipeline freed") { weakObjects.allSatisfy { $0.object == nil } }
            try await waitUntil("\(label): descriptors back to \(before)") { (OpenDescriptors.count ?? .max) <= before }
        }
        try await loop("plain") { (URLSession(configuration: .default), []) }
        try await loop("manager") {
            let manager = Self.marking("L")
            return (manager.session, [manager, manager.pipeline, manager.pipeline.transport])
        }
    }
}

private struct WeakBox {
    weak var object: AnyObject?
    init(_ object: AnyObject) { self.object = object }
}
