import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest

@testable import URLTaskManager
@testable import URLTaskResilience

/// What the resilience parts and the engine keep once a burst of requests to many hosts ended:
/// the state that is back at its default goes, and so does the room the burst took. A Swift
/// dictionary keeps its storage when its entries are removed, so a table of tasks in flight that
/// once held 20,000 kept room for 20,000, empty, for the part's lifetime (issue 49; what that
/// cost in bytes: the `hosts` benchmark, the Performance article's "The resilience parts").
///
/// The parts are driven through their public API as the manager calls them (`intercept`, then
/// `observe` for the attempt, then `observeEnd`), with every task in flight at once, as the
/// benchmark drives them; the engine's tables are pure machines. No I/O: what is tested is what
/// the storages keep, which the benchmark turns into bytes.
final class HostStateAfterBurstTests: XCTestCase {
    private static let burst = 20_000
    /// Room for a handful of entries: far below the burst's, whatever the dictionary's growth
    /// steps.
    private static let smallRoom = 1_024

    private static func task(host index: Int) -> URLTask {
        URLTask(request: URLRequest(url: URL(string: "https://h\(index).example.com/v1/items")!))
    }

    /// 20,000 tasks to 20,000 hosts, each refused a connection, all in flight before any ends:
    /// once they ended the breaker keeps no verdict, little room for them, and at most its
    /// `maximumHosts` circuits (each host has a failure in its window, so the least recently used
    /// go).
    func testABreakerKeepsNoRoomForABurstOfTasksThatEnded() async throws {
        let breaker = CircuitBreaker(policy: .init(maximumHosts: 1_000), health: HostHealth())
        let context = InterceptContext(currentBatchCount: 0)
        var tasks: [URLTask] = []
        for index in 0..<Self.burst {
            var task = Self.task(host: index)
            _ = try await breaker.intercept(&task, context: context)
            tasks.append(task)
        }
        for task in tasks { breaker.observe(.failure(URLError(.cannotConnectToHost)), of: task) }
        XCTAssertEqual(breaker.pendingVerdicts.count, Self.burst, "every task's verdict waits for its end")
        for task in tasks { breaker.observeEnd(of: task, error: URLError(.cannotConnectToHost)) }
        let pending = breaker.pendingVerdicts
        XCTAssertEqual(pending.count, 0)
        XCTAssertLessThanOrEqual(pending.room, Self.smallRoom, "the burst's room stayed: room for \(pending.room) verdicts")
        XCTAssertLessThanOrEqual(breaker.rememberedHostCount, 1_000)
    }

    /// A request whose caller cancels just after its turn came (the cancel handler runs after the
    /// token was taken) leaves no record: before, it was kept as "cancelled before it arrived",
    /// forever, one per such request.
    func testALimiterKeepsNothingOfARequestCancelledJustAfterItsTurn() async {
        let storage = RateLimiterStorage(policy: .init(rate: 1_000, burst: 10))
        for n in 0..<100 {
            let waiter = storage.makeWaiter()
            let turn = await withCheckedContinuation { continuation in
                _ = storage.arrive(waiter, host: "https://h\(n % 3).example.com:443", continuation: continuation)
            }
            guard case .go = turn else { return XCTFail("request \(n) did not go: \(turn)") }
            storage.leave(waiter, host: "https://h\(n % 3).example.com:443")
        }
        XCTAssertEqual(storage.requestRecords.count, 0, "records of requests that went were kept")
    }

    /// A request cancelled before it arrived still arrives cancelled (the record the fix above
    /// keeps for it until then), and leaves nothing behind.
    func testALimiterStillRefusesARequestCancelledBeforeItArrived() async {
        let storage = RateLimiterStorage(policy: .init(rate: 1_000, burst: 10))
        let waiter = storage.makeWaiter()
        storage.leave(waiter, host: "https://h.example.com:443")
        let turn = await withCheckedContinuation { continuation in
            _ = storage.arrive(waiter, host: "https://h.example.com:443", continuation: continuation)
        }
        guard case .cancelled = turn else { return XCTFail("a request cancelled before it arrived went: \(turn)") }
        XCTAssertEqual(storage.requestRecords.count, 0)
    }

    /// 20,000 hosts each with a request in flight through the per-host connection slots: once
    /// they ended, no host is kept and the table's room went back.
    func testTheEnginesConnectionSlotsKeepNoRoomForABurstOfHosts() {
        var slots = ConnectionSlotsStateMachine(limit: 6)
        for index in 0..<Self.burst {
            XCTAssertEqual(slots.acquire(URLTask.ID(rawValue: UInt64(index)), host: "h\(index)"), .send)
        }
        for index in 0..<Self.burst { XCTAssertNil(slots.release(host: "h\(index)")) }
        XCTAssertEqual(slots.busyHosts, 0)
        XCTAssertLessThanOrEqual(slots.hostRoom, Self.smallRoom, "the burst's room stayed: room for \(slots.hostRoom) hosts")
    }

    /// 20,000 tasks registered with admission (a refresh reactor covers them) and finished: no
    /// record and no slot kept, and the room went back.
    func testAdmissionKeepsNoRoomForABurstOfTasksThatEnded() {
        var admission = AdmissionStateMachine(reactors: [.refresh(loopGuard: nil)], slotsPerHost: 6)
        for index in 0..<Self.burst {
            let id = URLTask.ID(rawValue: UInt64(index))
            admission.register(id, exemptedBy: [false])
            _ = admission.headersWillBeDecided(id)
            XCTAssertEqual(admission.wantsToSend(id, host: "h\(index)", restamp: false), .send)
        }
        for index in 0..<Self.burst { _ = admission.finished(URLTask.ID(rawValue: UInt64(index))) }
        XCTAssertEqual(admission.taskCount, 0)
        XCTAssertEqual(admission.busyHosts, 0)
        XCTAssertLessThanOrEqual(admission.taskRoom, Self.smallRoom, "room for \(admission.taskRoom) tasks stayed")
        XCTAssertLessThanOrEqual(admission.hostRoom, Self.smallRoom, "room for \(admission.hostRoom) hosts stayed")
    }
}
