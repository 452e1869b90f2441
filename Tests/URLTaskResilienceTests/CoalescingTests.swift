import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskResilience
import TestSupport

/// ``CoalescingInterceptor`` over real HTTP on 127.0.0.1.
final class CoalescingTests: XCTestCase {
    typealias Kit = ResilienceTestKit

    private func makeManager(
        _ configuration: CoalescingInterceptor.Configuration = .init(), interceptors before: [any URLTaskInterceptor] = [],
        reactors: [any URLTaskReactor] = [], delegate: (any URLSessionDelegate)? = nil
    ) -> (URLTaskManager, CoalescingInterceptor) {
        let coalescing = CoalescingInterceptor(configuration: configuration)
        let manager = URLTaskManager(interceptors: before + [coalescing], reactors: reactors, delegate: delegate)
        return (manager, coalescing)
    }

    /// 20 identical GETs through three task APIs while the answer is held: one server hit, and
    /// every caller gets the whole answer (status, headers, body) as its own copy.
    func testIdenticalRequestsInFlightShareOneTransferAndEachGetsACompleteCopy() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = Gate()
        let body = Data((0..<65_536).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        server.route("/doc") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return ServerResponse(
                status: 203, headers: ["X-Answer": "shared", "Content-Type": "application/octet-stream"], body: .data(body))
        }
        let delegate = RecordingDelegate()
        let (manager, coalescing) = makeManager(delegate: delegate)
        let events = Kit.Events(coalescing.events())
        let url = server.url("/doc")

        var asyncCalls: [Task<Fetched, Never>] = []
        for _ in 0..<10 { asyncCalls.append(Task { await fetched(manager.session, URLRequest(url: url)) }) }
        let handlers = ProbeLog<Fetched>()
        for _ in 0..<5 {
            manager.session.dataTask(with: url) { data, response, error in
                handlers.append(Fetched(data: data, response: response, error: error))
            }
            .resume()
        }
        var delegateTasks: [URLSessionDataTask] = []
        for _ in 0..<5 {
            let task = manager.session.dataTask(with: url)
            delegateTasks.append(task)
            task.resume()
        }
        try await events.wait("20 callers waiting", count: 20) {
            if case .started = $0 { return true }
            if case .joined = $0 { return true }
            return false
        }
        XCTAssertEqual(events.count { if case .started = $0 { return true } else { return false } }, 1)
        gate.open()

        var results: [Fetched] = []
        for call in asyncCalls { results.append(await call.value) }
        results += try await handlers.wait(count: 5, timeout: .seconds(10))
        for result in results {
            XCTAssertEqual(result.status, 203)
            if case .response(_, let headers, let received) = result {
                XCTAssertEqual(headers["x-answer"], "shared")
                XCTAssertEqual(received, body)
            }
        }
        for task in delegateTasks {
            try await delegate.completion(of: task, timeout: .seconds(10))
            let record = delegate.record(for: task)
            XCTAssertEqual((record.response as? HTTPURLResponse)?.statusCode, 203)
            XCTAssertEqual((record.response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Answer"), "shared")
            XCTAssertEqual(record.body, body)
            XCTAssertNil(record.error)
        }
        XCTAssertEqual(server.requestCount(path: "/doc"), 1, "one transfer for 20 callers")
        try await events.wait("answered") {
            if case .answered(let tasks, 203, 65_536) = $0 { return tasks.count == 20 } else { return false }
        }
        XCTAssertEqual(coalescing.sharedRequestsInFlight, 0)
    }

    /// Requests that differ in an answer-changing header, or in method, are never shared; later
    /// identical requests (after the answer) are sent again.
    func testRequestsDifferingInAuthorizationAcceptOrMethodAreNotShared() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = Gate()
        server.route("/me") { request in
            _ = gate.wait(timeout: .seconds(10))
            return .text("\(request.method) \(request.headers["authorization"] ?? "-") \(request.headers["accept"] ?? "-")")
        }
        let (manager, coalescing) = makeManager()
        let events = Kit.Events(coalescing.events())
        func request(_ token: String, accept: String = "*/*", method: String = "GET") -> URLRequest {
            var request = URLRequest(url: server.url("/me"))
            request.httpMethod = method
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            request.setValue(accept, forHTTPHeaderField: "Accept")
            return request
        }
        let requests = [request("a"), request("a"), request("b"), request("a", accept: "text/plain"), request("a", method: "DELETE")]
        let calls = requests.map { request in Task { await fetched(manager.session, request) } }
        try await events.wait("three shared requests started", count: 3) { if case .started = $0 { return true } else { return false } }
        _ = try await server.waitForRequests(path: "/me", count: 4)
        gate.open()
        var texts: [String?] = []
        for call in calls { texts.append(await call.value.text) }
        XCTAssertEqual(
            texts, ["GET Bearer a */*", "GET Bearer a */*", "GET Bearer b */*", "GET Bearer a text/plain", "DELETE Bearer a */*"])
        XCTAssertEqual(server.requestCount(path: "/me"), 4, "a, b, a+text/plain shared; DELETE alone")

        _ = await fetched(manager.session, request("a"))
        XCTAssertEqual(server.requestCount(path: "/me"), 5, "an answer is not a cache")
    }

    /// An answer of any size streams to every listener from one transfer: 6 MiB to 3 callers is
    /// one server hit, never fetched again (0.2 downloaded the whole answer, then sent each
    /// caller's own request when it was over its limit).
    func testALargeAnswerStreamsToEveryListenerFromOneTransfer() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = Gate()
        let body = Data((0..<(6 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        server.route("/big") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return ServerResponse(body: .data(body))
        }
        let (manager, coalescing) = makeManager()
        let events = Kit.Events(coalescing.events())
        let calls = (0..<3).map { _ in Task { await fetched(manager.session, URLRequest(url: server.url("/big"))) } }
        try await events.wait("2 joined", count: 2) { if case .joined = $0 { return true } else { return false } }
        gate.open()
        for call in calls {
            let result = await call.value
            XCTAssertEqual(result.status, 200)
            if case .response(_, _, let received) = result { XCTAssertTrue(received == body, "the whole body, byte for byte") }
        }
        XCTAssertEqual(server.requestCount(path: "/big"), 1)
        try await events.wait("answered") {
            if case .answered(let tasks, 200, let bytes) = $0 { return tasks.count == 3 && bytes == 6 << 20 } else { return false }
        }
    }

    /// The caller whose request was sent cancels: the transfer goes on for the one still
    /// listening. A request with another `timeoutInterval` listens too, and times out by its own
    /// deadline without stopping the transfer. When every listener has left, the transfer is
    /// stopped.
    func testOneWaiterLeavingNeverCancelsTheSharedTransferWhileAnotherWaits() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = Gate()
        server.route("/slow") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return .text("done")
        }
        let (manager, coalescing) = makeManager()
        let events = Kit.Events(coalescing.events())
        let url = server.url("/slow")
        let first = Task { await fetched(manager.session, URLRequest(url: url)) }
        try await events.wait("first started") { if case .started = $0 { return true } else { return false } }
        var short = URLRequest(url: url)
        short.timeoutInterval = 1
        let impatient = Task { await fetched(manager.session, short) }
        let patient = Task { await fetched(manager.session, URLRequest(url: url)) }
        try await events.wait("both joined", count: 2) { if case .joined = $0 { return true } else { return false } }

        first.cancel()
        let cancelled = await first.value
        XCTAssertEqual(cancelled.urlErrorCode, .cancelled)
        let timedOut = await impatient.value
        XCTAssertEqual(timedOut.urlErrorCode, .timedOut, "its own timeoutInterval")
        XCTAssertEqual(events.count { if case .left(_, true) = $0 { return true } else { return false } }, 0)
        gate.open()
        let answered = await patient.value
        XCTAssertEqual(answered.text, "done")
        XCTAssertEqual(server.requestCount(path: "/slow"), 1, "one transfer for the three")
        XCTAssertEqual(events.count { if case .started = $0 { return true } else { return false } }, 1)

        // Everyone leaves: the shared request is cancelled.
        let gate2 = Gate()
        server.route("/slow2") { _ in
            _ = gate2.wait(timeout: .seconds(10))
            return .text("late")
        }
        defer { gate2.open() }
        let lone = Task { await fetched(manager.session, URLRequest(url: server.url("/slow2"))) }
        _ = try await server.waitForRequests(path: "/slow2", count: 1)
        lone.cancel()
        let loneResult = await lone.value
        XCTAssertEqual(loneResult.urlErrorCode, .cancelled)
        try await events.wait("shared request cancelled") { if case .left(_, true) = $0 { return true } else { return false } }
        XCTAssertEqual(coalescing.sharedRequestsInFlight, 0)
    }

    /// The shared transfer's transport error reaches every listener as the `URLError` a plain
    /// session gives: the same error as without coalescing.
    func testSharedRequestFailureReachesEveryWaiter() async throws {
        let (manager, coalescing) = makeManager()
        let events = Kit.Events(coalescing.events())
        let url = try Kit.deadURL("/gone")
        let results = await withTaskGroup(of: Fetched.self) { group in
            for _ in 0..<3 { group.addTask { await fetched(manager.session, URLRequest(url: url)) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        for result in results {
            guard let error = result.error as? URLError else { return XCTFail("\(result)") }
            XCTAssertEqual(error.code, .cannotConnectToHost)
            XCTAssertNil(error.userInfo[URLTaskError.componentUserInfoKey], "a transport error, as plain gives it")
        }
        // The events stream is read on its own task: wait for the event rather than count at once.
        try await events.wait("the shared failure reported") { if case .failed = $0 { return true } else { return false } }
    }
}

extension CoalescingTests {
    /// A task resumed before `finishTasksAndInvalidate()` that reaches the interceptor after it
    /// (it waited in a rate limiter first) still completes exactly once.
    func testWaiterArrivingAfterFinishTasksAndInvalidateCompletesOnce() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/late") { _ in .text("late") }
        let limiter = RateLimiter(policy: .init(rate: 4, burst: 1))
        let limiterEvents = Kit.Events(limiter.events())
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(interceptors: [limiter, coalescing])
        let first = Task { await fetched(manager.session, URLRequest(url: server.url("/late?1"))) }
        let second = Task { await fetched(manager.session, URLRequest(url: server.url("/late?2"))) }
        try await limiterEvents.wait("one in line") { if case .delayed = $0 { return true } else { return false } }
        manager.session.finishTasksAndInvalidate()
        let results = [await first.value, await second.value]
        // Sharing is part of the task's own send: a task the session accepted is sent as any other.
        XCTAssertEqual(results[0].text, "late")
        XCTAssertEqual(results[1].text, "late")
    }

    /// HEAD requests are shared too: status and headers, no body.
    func testHeadRequestsAreShared() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = Gate()
        server.route("HEAD", "/h") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return ServerResponse(status: 200, headers: ["X-Length-Of-Thing": "42"])
        }
        let (manager, coalescing) = makeManager()
        let events = Kit.Events(coalescing.events())
        var request = URLRequest(url: server.url("/h"))
        request.httpMethod = "HEAD"
        let calls = (0..<3).map { _ in Task { [request] in await fetched(manager.session, request) } }
        try await events.wait("2 joined", count: 2) { if case .joined = $0 { return true } else { return false } }
        gate.open()
        for call in calls {
            guard case .response(200, let headers, let body) = await call.value else { return XCTFail("not answered") }
            XCTAssertEqual(headers["x-length-of-thing"], "42")
            XCTAssertTrue(body.isEmpty)
        }
        XCTAssertEqual(server.requestCount(path: "/h"), 1)
    }
}
