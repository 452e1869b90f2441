import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskResilience
import TestSupport

/// ``OfflineHold`` over real HTTP on 127.0.0.1. A host "comes back" when a server starts again
/// on the port where the first one was stopped.
final class OfflineHoldTests: XCTestCase {
    typealias Kit = ResilienceTestKit

    /// Requests to an unreachable host are held; when a probe is answered they are sent again and
    /// answered; the caller sees only the answer.
    func testHeldWhileUnreachableAndSentWhenAProbeIsAnswered() async throws {
        let first = try LoopbackServer()
        let port = first.port
        first.shutdown()
        let hold = OfflineHold(policy: .init(probeInterval: .milliseconds(50), maximumProbeInterval: .milliseconds(100)))
        let events = Kit.Events(hold.events())
        let manager = URLTaskManager(reactors: [hold])
        let calls = (0..<3).map { index in Task { await fetched(manager.session, URLRequest(url: first.url("/item\(index)"))) } }
        try await events.wait("3 held", count: 3) { if case .held(_, _, .cannotConnectToHost) = $0 { return true } else { return false } }
        try await events.wait("a probe failed") { if case .probeFailed = $0 { return true } else { return false } }

        let server = try LoopbackServer(configuration: .init(port: port))
        defer { server.shutdown() }
        server.route(prefix: "/item") { request in .text("back \(request.path)") }
        var texts: [String?] = []
        for call in calls { texts.append(await call.value.text) }
        XCTAssertEqual(texts, ["back /item0", "back /item1", "back /item2"])
        try await events.wait("released") { if case .reachable(_, let tasks) = $0 { return tasks.count == 3 } else { return false } }
        XCTAssertEqual(server.requests.filter { $0.method == "HEAD" }.map(\.path), ["/"], "one successful probe, of the host's root")
    }

    /// An answer another part saw (``HostHealth/hostAnswered(_:)``: a breaker's half-open probe
    /// that reached the host) sends the held requests at once, without waiting for the hold's own
    /// next probe (30 s away here).
    func testAnAnswerAnotherPartSawSendsTheHeldRequestsAtOnce() async throws {
        let first = try LoopbackServer()
        let port = first.port
        let origin = "http://127.0.0.1:\(port)"
        first.shutdown()
        let health = HostHealth()
        let hold = OfflineHold(policy: .init(probeInterval: .seconds(30)), health: health)
        let events = Kit.Events(hold.events())
        let manager = URLTaskManager(reactors: [hold])
        defer { manager.invalidateAndCancel() }
        let calls = (0..<2).map { index in Task { await fetched(manager.session, URLRequest(url: first.url("/item\(index)"))) } }
        try await events.wait("2 held", count: 2) { if case .held = $0 { return true } else { return false } }

        let server = try LoopbackServer(configuration: .init(port: port))
        defer { server.shutdown() }
        server.route(prefix: "/item") { request in .text("back \(request.path)") }
        let told = ContinuousClock.now
        health.hostAnswered(origin)
        var texts: [String?] = []
        for call in calls { texts.append(await call.value.text) }
        XCTAssertEqual(texts, ["back /item0", "back /item1"])
        XCTAssertLessThan(told.duration(to: .now), .seconds(5), "sent on the answer, not at the hold's next probe")
        XCTAssertEqual(server.requests.filter { $0.method == "HEAD" }.count, 0, "the hold did not probe")
    }

    /// A request still held when its timeout is about to pass fails with its original error, the
    /// `URLError` itself (as a plain session's would, at once) naming the hold; a cancelled one
    /// leaves at once.
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
        guard let error = result.error as? URLError else { return XCTFail("\(result)") }
        XCTAssertEqual(error.code, .cannotConnectToHost)
        XCTAssertEqual(error.userInfo[URLTaskError.componentUserInfoKey] as? String, "OfflineHold")
        XCTAssertGreaterThan(elapsed, .milliseconds(850), "held, not failed at once")
        XCTAssertLessThan(elapsed, .milliseconds(3_000), "failed at its timeout, not at the default 60 s")
        try await events.wait("expired") { if case .expired = $0 { return true } else { return false } }

        let waiting = Task { await fetched(manager.session, URLRequest(url: dead)) }
        try await events.wait("held again", count: 2) { if case .held = $0 { return true } else { return false } }
        let cancelledAt = ContinuousClock.now
        waiting.cancel()
        let cancelled = await waiting.value
        XCTAssertEqual(cancelled.urlErrorCode, .cancelled)
        XCTAssertLessThan(cancelledAt.duration(to: .now), .milliseconds(1_000), "cancelled at once, not at its timeout")
    }

    /// Other transport errors are not held.
    func testOtherFailuresAreNotHeld() async throws {
        let hold = OfflineHold(policy: .init(codes: [.notConnectedToInternet]))
        let manager = URLTaskManager(reactors: [hold])
        let result = await fetched(manager.session, URLRequest(url: try Kit.deadURL("/")))
        XCTAssertEqual(result.urlErrorCode, .cannotConnectToHost)
    }
}
