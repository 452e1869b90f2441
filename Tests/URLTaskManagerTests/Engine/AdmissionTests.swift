import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
import TestSupport

/// Admission over real HTTP: a reactor touches only the tasks it does not exempt, the per-host
/// queue serves every covered request, and a wait for a slot counts toward the request's timeout.
final class AdmissionTests: XCTestCase {
    typealias Kit = ReactorTestKit
    typealias Concurrency = ConnectionLimitTests.Concurrency

    /// A refresh for one origin: reacts to its 401s, exempts every other origin, and fails
    /// (backend A's refresh token was revoked) or succeeds as told.
    struct RefreshRefused: Error {}

    struct OriginRefresh: URLTaskReactor {
        let origin: URL
        let fails: Bool
        let runs: CallCounter
        var configuration: URLTaskReactorConfiguration {
            var configuration = URLTaskReactorConfiguration.authentication
            let origin = self.origin
            configuration.exempts = { $0.url?.host != origin.host || $0.url?.port != origin.port }
            return configuration
        }

        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 401 }

        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
            runs.increment()
            if fails { throw RefreshRefused() }
        }
    }

    /// Two backends in one manager. Backend B's 50 requests are decided and queued behind its
    /// two slots; then backend A's refresh fails. Every B request still succeeds (A's failure
    /// is not theirs), and B's requests went through the per-host queue (2 at a time).
    func testOneBackendsFailedRefreshNeverFailsTheOthersRequests() async throws {
        let a = try LoopbackServer()
        let b = try LoopbackServer()
        defer { a.shutdown(); b.shutdown() }
        a.route("/api") { _ in .status(401) }
        let bGate = Gate()
        let bConcurrency = Concurrency()
        b.route("/api") { _ in
            bConcurrency.enter()
            defer { bConcurrency.leave() }
            _ = bGate.wait(timeout: .seconds(20))
            return .text("b")
        }
        let (aRuns, bRuns) = (CallCounter(), CallCounter())
        let manager = URLTaskManager(
            reactors: [
                OriginRefresh(origin: a.baseURL, fails: true, runs: aRuns), OriginRefresh(origin: b.baseURL, fails: false, runs: bRuns),
            ],
            options: .init(maximumRequestsInFlightPerHost: 2)
        )
        defer { manager.invalidateAndCancel() }

        let bURL = b.url("/api")
        let bRequests = Task { await Kit.storm(manager.session, count: 50) { _ in URLRequest(url: bURL) } }
        _ = try await b.waitForRequests(path: "/api", count: 2)
        let aResult = await Kit.fetch(manager.session, a.url("/api"))
        guard let failure = aResult.taskError, failure.code == .reactorFailed, let reactor = failure.component?.name else {
            return XCTFail(aResult.label)
        }
        // Two reactors of one type: told apart by index, and by name in text.
        XCTAssertEqual(reactor, "OriginRefresh#0")
        XCTAssertEqual(failure.component?.index, 0)
        XCTAssertEqual(failure.request?.url, a.url("/api"), "the error names the request it happened to")
        XCTAssertEqual(failure.request?.attempt, 1)
        XCTAssertEqual(aRuns.value, 1)

        bGate.open()
        let results = await bRequests.value
        XCTAssertEqual(Kit.tally(results), ["200": 50], "backend A's failed refresh touched backend B's requests")
        XCTAssertEqual(bRuns.value, 0)
        XCTAssertEqual(bConcurrency.maximum, 2, "B's requests are covered by B's reactor: the per-host queue applies")
    }

    /// Two slow requests fill both slots; a third with `timeoutInterval = 1` fails with
    /// `URLError.timedOut` while it still waits, as a plain session's own queue does.
    func testAWaitForASlotCountsTowardTheRequestTimeout() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gates = GateBook()
        server.route("/slow") { request in
            _ = gates.gate(request.query ?? "").wait(timeout: .seconds(20))
            return .text("slow")
        }
        server.route("/quick") { _ in .text("quick") }
        let configuration = URLSessionConfiguration.default
        configuration.httpMaximumConnectionsPerHost = 2
        let manager = URLTaskManager(reactors: [ConnectionLimitTests.IdleAuthReactor()], configuration: configuration)
        defer { manager.invalidateAndCancel() }
        let plain = URLSession(configuration: configuration)
        defer { plain.invalidateAndCancel() }

        var quick = URLRequest(url: server.url("/quick"))
        quick.timeoutInterval = 1
        defer { gates.openAll() }
        for (name, session) in [("plain", plain), ("manager", manager.session)] {
            let gate = gates.gate(name)
            let slow = (0..<2).map { _ in Kit.start(session, server.url("/slow?\(name)")) }
            _ = try await server.waitForRequests(path: "/slow", count: 2)
            let result = await Kit.fetch(session, quick)
            XCTAssertEqual(result.urlErrorCode, .timedOut, "\(name): \(result.label)")
            XCTAssertFalse(gate.isOpen, "\(name): it timed out while both slots were still taken")
            gate.open()
            for task in slow { _ = await task.value }
            server.resetRecords()
        }
        XCTAssertEqual(server.requestCount(path: "/quick"), 0, "the timed-out request was never sent")
    }
}
