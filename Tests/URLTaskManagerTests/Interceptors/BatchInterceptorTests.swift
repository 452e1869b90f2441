import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
import TestSupport

/// Batches over real HTTP: what the server sees while tasks are held and when they go.
final class BatchInterceptorTests: OKServerTestCase {
    /// Starts `count` tasks for `path`; each outcome is appended to `outcomes` as it ends.
    private func start(_ count: Int, path: String, on manager: URLTaskManager, into outcomes: ProbeLog<Fetched>) {
        let request = URLRequest(url: server.url(path))
        for _ in 0..<count {
            Task { outcomes.append(await fetched(manager.session, request)) }
        }
    }

    func testNineHeldTasksGoOnlyWhenTheTenthArrivesAllInOneBurst() async throws {
        let probe = ProbeLog<ProbeEvent>()
        let outcomes = ProbeLog<Fetched>()
        let manager = URLTaskManager(interceptors: [ProbeInterceptor(BatchInterceptor(size: 10), log: probe)])
        defer { manager.invalidateAndCancel() }

        start(9, path: "/b", on: manager, into: outcomes)
        let nine = try await probe.wait(count: 9)
        XCTAssertEqual(nine.map(\.decision), Array(repeating: .hold, count: 9))
        XCTAssertEqual(server.requestCount(path: "/b"), 0, "held tasks must not reach the server")
        XCTAssertEqual(outcomes.count, 0)

        let tenthStarted = ContinuousClock.now
        start(1, path: "/b", on: manager, into: outcomes)
        let arrived = try await server.waitForRequests(path: "/b", count: 10)
        XCTAssertTrue(arrived.allSatisfy { $0.arrivedAt >= tenthStarted }, "a held task went before the tenth arrived")
        XCTAssertLessThan(arrivalSpread(arrived), .milliseconds(200), "the ten must arrive in one burst")
        let results = try await outcomes.wait(count: 10)
        XCTAssertEqual(results.map(\.status), Array(repeating: 200, count: 10))
        XCTAssertEqual(manager.heldTaskCount(interceptorAt: 0), 0)
        let events = probe.all
        XCTAssertEqual(events.count, 10, "each task is intercepted once")
        // The tenth call starts only once the ninth hold has landed (one at a time).
        XCTAssertEqual(events.last?.batchCount, 9, "the tenth must see the nine held tasks")
        XCTAssertEqual(events.last?.decision, .release)
    }

    /// Lets tasks through in groups of `parties`, all at the same moment.
    struct Barrier: URLTaskInterceptor {
        final class Arrivals: @unchecked Sendable {  // `arrived` and `waiting` are guarded by `lock`.
            let lock = NSLock()
            var arrived = 0
            var waiting: [CheckedContinuation<Void, Never>] = []
        }

        let parties: Int
        let arrivals = Arrivals()

        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready: [CheckedContinuation<Void, Never>] = arrivals.lock.withLock {
                    arrivals.arrived += 1
                    arrivals.waiting.append(continuation)
                    guard arrivals.arrived % parties == 0 else { return [] }
                    defer { arrivals.waiting = [] }
                    return arrivals.waiting
                }
                for waiter in ready { waiter.resume() }
            }
            return .execute
        }
    }

    func testTasksArrivingTogetherStillReleaseExactlyAtTheSize() async throws {
        let probe = ProbeLog<ProbeEvent>()
        let outcomes = ProbeLog<Fetched>()
        let manager = URLTaskManager(
            interceptors: [Barrier(parties: 5), ProbeInterceptor(BatchInterceptor(size: 5), log: probe)],
            options: .init(maximumHoldTime: .seconds(20))
        )
        defer { manager.invalidateAndCancel() }

        for round in 1...10 {
            start(5, path: "/together", on: manager, into: outcomes)
            let results = try await outcomes.wait(count: 5 * round, timeout: .seconds(5))
            XCTAssertEqual(results.compactMap(\.status), Array(repeating: 200, count: 5 * round))
        }
        let decisions = probe.all
        XCTAssertEqual(decisions.filter { $0.decision == .release }.count, 10, "exactly one release per group of five")
        XCTAssertEqual(decisions.filter { $0.decision == .release }.map(\.batchCount), Array(repeating: 4, count: 10))
        XCTAssertEqual(manager.heldTaskCount(interceptorAt: 1), 0)
    }

    func testTimeWindowReleasesTheBatchOnItsOwn() async throws {
        let probe = ProbeLog<ProbeEvent>()
        let outcomes = ProbeLog<Fetched>()
        let manager = URLTaskManager(interceptors: [ProbeInterceptor(BatchInterceptor(window: .milliseconds(300)), log: probe)])
        defer { manager.invalidateAndCancel() }

        let firstStarted = ContinuousClock.now
        start(1, path: "/w", on: manager, into: outcomes)
        try await probe.wait(count: 1)
        start(2, path: "/w", on: manager, into: outcomes)
        let held = try await probe.wait(count: 3)
        XCTAssertEqual(held.map(\.decision), [.hold, .hold, .hold])
        XCTAssertEqual(server.requestCount(path: "/w"), 0)

        let arrived = try await server.waitForRequests(path: "/w", count: 3, timeout: .seconds(5))
        for request in arrived {
            XCTAssertGreaterThanOrEqual(
                firstStarted.duration(to: request.arrivedAt), .milliseconds(295), "released before the window ended")
            XCTAssertLessThan(firstStarted.duration(to: request.arrivedAt), .seconds(2), "released long after the window ended")
        }
        XCTAssertLessThan(arrivalSpread(arrived), .milliseconds(100), "the window releases everything together")
        let results = try await outcomes.wait(count: 3)
        XCTAssertEqual(results.map(\.status), [200, 200, 200])
    }

    func testFlushReleasesHeldBatches() async throws {
        let probe = ProbeLog<ProbeEvent>()
        let outcomes = ProbeLog<Fetched>()
        let manager = URLTaskManager(interceptors: [
            ProbeInterceptor(BatchInterceptor { $0.url?.path == "/a" }, log: probe),
            ProbeInterceptor(BatchInterceptor { $0.url?.path == "/b" }, log: probe),
        ])
        defer { manager.invalidateAndCancel() }

        start(2, path: "/a", on: manager, into: outcomes)
        start(3, path: "/b", on: manager, into: outcomes)
        // /a: held by the first (2 holds); /b: passed by the first, held by the second (3 + 3).
        let events = try await probe.wait(count: 8)
        XCTAssertEqual(events.filter { $0.decision == .hold }.count, 5)
        XCTAssertEqual(server.requests.count, 0)

        manager.flush(interceptorAt: 1)
        let b = try await server.waitForRequests(path: "/b", count: 3)
        XCTAssertLessThan(arrivalSpread(b), .milliseconds(200))
        try await outcomes.wait(count: 3)
        XCTAssertEqual(server.requestCount(path: "/a"), 0, "flushing one interceptor leaves the other's batch held")
        XCTAssertEqual(manager.heldTaskCount(interceptorAt: 0), 2)

        manager.flush()
        let a = try await server.waitForRequests(path: "/a", count: 2)
        XCTAssertLessThan(arrivalSpread(a), .milliseconds(200))
        let results = try await outcomes.wait(count: 5)
        XCTAssertEqual(results.map(\.status), Array(repeating: 200, count: 5))
        XCTAssertEqual(manager.heldTaskCount(interceptorAt: 0), 0)
        XCTAssertEqual(manager.heldTaskCount(interceptorAt: 1), 0)
    }

    func testCancellingAHeldTaskCompletesItPromptlyAndTheOthersStillGo() async throws {
        let probe = ProbeLog<ProbeEvent>()
        let outcomes = ProbeLog<(index: Int, result: Fetched)>()
        let manager = URLTaskManager(interceptors: [ProbeInterceptor(BatchInterceptor(), log: probe)])
        defer { manager.invalidateAndCancel() }

        var tasks: [URLSessionDataTask] = []
        for index in 0..<3 {
            let task = manager.session.dataTask(with: server.url("/c\(index)")) { _, response, error in
                let result: Fetched =
                    error.map { .failure($0) }
                    ?? .response(status: (response as? HTTPURLResponse)?.statusCode ?? -1, headers: [:], body: Data())
                outcomes.append((index, result))
            }
            task.resume()
            tasks.append(task)
        }
        try await probe.wait(count: 3)

        let cancelled = ContinuousClock.now
        tasks[1].cancel()
        let first = try await outcomes.wait(count: 1, timeout: .seconds(2))
        XCTAssertEqual(first.first?.index, 1)
        XCTAssertEqual(first.first?.result.urlErrorCode, .cancelled, "\(String(describing: first.first?.result))")
        XCTAssertLessThan(cancelled.duration(to: .now), .milliseconds(500), "a held task must not wait for its batch to be cancelled")

        manager.flush()
        let results = try await outcomes.wait(count: 3)
        let byIndex = Dictionary(uniqueKeysWithValues: results.map { ($0.index, $0.result) })
        XCTAssertEqual(byIndex[0]?.status, 200)
        XCTAssertEqual(byIndex[2]?.status, 200)
        XCTAssertEqual(Set(server.requests.map(\.path)), ["/c0", "/c2"], "the cancelled task must never be sent")
        XCTAssertEqual(manager.heldTaskCount(interceptorAt: 0), 0)
    }

    func testMaximumHoldTimeFailsAHeldTask() async throws {
        let probe = ProbeLog<ProbeEvent>()
        let outcomes = ProbeLog<Fetched>()
        let manager = URLTaskManager(
            interceptors: [ProbeInterceptor(BatchInterceptor(), log: probe)],
            options: .init(maximumHoldTime: .milliseconds(200))
        )
        defer { manager.invalidateAndCancel() }

        let started = ContinuousClock.now
        start(1, path: "/forgotten", on: manager, into: outcomes)
        let result = try await outcomes.wait(count: 1, timeout: .seconds(3)).first
        let elapsed = started.duration(to: .now)

        guard let failure = result?.taskError, failure.code == .holdTimedOut, let interceptor = failure.component?.name,
            let after = failure.limit
        else {
            return XCTFail("expected URLTaskError.holdTimedOut, got \(String(describing: result))")
        }
        XCTAssertEqual(interceptor, "ProbeInterceptor<BatchInterceptor>")
        XCTAssertEqual(after, .milliseconds(200))
        XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(195))
        XCTAssertLessThan(elapsed, .seconds(2))
        XCTAssertEqual(probe.all.map(\.decision), [.hold])
        XCTAssertEqual(manager.heldTaskCount(interceptorAt: 0), 0, "a timed-out task leaves its batch")
        XCTAssertEqual(server.requests.count, 0)
    }

    func testInvalidateAndCancelCompletesHeldTasksWithCancelledAndSendsNothing() async throws {
        let probe = ProbeLog<ProbeEvent>()
        let outcomes = ProbeLog<Fetched>()
        let manager = URLTaskManager(interceptors: [ProbeInterceptor(BatchInterceptor(), log: probe)])

        start(3, path: "/doomed", on: manager, into: outcomes)
        try await probe.wait(count: 3)
        manager.invalidateAndCancel()

        let results = try await outcomes.wait(count: 3, timeout: .seconds(2))
        XCTAssertEqual(results.map(\.urlErrorCode), [.cancelled, .cancelled, .cancelled], "\(results)")
        // A task whose hold took effect just after the batch was emptied is cancelled by the
        // session, which reports the error itself; the task leaves the batch as its cancel
        // reaches the pipeline, a moment after its caller heard.
        try await waitUntil("every task out of the batch") { manager.heldTaskCount(interceptorAt: 0) == 0 }
        manager.flush()
        XCTAssertEqual(server.requests.count, 0)
    }

    // MARK: A released task is no longer held

    /// Holds new tasks (`.authentication`) until the test lets it finish.
    struct BlockingRefresh: URLTaskReactor {
        let started: ProbeLog<Int>
        let proceed: ProbeLog<Bool>
        var configuration: URLTaskReactorConfiguration { .authentication }
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 401 }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
            started.append(1)
            try await proceed.wait(count: 1, timeout: .seconds(10))
        }
    }

    func testAReleasedTaskIsNoLongerSubjectToMaximumHoldTime() async throws {
        let served = CallCounter()
        server.route("/trigger") { _ in served.increment() == 1 ? .status(401) : .text("ok") }
        let probe = ProbeLog<ProbeEvent>()
        let outcomes = ProbeLog<(path: String, result: Fetched)>()
        let started = ProbeLog<Int>()
        let proceed = ProbeLog<Bool>()
        let manager = URLTaskManager(
            interceptors: [ProbeInterceptor(BatchInterceptor { $0.url?.path == "/held" }, log: probe)],
            reactors: [BlockingRefresh(started: started, proceed: proceed)],
            options: .init(maximumHoldTime: .milliseconds(300))
        )
        defer {
            proceed.append(true)
            manager.invalidateAndCancel()
        }
        for path in ["/held", "/trigger"] {
            let request = URLRequest(url: server.url(path))
            if path == "/trigger" { try await probe.wait(count: 1) }  // /held is held first
            Task { outcomes.append((path, await fetched(manager.session, request))) }
        }
        try await started.wait(count: 1)
        // Released while the refresh runs: on its way out /held waits at the refresh's gate.
        manager.flush()

        // Its hold's timer fires 300 ms after the hold; the task is not held any more.
        do {
            let early = try await outcomes.wait(count: 1, timeout: .milliseconds(500))
            XCTFail("a released task ended while waiting for the refresh: \(early)")
        } catch is ProbeLog<(path: String, result: Fetched)>.Timeout {}

        proceed.append(true)
        // After the refresh /held runs the chain again, so it is held again: release it.
        let events = try await probe.wait(count: 4)
        XCTAssertEqual(events.filter { $0.path == "/held" }.map(\.decision), [.hold, .hold])
        manager.flush()
        let results = Dictionary(uniqueKeysWithValues: try await outcomes.wait(count: 2).map { ($0.path, $0.result) })
        XCTAssertEqual(results["/held"]?.status, 200, "\(String(describing: results["/held"]))")
        XCTAssertEqual(results["/trigger"]?.status, 200, "\(String(describing: results["/trigger"]))")
        XCTAssertEqual(server.requestCount(path: "/held"), 1)
    }
}
