import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
@testable import URLTaskManager
import XCTest
import TestSupport

/// The finishing path: a session told to finish (or to cancel) while its tasks are starting and
/// ending, several sessions at once, so corelibs' shared work queue adds and removes tasks all the
/// while. The pipeline waits for the tasks the session resumed before it was told to finish
/// (`Platform.afterTasksResumedSoFar`), a hop that reads none of corelibs' state: its
/// `getAllTasks`, used for that until 0.2, read the task registry off its queue and crashed a
/// CI run (SIGILL).
final class FinishingStressTests: XCTestCase {
    private enum Ending: CaseIterable {
        case sessionFinishTasksAndInvalidate
        case managerFinishTasksAndInvalidate
        case sessionInvalidateAndCancel
    }

    /// The barrier needs nothing from the caller's delegate queue (where `getAllTasks` answered,
    /// reading the registry): with that queue suspended, the pipeline still finishes, and the
    /// streams of events end.
    func testFinishingNeedsNothingFromTheDelegateQueue() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/f") { _ in .text("ok") }
        let delegateQueue = OperationQueue()
        delegateQueue.maxConcurrentOperationCount = 1
        let manager = URLTaskManager(configuration: .ephemeral, delegate: RecordingDelegate(), delegateQueue: delegateQueue)
        // A task that ran to its end, so the session has had a registry entry come and go.
        let (_, response) = try await manager.session.data(from: server.url("/f"))
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)

        let events = manager.events()
        let ended = Latch<Void>("the pipeline finished")
        let reader = Task {
            for await _ in events {}
            ended.fulfill(())
        }
        defer { reader.cancel() }
        delegateQueue.isSuspended = true
        defer { delegateQueue.isSuspended = false }
        manager.session.finishTasksAndInvalidate()
        try await ended.wait(timeout: .seconds(10))
        XCTAssertTrue(manager.pipeline.isInvalidated, "the inner session is released")
    }

    /// Rounds of four sessions, each resuming 24 tasks from two threads and then ending one of
    /// three ways, until 40 rounds or a 6-second budget: every task completes exactly once with
    /// an answer its ending allows (200; or `cancelled` for a cancelled session), and every
    /// pipeline is released.
    func testSessionsFinishWhileTheirTasksStartAndEnd() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let delays = LockedBox(SplitMix64(state: 11))
        server.route(nil, prefix: "/f") { _ in
            let micros = delays.withLock { Int($0.next() % 2_000) }
            return ServerResponse.text("ok").with { $0.delay = .microseconds(micros) }
        }
        let budget = ContinuousClock.now + .seconds(6)
        var rounds = 0
        var tally: [String: Int] = [:]
        while rounds < 40, ContinuousClock.now < budget {
            let round = rounds
            let labels = try await withThrowingTaskGroup(of: [String].self) { group in
                for index in 0..<4 {
                    let ending = Ending.allCases[(round + index) % Ending.allCases.count]
                    group.addTask { try await Self.run(ending, server: server, context: "round \(round), session \(index), \(ending)") }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            for label in labels { tally[label, default: 0] += 1 }
            rounds += 1
        }
        printFigures("FinishingStressTests: \(rounds) rounds, outcomes \(tally.sorted { $0.key < $1.key })")
        XCTAssertGreaterThanOrEqual(rounds, 3, "too few rounds to stress anything")
    }

    /// One session: 24 tasks resumed (half of them from another thread), then the ending, then
    /// the checks. Returns each task's outcome label.
    private static func run(_ ending: Ending, server: LoopbackServer, context: String) async throws -> [String] {
        let released = Latch<Void>("the pipeline released (\(context))")
        var manager: URLTaskManager? = URLTaskManager(
            interceptors: [
                // Every fourth task waits in a batch (of 3, or 1 ms), where an ending must reach it.
                BatchInterceptor(size: 3, window: .milliseconds(1)) { $0.url?.query?.hasPrefix("held") == true },
                ReleaseSentinel { released.fulfill(()) },
            ],
            configuration: .ephemeral
        )
        var session: URLSession? = manager!.session
        var handlers: [(done: Latch<Fetched>, calls: CallCounter)] = []
        do {
            // In a scope of its own: a task keeps its session (and so the pipeline) while it lives.
            var tasks: [URLSessionTask] = []
            for index in 0..<24 {
                let done = Latch<Fetched>("task \(index) (\(context))")
                let calls = CallCounter()
                tasks.append(
                    session!.dataTask(with: server.url("/f?\(index % 4 == 0 ? "held" : "")\(index)")) { data, response, error in
                        calls.increment()
                        done.fulfill(Fetched(data: data, response: response, error: error))
                    })
                handlers.append((done, calls))
            }
            // Half resumed here, half from another thread; all before the ending (a task resumed
            // after it is one the session no longer accepts).
            let otherHalf = Latch<Void>("the other half resumed (\(context))")
            let late = Array(tasks[12...])
            DispatchQueue.global().async {
                for task in late { task.resume() }
                otherHalf.fulfill(())
            }
            for task in tasks[..<12] { task.resume() }
            try await otherHalf.wait(timeout: .seconds(10))
        }

        switch ending {
        case .sessionFinishTasksAndInvalidate: session!.finishTasksAndInvalidate()
        case .managerFinishTasksAndInvalidate: manager!.finishTasksAndInvalidate()
        case .sessionInvalidateAndCancel: session!.invalidateAndCancel()
        }
        manager = nil
        session = nil

        var labels: [String] = []
        for (index, handler) in handlers.enumerated() {
            let fetched = try await handler.done.wait(timeout: .seconds(10))
            labels.append(fetched.status.map { "\($0)" } ?? fetched.urlErrorCode.map { "URLError \($0.rawValue)" } ?? fetched.label)
            if ending == .sessionInvalidateAndCancel {
                XCTAssertTrue(fetched.status == 200 || fetched.urlErrorCode == .cancelled, "task \(index): \(fetched.label) (\(context))")
            } else {
                XCTAssertEqual(fetched.status, 200, "task \(index): \(fetched.label) (\(context))")
            }
        }
        try await released.wait(timeout: .seconds(10))
        for (index, handler) in handlers.enumerated() {
            XCTAssertEqual(handler.calls.value, 1, "completion handler \(index) (\(context))")
        }
        return labels
    }
}
