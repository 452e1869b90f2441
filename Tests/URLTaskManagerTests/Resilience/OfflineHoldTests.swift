import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager

/// ``OfflineHold`` over real HTTP on 127.0.0.1. A host "comes back" by re-pointing an
/// interceptor (and the probe) from a port nothing listens on to a live server.
final class OfflineHoldTests: XCTestCase {
    typealias Kit = ResilienceTestKit

    /// Where requests for the "service" go right now.
    final class Switchboard: @unchecked Sendable {  // `base` is guarded by `lock`.
        private let lock = NSLock()
        private var stored: URL

        init(_ base: URL) { stored = base }

        var base: URL {
            get { lock.withLock { stored } }
            set { lock.withLock { stored = newValue } }
        }
    }

    /// Sends every request to the switchboard's current base URL, keeping path and query.
    struct Router: URLTaskInterceptor {
        let switchboard: Switchboard

        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            guard let url = task.request.url, var parts = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return .execute }
            parts.port = switchboard.base.port
            task.request.url = parts.url
            return .execute
        }
    }

    /// Requests to an unreachable host are held; when a probe is answered they are sent again and
    /// answered; the caller sees only the answer.
    func testHeldWhileUnreachableAndSentWhenAProbeIsAnswered() async throws {
        let dead = try Kit.deadURL("/")
        let switchboard = Switchboard(dead)
        let hold = OfflineHold(
            policy: .init(probeInterval: .milliseconds(50), maximumProbeInterval: .milliseconds(100), probeURL: { _ in switchboard.base }))
        let events = Kit.Events(hold.events())
        let manager = URLTaskManager(interceptors: [Router(switchboard: switchboard)], reactors: [hold])
        let calls = (0..<3).map { index in Task { await fetched(manager.session, URLRequest(url: dead.appendingPathComponent("item\(index)"))) } }
        try await events.wait("3 held", count: 3) { if case .held(_, _, .cannotConnectToHost) = $0 { return true } else { return false } }
        try await events.wait("a probe failed") { if case .probeFailed = $0 { return true } else { return false } }

        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(prefix: "/item") { request in .text("back \(request.path)") }
        switchboard.base = server.url("/")
        var texts: [String?] = []
        for call in calls { texts.append(await call.value.text) }
        XCTAssertEqual(texts, ["back /item0", "back /item1", "back /item2"])
        try await events.wait("released") { if case .reachable(_, let tasks) = $0 { return tasks.count == 3 } else { return false } }
        XCTAssertEqual(server.requests.filter { $0.method == "HEAD" }.count, 1, "one successful probe")
    }

    /// A request still held when its timeout is about to pass fails with its original error;
    /// a cancelled one leaves at once.
    func testHeldRequestFailsWithTheOriginalErrorAtItsTimeoutAndCancelsAtOnce() async throws {
        let dead = try Kit.deadURL("/thing")
        let hold = OfflineHold(policy: .init(probeInterval: .milliseconds(50), maximumProbeInterval: .milliseconds(100)))
        let events = Kit.Events(hold.events())
        let manager = URLTaskManager(reactors: [hold])
        var request = URLRequest(url: dead)
        request.timeoutInterval = 1
        let started = ContinuousClock.now
        let result = await fetched(manager.session, request)
        let elapsed = started.duration(to: .now)
        guard case .reactorFailed(let reactor, let underlying)? = result.taskError else { return XCTFail("\(result)") }
        XCTAssertEqual(reactor, "OfflineHold")
        XCTAssertEqual((underlying as? URLError)?.code, .cannotConnectToHost)
        XCTAssertGreaterThan(elapsed, .milliseconds(850), "held, not failed at once")
        XCTAssertLessThan(elapsed, .milliseconds(1_500))
        try await events.wait("expired") { if case .expired = $0 { return true } else { return false } }

        let waiting = Task { await fetched(manager.session, URLRequest(url: dead)) }
        try await events.wait("held again", count: 2) { if case .held = $0 { return true } else { return false } }
        let cancelledAt = ContinuousClock.now
        waiting.cancel()
        let cancelled = await waiting.value
        XCTAssertEqual(cancelled.urlErrorCode, .cancelled)
        XCTAssertLessThan(cancelledAt.duration(to: .now), .milliseconds(300))
    }

    /// Other transport errors are not held.
    func testOtherFailuresAreNotHeld() async throws {
        let hold = OfflineHold(policy: .init(codes: [.notConnectedToInternet]))
        let manager = URLTaskManager(reactors: [hold])
        let result = await fetched(manager.session, URLRequest(url: try Kit.deadURL("/")))
        XCTAssertEqual(result.urlErrorCode, .cannotConnectToHost)
    }
}
