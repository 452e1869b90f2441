import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
@testable import URLTaskManager
import XCTest
import TestSupport

/// Ending a session while its tasks are everywhere in the pipeline: held in a batch, being
/// intercepted, being handed to the inner session, on the wire. Every iteration starts 50
/// tasks of three kinds (completion handler, async `data(for:)`, session delegate), then after
/// a random 0-5 ms ends the session one of four ways. Every task must complete exactly once,
/// with an answer its ending allows, and the process must neither crash nor hang.
final class InvalidationStressTests: XCTestCase {
    enum Ending: CaseIterable {
        case sessionInvalidateAndCancel
        case managerInvalidateAndCancel
        case sessionFinishTasksAndInvalidate
        /// Every reference to the manager and its session is dropped; running tasks keep it.
        case dropEverything

        var cancels: Bool { self == .sessionInvalidateAndCancel || self == .managerInvalidateAndCancel }
    }

    func testEveryTaskCompletesExactlyOnceWhateverEndsTheSession() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let delays = LockedBox(SplitMix64(state: 7))
        server.route(nil, prefix: "/s") { _ in
            let micros = delays.withLock { Int($0.next() % 3_000) }
            return ServerResponse.text("ok").with { $0.delay = .microseconds(micros) }
        }
        let seed = UInt64(ProcessInfo.processInfo.environment["STRESS_SEED"] ?? "") ?? UInt64.random(in: 1...UInt64.max)
        var rng = SplitMix64(state: seed)
        printFigures("InvalidationStressTests seed \(seed) (STRESS_SEED=\(seed) replays the choices)")
        var tally: [String: Int] = [:]

        for iteration in 0..<100 {
            let ending = Ending.allCases[Int(rng.next() % UInt64(Ending.allCases.count))]
            let pause = Duration.microseconds(Int64(rng.next() % 5_000))
            let context = "seed \(seed), iteration \(iteration), \(ending), after \(pause)"
            let result = try await run(ending: ending, pause: pause, server: server, context: context)
            for label in result { tally[label, default: 0] += 1 }
        }
        printFigures("InvalidationStressTests outcomes: \(tally.sorted { $0.key < $1.key })")
    }

    /// One iteration; returns each task's outcome label.
    private func run(ending: Ending, pause: Duration, server: LoopbackServer, context: String) async throws -> [String] {
        let delegate = RecordingDelegate()
        let released = Latch<Void>("the pipeline released (\(context))")
        var manager: URLTaskManager? = URLTaskManager(
            interceptors: [
                HeaderInterceptor(["X-Stress": "1"]),
                // Every third task waits in a batch of 4 (or 2 ms), where a cancel must reach it.
                BatchInterceptor(size: 4, window: .milliseconds(2)) {
                    $0.url?.query?.hasSuffix("0") == true || $0.url?.query?.hasSuffix("3") == true
                },
                ReleaseSentinel { released.fulfill(()) },
            ],
            delegate: delegate
        )
        var session: URLSession? = manager!.session

        var handlers: [(done: Latch<Fetched>, calls: CallCounter)] = []
        var asyncCalls: [Task<Fetched, Never>] = []
        // Identifiers only: a task keeps its session (and so the pipeline) for as long as it lives.
        var delegateTasks: [Int] = []
        for index in 0..<50 {
            let url = server.url("/s?\(index)")
            switch index % 5 {
            case 0, 1, 2:
                let done = Latch<Fetched>("task \(index) (\(context))")
                let calls = CallCounter()
                session!.dataTask(with: url) { data, response, error in
                    calls.increment()
                    done.fulfill(Fetched(data: data, response: response, error: error))
                }.resume()
                handlers.append((done, calls))
            case 3:
                let session = session!
                asyncCalls.append(Task { await fetched(session, URLRequest(url: url)) })
            default:
                let task = session!.dataTask(with: url)
                task.resume()
                delegateTasks.append(task.taskIdentifier)
            }
        }

        // The timing input of this test, not a synchronisation: the ending lands wherever the
        // tasks happen to be.
        try await Task.sleep(for: pause)
        switch ending {
        case .sessionInvalidateAndCancel: session!.invalidateAndCancel()
        case .managerInvalidateAndCancel: manager!.invalidateAndCancel()
        case .sessionFinishTasksAndInvalidate: session!.finishTasksAndInvalidate()
        case .dropEverything: break
        }
        manager = nil
        session = nil

        var labels: [String] = []
        func check(_ fetched: Fetched, _ what: String) {
            labels.append(fetched.status.map { "\($0)" } ?? fetched.urlErrorCode.map { "URLError \($0.rawValue)" } ?? fetched.label)
            if ending.cancels {
                XCTAssertTrue(fetched.status == 200 || fetched.urlErrorCode == .cancelled, "\(what): \(fetched.label) (\(context))")
            } else {
                XCTAssertEqual(fetched.status, 200, "\(what): \(fetched.label) (\(context))")
            }
        }
        for (index, handler) in handlers.enumerated() {
            check(try await handler.done.wait(timeout: .seconds(10)), "completion-handler task \(index)")
        }
        for (index, call) in asyncCalls.enumerated() {
            check(await call.value, "async task \(index)")
        }
        for identifier in delegateTasks {
            try await delegate.completion(ofIdentifier: identifier, timeout: .seconds(10))
            let record = delegate.record(forIdentifier: identifier)
            check(Fetched(data: record.body, response: record.response, error: record.error), "delegate task \(identifier)")
        }

        // Once the pipeline is gone, nothing can complete a task again.
        try await released.wait(timeout: .seconds(10))
        for (index, handler) in handlers.enumerated() {
            XCTAssertEqual(handler.calls.value, 1, "completion handler \(index) (\(context))")
        }
        for identifier in delegateTasks {
            XCTAssertEqual(delegate.record(forIdentifier: identifier).completionCount, 1, "delegate task \(identifier) (\(context))")
        }
        return labels
    }
}
