import Foundation
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2
import XCTest
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `URLTaskManager.events()`: each task's events in order, with its timings, over real HTTP;
/// nothing for tasks nobody listened to; no secret in any event; a slow reader never holds a
/// task up.
final class URLTaskEventTests: XCTestCase {
    /// The events tests' collector (``EventCollector``, shared with the other test targets).
    typealias Collector = EventCollector

    private static func names(_ events: [URLTaskEvent]) -> [String] {
        events.map { event in
            switch event.kind {
            case .created: return "created"
            case .intercepted(let interceptor, let command): return "\(interceptor) \(command)"
            case .held: return "held"
            case .released: return "released"
            case .waiting: return "waiting"
            case .sent(let attempt, _): return "sent \(attempt)"
            case .sharedTransfer(_, let attempt): return "shared \(attempt)"
            case .responseHead(let status, _): return "head \(status)"
            case .reacted(let reactor, let run): return "\(reactor) reacts \(run.map(String.init) ?? "-")"
            case .requeued(let attempt): return "requeued \(attempt)"
            case .redirected(let status, _): return "redirect \(status)"
            case .completed(let completion): return "completed \(completion.status.map(String.init) ?? "error")"
            case .nativeDownload(let sentUnchanged): return "native download \(sentUnchanged)"
            case .annotated(let name, _): return "annotated \(name)"
            }
        }
    }

    /// The documented pattern: a stream obtained before a task starts sees that task's
    /// `created` and `completed`, every time (200 of 200), however late its reading task runs.
    func testAStreamObtainedBeforeATaskSeesItsWholeLife() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("GET", "/hello") { _ in .text("hello") }
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["X-App": "1"])])
        defer { manager.invalidateAndCancel() }
        var complete = 0
        for iteration in 1...200 {
            let events = Collector(manager.events())
            _ = try await manager.session.data(from: server.url("/hello?i=\(iteration)"))
            try await events.waitForCompletions(1)
            let names = Self.names(events.all)
            if names.first == "created", names.last == "completed 200" { complete += 1 }
        }
        XCTAssertEqual(complete, 200, "tasks whose stream missed their created or completed event")
    }

    /// Events handed over in batches (the default window) or one by one (`nil`) reach the
    /// reader in the order each task's transitions happened: 100 concurrent tasks, each with
    /// its whole life in order.
    func testBatchedAndUnbatchedEventsKeepEachTasksOrder() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("GET", "/hello") { _ in .text("hello") }
        for window in [URLTaskManager.Options.default.eventBatchWindow, nil] {
            let manager = URLTaskManager(
                interceptors: [HeaderInterceptor(["X-App": "1"])], options: URLTaskManager.Options(eventBatchWindow: window))
            defer { manager.invalidateAndCancel() }
            let collector = Collector(manager.events())
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<100 { group.addTask { _ = try await manager.session.data(from: server.url("/hello?i=\(i)")) } }
                try await group.waitForAll()
            }
            try await collector.waitForCompletions(100)
            let byTask = Dictionary(grouping: collector.all, by: \.task)
            XCTAssertEqual(byTask.count, 100)
            for (task, events) in byTask {
                XCTAssertEqual(
                    Self.names(events), ["created", "HeaderInterceptor execute", "sent 1", "head 200", "completed 200"],
                    "task \(task), window \(String(describing: window))")
            }
        }
    }

    func testAPlainRequestsEventsInOrderWithItsTimings() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("GET", "/hello") { _ in .text("hello") }
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["X-App": "1"])])
        defer { manager.invalidateAndCancel() }
        let collector = Collector(manager.events())

        _ = try await manager.session.data(from: server.url("/hello?access_token=secret-token"))
        try await collector.waitForCompletions(1)

        let events = collector.all
        XCTAssertEqual(Self.names(events), ["created", "HeaderInterceptor execute", "sent 1", "head 200", "completed 200"])
        XCTAssertEqual(Set(events.map(\.task)).count, 1)
        guard case .completed(let completion) = events.last?.kind else { return XCTFail("no completion") }
        XCTAssertEqual(completion.attempts, 1)
        XCTAssertEqual(completion.bytesReceived, 5)
        XCTAssertEqual(completion.bytesSent, 0)
        XCTAssertGreaterThan(completion.phases.transfer, .zero)
        XCTAssertLessThanOrEqual(completion.phases.transfer + completion.phases.beforeFirstSend, completion.phases.total)
        guard case .responseHead(_, let ttfb) = events[3].kind else { return XCTFail("no head") }
        XCTAssertGreaterThan(ttfb, .zero)
        XCTAssertLessThanOrEqual(ttfb, completion.phases.transfer)
        let log = events.map(\.description).joined(separator: "\n")
        XCTAssertFalse(log.contains("secret-token"), "a query string reached an event:\n\(log)")
        XCTAssertTrue(log.contains(server.url("/hello").absoluteString), log)
    }

    /// `bytesReceived` counts every attempt's body, the redirect's included, through both doors
    /// (issue 49, item 9: the methods counted only the final body of a redirected GET).
    func testARedirectedRequestCountsTheRedirectsBodyThroughBothDoors() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/moved") { _ in ServerResponse(status: 302, headers: ["Location": "/final"], body: .data(Data("moved here.".utf8))) }
        server.route("/final") { _ in .text(String(repeating: "f", count: 50)) }
        let manager = URLTaskManager()
        defer { manager.invalidateAndCancel() }
        let collector = Collector(manager.events())
        for method in ["GET", "POST"] {
            var request = URLRequest(url: server.url("/moved"))
            request.httpMethod = method
            _ = try await manager.session.data(for: request)
            _ = try await manager.data(for: request)
        }
        try await collector.waitForCompletions(4)
        let received = collector.all.compactMap { event -> Int64? in
            if case .completed(let completion) = event.kind { return completion.bytesReceived }
            return nil
        }
        XCTAssertEqual(received, [61, 61, 61, 61], "11 B of the 302, 50 of the final answer; GET and POST, session and methods")
    }

    func testARefreshShowsTheReactionTheRunTheRequeueAndTheNewCredentialVersion() async throws {
        let oauth = try OAuthServer(users: ["ada": "lovelace"])
        defer { oauth.shutdown() }
        let endpoint = OAuth2TokenEndpoint(url: oauth.tokenURL)
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: endpoint)
        try await auth.signIn(endpoint.signIn(username: "ada", password: "lovelace"))
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        defer { manager.invalidateAndCancel() }
        let collector = Collector(manager.events())
        oauth.revokeAccess()

        let (_, response) = try await manager.session.data(from: oauth.apiURL("/me"))
        try await collector.waitForCompletions(1)

        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        let events = collector.all
        XCTAssertEqual(
            Self.names(events),
            [
                "created", "BearerInterceptor execute", "sent 1", "head 401", "OAuth2RefreshReactor reacts 1",
                "requeued 2", "BearerInterceptor execute", "sent 2", "head 200", "completed 200",
            ])
        let versions = events.compactMap { event -> Int? in
            if case .sent(_, let versions) = event.kind { return versions["OAuth2RefreshReactor"] }
            return nil
        }
        XCTAssertEqual(versions.count, 2)
        XCTAssertGreaterThan(versions[1], versions[0], "the resend carries the renewed credential's version")
        guard case .completed(let completion) = events.last?.kind else { return XCTFail("no completion") }
        XCTAssertEqual(completion.attempts, 2)
        XCTAssertGreaterThan(completion.phases.reacting, .zero)
        let log = events.map(\.description).joined(separator: "\n")
        for token in [oauth.currentAccess, oauth.currentRefresh].compactMap({ $0 }) {
            XCTAssertFalse(log.contains(token), "a token reached an event")
        }
    }

    func testTasksStartedWhileNobodyListensEmitNothing() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("GET", "/a") { _ in .text("a") }
        let manager = URLTaskManager()
        defer { manager.invalidateAndCancel() }
        _ = try await manager.session.data(from: server.url("/a"))

        let collector = Collector(manager.events())
        _ = try await manager.session.data(from: server.url("/a"))
        try await collector.waitForCompletions(1)

        XCTAssertEqual(
            Self.names(collector.all), ["created", "sent 1", "head 200", "completed 200"], "only the task started after subscribing")
    }

    /// A reader that does not read keeps the newest events; the tasks finish regardless.
    func testASlowReaderLosesTheOldestEventsAndNeverHoldsATaskUp() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("GET", "/a") { _ in .text("a") }
        let manager = URLTaskManager()
        defer { manager.invalidateAndCancel() }
        let stream = manager.events(bufferingNewest: 3)

        for _ in 0..<5 { _ = try await manager.session.data(from: server.url("/a")) }
        manager.invalidateAndCancel()

        var kept: [URLTaskEvent] = []
        for await event in stream { kept.append(event) }
        XCTAssertEqual(Self.names(kept), ["sent 1", "head 200", "completed 200"], "the newest 3 of 20 events")
    }

    /// `invalidateAndCancel()` ends every stream before it returns, with the events emitted
    /// until then (batched ones included): a reader that starts afterwards finds them and its
    /// loop ends at once. The cancellation of a task still on the wire comes after the end and
    /// is not reported; `finishTasksAndInvalidate()` reports every task's completion.
    func testInvalidateAndCancelEndsTheStreamsBeforeItReturns() async throws {
        let server = try LoopbackServer()
        let gate = Gate()
        defer {
            gate.open()
            server.shutdown()
        }
        server.route("GET", "/held") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return .text("late")
        }
        let manager = URLTaskManager()
        let stream = manager.events()
        let held = Task { try await manager.session.data(from: server.url("/held")) }
        _ = try await server.waitForRequests(path: "/held", count: 1)
        manager.invalidateAndCancel()

        let ended = Latch<[URLTaskEvent]>("the stream's end, which invalidateAndCancel() had already reached")
        let reader = Task {
            var kept: [URLTaskEvent] = []
            for await event in stream { kept.append(event) }
            ended.fulfill(kept)
        }
        defer { reader.cancel() }
        let kept = try await ended.wait(timeout: .seconds(10))
        XCTAssertEqual(Self.names(kept), ["created", "sent 1"], "the events emitted before the call, and nothing after")
        do {
            _ = try await held.value
            XCTFail("the held task was not cancelled")
        } catch {
            XCTAssertEqual((error as? URLError)?.code, .cancelled)
        }
    }

    func testABatchShowsHoldAndReleaseForEachTask() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("GET", "/a") { _ in .text("a") }
        let manager = URLTaskManager(interceptors: [BatchInterceptor(size: 2)])
        defer { manager.invalidateAndCancel() }
        let collector = Collector(manager.events())

        async let first = manager.session.data(from: server.url("/a"))
        try await waitUntil("the first task held") { manager.heldTaskCount(interceptorAt: 0) == 1 }
        async let second = manager.session.data(from: server.url("/a"))
        _ = try await (first, second)
        try await collector.waitForCompletions(2)

        let byTask = Dictionary(grouping: collector.all, by: \.task).values.map(Self.names)
        XCTAssertTrue(
            byTask.contains(["created", "BatchInterceptor hold", "held", "released", "sent 1", "head 200", "completed 200"]), "\(byTask)")
        XCTAssertTrue(
            byTask.contains(["created", "BatchInterceptor release", "released", "sent 1", "head 200", "completed 200"]), "\(byTask)")
    }
}
