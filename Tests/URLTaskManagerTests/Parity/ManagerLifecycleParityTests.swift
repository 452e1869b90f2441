import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
@testable import URLTaskManager
import XCTest
import TestSupport

/// Invalidation and deallocation behave like a plain session's, and several managers in one
/// process each route only their own tasks.
final class ManagerLifecycleParityTests: XCTestCase {
    private var harness: ParityHarness!
    /// One gate per side and name, opened in tearDown at the latest.
    private let gates = GateBook()

    override func setUpWithError() throws {
        harness = try ParityHarness()
        let gates = self.gates
        harness.route("/held") { side, request in
            gates.gate("\(side.rawValue)-\(request.query ?? "")").wait(timeout: .seconds(30))
            return ParityHarness.echo(request)
        }
        harness.route("/echo") { ParityHarness.echo($1) }
    }

    override func tearDown() {
        gates.openAll()
        harness.shutdown()
        harness = nil
    }

    // MARK: Invalidation

    struct Invalidated: Equatable, CustomStringConvertible {
        var delegateTask: Outcome
        var completionTask: Outcome
        var invalidations: Int
        var events: [String]
        var description: String {
            "delegate task: \(delegateTask.summary); completion task: \(completionTask.summary); invalidations \(invalidations); \(events)"
        }
    }

    func testInvalidateAndCancelCancelsRunningTasks() async throws {
        let result = try await harness.both { client in
            let delegate = RecordingDelegate()
            let session = client.makeSession(delegate: delegate)
            let streamed = session.dataTask(with: client.url("/held?a"))
            streamed.resume()
            let (buffered, done, calls) =
                (client.start { _, handler in session.dataTask(with: client.url("/held?b"), completionHandler: handler) })
            buffered.resume()
            _ = try await harness.server.waitForRequests(path: client.path("/held"), count: 2)

            client.invalidateAndCancel(session)

            try await delegate.completion(of: streamed)
            let completionOutcome = try await done.wait()
            _ = try await delegate.invalidated.wait()
            XCTAssertEqual(calls.value, 1)
            return Invalidated(
                delegateTask: delegate.outcome(for: streamed, side: client.side), completionTask: completionOutcome,
                invalidations: delegate.invalidations, events: delegate.sessionEvents)
        }
        XCTAssertParity(result, "invalidateAndCancel() with two running tasks")
        XCTAssertTrue(result.manager.delegateTask.isCancelled)
        XCTAssertTrue(result.manager.completionTask.isCancelled)
        XCTAssertEqual(result.manager.invalidations, 1)
    }

    func testFinishTasksAndInvalidateLetsRunningTasksFinish() async throws {
        let result = try await harness.both { client in
            let delegate = RecordingDelegate()
            let session = client.makeSession(delegate: delegate)
            let task = session.dataTask(with: client.url("/held?finish"))
            task.resume()
            _ = try await harness.server.waitForRequests(path: client.path("/held"), count: 1)

            client.finishTasksAndInvalidate(session)
            XCTAssertEqual(delegate.invalidations, 0, "\(client.side): must wait for the running task")
            gates.gate("\(client.side.rawValue)-finish").open()

            try await delegate.completion(of: task)
            _ = try await delegate.invalidated.wait()
            return Invalidated(
                delegateTask: delegate.outcome(for: task, side: client.side),
                completionTask: delegate.outcome(for: task, side: client.side),
                invalidations: delegate.invalidations, events: delegate.sessionEvents)
        }
        XCTAssertParity(result, "finishTasksAndInvalidate() with a running task")
        XCTAssertEqual(result.manager.delegateTask.status, 200)
        XCTAssertEqual(result.manager.events, ["complete", "invalid"])
    }

    // MARK: Several managers

    /// Two sessions (plain) or two managers: invalidating one leaves the other working.
    func testInvalidatingOneSessionLeavesTheOtherAlone() async throws {
        struct TwoSessions: Equatable {
            var invalidated: Outcome
            var survivorHeld: Outcome
            var survivorNew: Outcome
        }
        let result = try await harness.both { client in
            let first = client.makeSession()
            let second = client.makeSession()
            let (firstTask, firstDone, _) = client.start { _, handler in
                first.dataTask(with: client.url("/held?first"), completionHandler: handler)
            }
            let (secondTask, secondDone, _) = client.start { _, handler in
                second.dataTask(with: client.url("/held?second"), completionHandler: handler)
            }
            firstTask.resume()
            secondTask.resume()
            _ = try await harness.server.waitForRequests(path: client.path("/held"), count: 2)

            client.invalidateAndCancel(first)
            let invalidated = try await firstDone.wait()
            gates.gate("\(client.side.rawValue)-second").open()
            let survivorHeld = try await secondDone.wait()
            let survivorNew = await client.asyncData(URLRequest(url: client.url("/echo")), session: second)
            return TwoSessions(invalidated: invalidated, survivorHeld: survivorHeld, survivorNew: survivorNew)
        }
        XCTAssertParity(result, "two sessions, invalidateAndCancel() one")
        XCTAssertTrue(result.manager.invalidated.isCancelled)
        XCTAssertEqual(result.manager.survivorHeld.status, 200)
        XCTAssertEqual(result.manager.survivorNew.status, 200)
    }

    /// Three managers, each marking its requests with a header interceptor, run interleaved
    /// concurrent tasks: every request reaches the server marked by the manager whose session
    /// made it. Then one manager is dropped and a new one routes its own tasks too.
    func testSeveralManagersEachRouteOnlyTheirOwnTasks() async throws {
        let configuration = ParityHarness.defaultConfiguration()
        var managers: [String: URLTaskManager] = [:]
        for name in ["A", "B", "C"] {
            managers[name] = URLTaskManager(interceptors: [HeaderInterceptor(["X-Manager": .fixed(name)])], configuration: configuration)
        }
        let plain = URLSession(configuration: configuration)
        defer { plain.invalidateAndCancel() }
        let server = harness.server

        func runInterleaved(_ sessions: [String: URLSession], rounds: Int) async throws {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for round in 0..<rounds {
                    for (name, session) in sessions {
                        let url = server.url("/by/\(name)?round=\(round)")
                        group.addTask { (try await session.data(from: url).1 as? HTTPURLResponse)?.statusCode ?? -1 }
                    }
                }
                for try await status in group { XCTAssertEqual(status, 200) }
            }
        }
        for name in ["A", "B", "C", "plain", "D"] {
            server.route(nil, "/by/\(name)") { ParityHarness.echo($0) }
        }

        var sessions = managers.mapValues(\.session)
        sessions["plain"] = plain
        try await runInterleaved(sessions, rounds: 10)
        for name in ["A", "B", "C"] {
            let records = server.requests(path: "/by/\(name)")
            XCTAssertEqual(records.count, 10, name)
            XCTAssertEqual(
                Set(records.compactMap { $0.headers["X-Manager"] }), [name], "requests of \(name)'s session went through another manager")
        }
        XCTAssertEqual(
            server.requests(path: "/by/plain").compactMap { $0.headers["X-Manager"] }, [], "a plain session must not be intercepted")

        // Drop A (with its session); a new manager D routes its own tasks.
        weak let droppedA = managers.removeValue(forKey: "A")
        XCTAssertNil(droppedA)
        managers["D"] = URLTaskManager(interceptors: [HeaderInterceptor(["X-Manager": .fixed("D")])], configuration: configuration)
        server.resetRecords()
        sessions = managers.mapValues(\.session)
        try await runInterleaved(sessions, rounds: 5)
        for name in ["B", "C", "D"] {
            let records = server.requests(path: "/by/\(name)")
            XCTAssertEqual(records.count, 5, name)
            XCTAssertEqual(Set(records.compactMap { $0.headers["X-Manager"] }), [name], name)
        }

        // Invalidating B leaves C and D alone.
        managers["B"]!.invalidateAndCancel()
        server.resetRecords()
        try await runInterleaved(["C": managers["C"]!.session, "D": managers["D"]!.session], rounds: 3)
        XCTAssertEqual(server.requests(path: "/by/C").compactMap { $0.headers["X-Manager"] }, ["C", "C", "C"])
        XCTAssertEqual(server.requests(path: "/by/D").compactMap { $0.headers["X-Manager"] }, ["D", "D", "D"])
        for manager in managers.values { manager.invalidateAndCancel() }
    }
}
