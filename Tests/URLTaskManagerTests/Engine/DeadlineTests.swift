import Foundation
import XCTest

@testable import URLTaskManager
import TestSupport

/// ``withDeadline(_:_:)``, the bound on a reactor's work: the first of the work, its deadline
/// and the caller's cancellation ends the wait, and work that ignores cancellation is left to
/// finish on its own, its result dropped.
final class DeadlineTests: XCTestCase {
    /// What one `withDeadline` call ended with.
    private enum Ended: Equatable {
        case returned
        case deadline(Duration)
        case cancelled
        case threw(String)
    }

    private struct WorkFailed: Error {}

    private static func run(_ limit: Duration?, _ work: @escaping @Sendable () async throws -> Void) async -> Ended {
        do {
            try await withDeadline(limit, work)
            return .returned
        } catch let error as ReactorDeadlineExceeded {
            return .deadline(error.limit)
        } catch is CancellationError {
            return .cancelled
        } catch {
            return .threw("\(type(of: error))")
        }
    }

    func testWorkThatEndsInTimeReturnsItsOwnEnd() async {
        let ran = Latch<Bool>("the work ran")
        let ended = await DeadlineTests.run(.seconds(30)) { ran.fulfill(true) }
        XCTAssertEqual(ended, .returned)
        XCTAssertEqual(ran.current, true)
        let failed = await DeadlineTests.run(.seconds(30)) { throw WorkFailed() }
        XCTAssertEqual(failed, .threw("WorkFailed"), "the work's own error reaches the caller as it is")
        let unbounded = await DeadlineTests.run(nil) {}
        XCTAssertEqual(unbounded, .returned, "no limit: the work's end is the only end")
    }

    /// Work that waits for something that ignores cancellation (here a latch the test releases
    /// only afterwards) still ends the wait at the deadline, long before it finishes.
    func testTheDeadlineEndsTheWaitWithoutWaitingForWorkThatIgnoresCancellation() async throws {
        let release = Latch<Void>("the work may finish")
        let finished = Latch<Void>("the work finished")
        let started = ContinuousClock.now
        let ended = await DeadlineTests.run(.milliseconds(200)) {
            try await release.wait(timeout: .seconds(60))
            finished.fulfill(())
        }
        let waited = ContinuousClock.now - started
        XCTAssertEqual(ended, .deadline(.milliseconds(200)))
        XCTAssertGreaterThanOrEqual(waited, .milliseconds(200), "not before the limit")
        XCTAssertLessThan(waited, .seconds(20), "the deadline did not wait for the work")
        XCTAssertNil(finished.current, "the work was still waiting when the call ended")
        release.fulfill(())
        try await finished.wait(timeout: .seconds(10))  // left to finish on its own, its result dropped
    }

    /// The caller's cancellation ends the wait at once, whether it comes while the work runs
    /// (and ignores it) or before the race began.
    func testTheCallersCancellationEndsTheWaitAtOnce() async throws {
        let release = Latch<Void>("the work may finish")
        let running = Latch<Void>("the work runs")
        let work: @Sendable () async throws -> Void = {
            running.fulfill(())
            try await release.wait(timeout: .seconds(60))
        }
        let call = Task { await DeadlineTests.run(.seconds(60), work) }
        try await running.wait(timeout: .seconds(10))
        call.cancel()
        let ended = await call.value
        XCTAssertEqual(ended, .cancelled)
        release.fulfill(())

        let never: @Sendable () async throws -> Void = { try await release.wait(timeout: .seconds(60)) }
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await DeadlineTests.run(.seconds(60), never)
        }
        let earlyEnd = await early.value
        XCTAssertEqual(earlyEnd, .cancelled)
    }

    /// Many calls racing work, deadline and cancellation each end exactly once, with one of the
    /// three ends (a continuation resumed twice would trap; one never resumed would hang here).
    func testEveryCallEndsOnceWhicheverFinishesFirst() async {
        let ends = await withTaskGroup(of: Ended.self) { group in
            for n in 0..<300 {
                let work: @Sendable () async throws -> Void = {
                    if n % 2 == 0 { await Task.yield() }
                    if n % 5 == 0 { throw WorkFailed() }
                }
                let limit = Duration.microseconds(n % 3 == 0 ? 50 : 5_000)
                group.addTask {
                    let inner = Task { await DeadlineTests.run(limit, work) }
                    if n % 7 == 0 { inner.cancel() }
                    return await inner.value
                }
            }
            var ends: [Ended] = []
            for await end in group { ends.append(end) }
            return ends
        }
        XCTAssertEqual(ends.count, 300)
        let allowed: Set<String> = ["returned", "deadline", "cancelled", "threw WorkFailed"]
        for end in ends {
            let name: String
            switch end {
            case .returned: name = "returned"
            case .deadline: name = "deadline"
            case .cancelled: name = "cancelled"
            case .threw(let type): name = "threw \(type)"
            }
            XCTAssertTrue(allowed.contains(name), "an end of no kind: \(end)")
        }
    }
}
