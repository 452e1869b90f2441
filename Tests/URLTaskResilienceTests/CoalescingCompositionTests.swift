import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskOAuth2
@testable import URLTaskResilience
import TestSupport

/// ``CoalescingInterceptor`` beside the parts it used to break (0.2.0's findings, each a test):
/// sharing never crosses callers that differ, keeps each caller's policy, never swallows a
/// breaker's probe, and the events say what went out. Real HTTP on 127.0.0.1.
final class CoalescingCompositionTests: XCTestCase {
    typealias Kit = ResilienceTestKit

    /// The echo server's `Set-Cookie` lands in the shared cookie storage (these managers use the
    /// default configuration, as an app's would): removed after each test, so that no later test
    /// on 127.0.0.1 (cookies ignore the port) sends it.
    override func tearDown() {
        let storage = HTTPCookieStorage.shared
        for cookie in storage.cookies ?? [] where cookie.domain.hasSuffix("127.0.0.1") && cookie.name == "session" {
            storage.deleteCookie(cookie)
        }
        super.tearDown()
    }

    /// The server holds every answer until `count` requests arrived, then answers each with what
    /// it was sent: so requests that would share have all arrived before any answer begins.
    private func echoServer(path: String, holdUntil count: Int) throws -> (LoopbackServer, Gate) {
        let server = try LoopbackServer()
        let gate = Gate()
        server.route(path) { request in
            _ = gate.wait(timeout: .seconds(10))
            let key = request.headers["x-api-key"] ?? "-"
            let tenant = request.headers["x-tenant"] ?? "-"
            let range = request.headers["range"] ?? "-"
            let etag = request.headers["if-none-match"] ?? "-"
            let id = request.headers["x-request-id"] ?? "-"
            return ServerResponse(
                status: 200,
                headers: ["Set-Cookie": "session=\(key)", "Vary": "X-API-Key, X-Request-Id", "Cache-Control": "private, no-store"],
                body: .data(Data("key=\(key) tenant=\(tenant) range=\(range) etag=\(etag) id=\(id)".utf8)))
        }
        return (server, gate)
    }

    private func request(_ url: URL, _ headers: [String: String]) -> URLRequest {
        var request = URLRequest(url: url)
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        return request
    }

    /// Finding 1: callers that differ in any header a server could tell apart (an API key, a
    /// tenant, a `Range`, an `If-None-Match`) never share; only truly identical ones do.
    func testCallersThatDifferInAnyHeaderNeverShare() async throws {
        let (server, gate) = try echoServer(path: "/r", holdUntil: 0)
        defer { server.shutdown() }
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(interceptors: [coalescing])
        let events = Kit.Events(coalescing.events())
        let url = server.url("/r")
        let variants: [[String: String]] = [
            ["X-API-Key": "alice-key"], ["X-API-Key": "bob-key"], ["X-Tenant": "a"], ["X-Tenant": "b"],
            ["Range": "bytes=0-9"], ["Range": "bytes=100-199"], ["If-None-Match": "\"v1\""], [:],
            ["X-API-Key": "alice-key"],  // identical to the first: shares with it
        ]
        let calls = variants.map { headers in Task { [request = request(url, headers)] in await fetched(manager.session, request) } }
        try await events.wait("8 started, 1 joined", count: 9) {
            if case .started = $0 { return true }
            if case .joined = $0 { return true }
            return false
        }
        gate.open()
        var texts: [String] = []
        var cookies: [String] = []
        for call in calls {
            guard case .response(200, let headers, let body) = await call.value else { return XCTFail("not answered") }
            texts.append(String(decoding: body, as: UTF8.self))
            cookies.append(headers["set-cookie"] ?? "")
        }
        XCTAssertEqual(server.requestCount(path: "/r"), 8, "only the two identical alice requests shared")
        XCTAssertEqual(texts[0], "key=alice-key tenant=- range=- etag=- id=-")
        XCTAssertEqual(texts[1], "key=bob-key tenant=- range=- etag=- id=-", "bob never gets alice's answer")
        XCTAssertEqual(cookies[1], "session=bob-key", "nor her cookie")
        XCTAssertEqual(texts[2], "key=- tenant=a range=- etag=- id=-")
        XCTAssertEqual(texts[3], "key=- tenant=b range=- etag=- id=-")
        XCTAssertEqual(texts[4], "key=- tenant=- range=bytes=0-9 etag=- id=-")
        XCTAssertEqual(texts[5], "key=- tenant=- range=bytes=100-199 etag=- id=-")
        XCTAssertEqual(texts[6], "key=- tenant=- range=- etag=\"v1\" id=-")
        XCTAssertEqual(texts[7], "key=- tenant=- range=- etag=- id=-", "a request without If-None-Match gets its own answer")
        XCTAssertEqual(texts[8], texts[0])
    }

    /// Finding 1: requests that differ only in a header that never identifies a caller (a
    /// request id) share, unless the answer varies on it: then each gets its own transfer.
    func testAnAnswerThatVariesOnAnIgnoredHeaderIsNotHandedToTheOthers() async throws {
        let (server, gate) = try echoServer(path: "/v", holdUntil: 0)
        defer { server.shutdown() }
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(interceptors: [coalescing])
        let events = Kit.Events(coalescing.events())
        let url = server.url("/v")
        let calls = (1...3).map { n in
            Task { [request = request(url, ["X-Request-Id": "r\(n)"])] in await fetched(manager.session, request) }
        }
        try await events.wait("2 joined", count: 2) { if case .joined = $0 { return true } else { return false } }
        gate.open()
        for (n, call) in calls.enumerated() {
            let result = await call.value
            XCTAssertEqual(result.text, "key=- tenant=- range=- etag=- id=r\(n + 1)", "each its own answer")
        }
        XCTAssertEqual(server.requestCount(path: "/v"), 3, "the first, then each listener's own request")
        try await events.wait("not shared") { if case .notShared(let tasks, _) = $0 { return tasks.count == 2 } else { return false } }
    }

    /// The rules of `Vary` and `Cache-Control` for one listener, without I/O.
    func testWhetherAnAnswerMayBeSharedFollowsVaryAndPrivacy() throws {
        let url = URL(string: "https://api.example.com/x")!
        func answer(_ headers: [String: String]) -> HTTPURLResponse {
            HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: headers)!
        }
        let sent = ["authorization": "Bearer a", "x-request-id": "1", "accept": "*/*"]
        let cookies = CookieJar(.ephemeral)
        let same = try XCTUnwrap(
            WireHeaders(request(url, ["Authorization": "Bearer a", "X-Request-Id": "2", "Accept": "*/*"]), cookies: cookies))
        let otherCredential = try XCTUnwrap(
            WireHeaders(request(url, ["Authorization": "Bearer b", "X-Request-Id": "1", "Accept": "*/*"]), cookies: cookies))
        XCTAssertTrue(SharedTransfers.mayShare(answer([:]), sentHeaders: sent, with: same))
        XCTAssertTrue(SharedTransfers.mayShare(answer(["Vary": "Accept"]), sentHeaders: sent, with: same))
        XCTAssertFalse(SharedTransfers.mayShare(answer(["Vary": "accept, X-Request-Id"]), sentHeaders: sent, with: same))
        XCTAssertFalse(SharedTransfers.mayShare(answer(["Vary": "*"]), sentHeaders: sent, with: same))
        XCTAssertTrue(SharedTransfers.mayShare(answer(["Cache-Control": "private"]), sentHeaders: sent, with: same))
        XCTAssertFalse(SharedTransfers.mayShare(answer(["Cache-Control": "private"]), sentHeaders: sent, with: otherCredential))
        XCTAssertFalse(SharedTransfers.mayShare(answer(["Cache-Control": "no-store"]), sentHeaders: sent, with: otherCredential))
        // Their keys tell them apart, so only a cookie storage changed between a key and its send
        // gets here; even a public answer is not handed across credentials then (issue 37).
        XCTAssertFalse(SharedTransfers.mayShare(answer(["Cache-Control": "max-age=60"]), sentHeaders: sent, with: otherCredential))
    }

    /// Finding 2: each caller keeps its own policy: a request that skips the header interceptor
    /// goes out without the header (and does not share with one that has it), one that skips
    /// the retry reactor is sent once, and a policy that accepts a 404 gets it while the
    /// manager's own validation rejects it for the others.
    func testEachCallerKeepsItsOwnPolicy() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/who") { request in .text(request.headers["authorization"] ?? "none") }
        server.route("/busy") { _ in ServerResponse(status: 503, headers: ["Retry-After": "0"]) }
        server.route("/missing") { _ in .status(404) }
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(
            interceptors: [HeaderInterceptor(["Authorization": "Bearer t"]), coalescing],
            reactors: [RetryReactor(policy: .init(maximumAttempts: 3, backoff: .init(base: .milliseconds(1), maximum: .milliseconds(5))))],
            options: .init(responseValidation: .successfulStatusCodes))

        var skipping = URLRequest(url: server.url("/who"))
        URLTaskPolicy(skipping: [HeaderInterceptor.self]).apply(to: &skipping)
        async let withHeader = fetched(manager.session, URLRequest(url: server.url("/who")))
        async let without = fetched(manager.session, skipping)
        let (a, b) = await (withHeader, without)
        XCTAssertEqual(a.text, "Bearer t")
        XCTAssertEqual(b.text, "none", "the skipped interceptor's header never goes out")

        var once = URLRequest(url: server.url("/busy"))
        URLTaskPolicy(skippingReactors: [RetryReactor.self], responseValidation: ResponseValidation(acceptableStatusCodes: 200..<600))
            .apply(to: &once)
        let busy = await fetched(manager.session, once)
        XCTAssertEqual(busy.status, 503)
        XCTAssertEqual(server.requestCount(path: "/busy"), 1, "no retry for a request that skips it")

        var accepting = URLRequest(url: server.url("/missing"))
        URLTaskPolicy(responseValidation: ResponseValidation(acceptableStatusCodes: 200..<500)).apply(to: &accepting)
        async let accepted = fetched(manager.session, accepting)
        async let rejected = fetched(manager.session, URLRequest(url: server.url("/missing")))
        let (ok, refused) = await (accepted, rejected)
        XCTAssertEqual(ok.status, 404, "its own policy accepts a 404")
        XCTAssertEqual(refused.taskError?.code, .responseRejected, "the manager's validation, as without coalescing")
    }

    /// Finding 3: the breaker before coalescing closes again: the first GET after the cool-down
    /// is the probe, it sends its own request (never listening to another's), and its success
    /// closes the circuit.
    func testTheBreakersProbeIsNeverAListenerAndItsSuccessClosesTheCircuit() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let healthy = ManagedFlag(false)
        let probeGate = Gate()
        server.route("/h") { _ in
            guard healthy.value else { return .status(503) }
            // The probe's answer waits until the others were refused, so none can come after it.
            _ = probeGate.wait(timeout: .seconds(10))
            return .text("up")
        }
        let clock = Kit.ManualClock()
        let breaker = CircuitBreaker(
            policy: .init(failureThreshold: 3, window: .seconds(10), coolDown: .milliseconds(300), probeTimeout: .seconds(2)),
            now: { clock.now })
        let breakerEvents = Kit.Events(breaker.events())
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(interceptors: [breaker, coalescing])
        let url = server.url("/h")
        for _ in 0..<3 { _ = await fetched(manager.session, URLRequest(url: url)) }
        try await breakerEvents.wait("opened") { if case .opened = $0 { return true } else { return false } }
        XCTAssertTrue(breaker.isOpen(for: url))
        healthy.value = true
        clock.advance(by: .milliseconds(301))

        async let fetches = withTaskGroup(of: Fetched.self) { group in
            for _ in 0..<5 { group.addTask { await fetched(manager.session, URLRequest(url: url)) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        try await breakerEvents.wait("4 refused while it probes", count: 4) { if case .rejected = $0 { return true } else { return false } }
        probeGate.open()
        let results = await fetches
        XCTAssertEqual(results.filter { $0.text == "up" }.count, 1, "the probe got its own answer: \(results.map(\.label))")
        XCTAssertEqual(results.filter { $0.taskError != nil }.count, 4, "the others were refused while it probed")
        try await breakerEvents.wait("closed") { if case .closed = $0 { return true } else { return false } }
        XCTAssertFalse(breaker.isOpen(for: url))
        let after = await fetched(manager.session, URLRequest(url: url))
        XCTAssertEqual(after.text, "up")
        XCTAssertEqual(server.requestCount(path: "/h"), 5, "3 failures, the probe, and one GET after it closed")
    }

    /// Finding 7: a caller answered from a shared transfer says whose, counts the bytes it got,
    /// and the `curl` lines are one per request that went out.
    func testEventsNameTheSharedTransferCountItsBytesAndCurlOnlyWhatWasSent() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = Gate()
        let body = Data(repeating: 42, count: 10_000)
        server.route("/e") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return ServerResponse(body: .data(body))
        }
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(interceptors: [coalescing, CURLDescriptionInterceptor()])
        let collector = EventCollector(manager.events())
        let events = Kit.Events(coalescing.events())
        let calls = (0..<5).map { _ in Task { await fetched(manager.session, URLRequest(url: server.url("/e"))) } }
        try await events.wait("4 joined", count: 4) { if case .joined = $0 { return true } else { return false } }
        gate.open()
        for call in calls {
            let result = await call.value
            XCTAssertEqual(result.status, 200)
        }
        try await collector.waitFor("5 completions") { $0.filter(\.isCompletion).count == 5 }
        let all = collector.all
        let sent = all.filter { if case .sent = $0.kind { return true } else { return false } }
        XCTAssertEqual(sent.count, 1)
        let leader = try XCTUnwrap(sent.first?.task)
        let shared = all.compactMap { event -> URLTask.ID? in
            if case .sharedTransfer(let of, 1) = event.kind { return of } else { return nil }
        }
        XCTAssertEqual(shared, Array(repeating: leader, count: 4), "each listener names the task that sent")
        let curl = all.filter { if case .annotated("curl", _) = $0.kind { return true } else { return false } }
        XCTAssertEqual(curl.map(\.task), [leader], "one curl line, for the one request sent")
        for event in all {
            guard case .completed(let completion) = event.kind else { continue }
            XCTAssertEqual(completion.bytesReceived, 10_000, "every caller counts the bytes it received")
            XCTAssertEqual(completion.attempts, 1)
        }
        XCTAssertEqual(server.requestCount(path: "/e"), 1)
    }
}

extension CoalescingCompositionTests {
    /// A request that arrives after the answer began joins it while what came so far is kept
    /// (``CoalescingInterceptor/Configuration/lateJoinLimit``): it is handed that, then the rest.
    /// With a limit of 0 it sends its own.
    func testALateIdenticalRequestIsHandedWhatCameSoFarWithinTheLimit() async throws {
        for limit in [4 << 20, 0] {
            let server = try LoopbackServer()
            defer { server.shutdown() }
            let parts = (0..<3).map { Data(repeating: UInt8(65 + $0), count: 1_000) }
            // 1 s between the head and the end: the late request (sent once the head's event
            // is read, within the events' 20 ms batching) arrives long before the end.
            server.route("/slow") { _ in ServerResponse(body: .chunked(parts, chunkDelay: .milliseconds(500))) }
            let coalescing = CoalescingInterceptor(configuration: .init(lateJoinLimit: limit))
            let manager = URLTaskManager(interceptors: [coalescing])
            let collector = EventCollector(manager.events())
            let first = Task { await fetched(manager.session, URLRequest(url: server.url("/slow"))) }
            try await collector.waitFor("the first answer began") {
                $0.contains { if case .responseHead = $0.kind { return true } else { return false } }
            }
            let late = await fetched(manager.session, URLRequest(url: server.url("/slow")))
            let early = await first.value
            XCTAssertEqual(early.status, 200)
            guard case .response(200, _, let body) = late else { return XCTFail("not answered: \(late)") }
            XCTAssertEqual(body, parts.reduce(Data(), +), "the whole body, from its first byte")
            XCTAssertEqual(server.requestCount(path: "/slow"), limit > 0 ? 1 : 2, "limit \(limit)")
        }
    }
}

extension CoalescingCompositionTests {
    /// An answer whose `Content-Length` already says it will pass the late-join limit is not
    /// kept for late requests from its head on: an identical request arriving while it streams
    /// sends its own at once and gets its own whole body, never a part of the first followed by
    /// a second fetch (0.2.0: 20 callers of a 64 MiB answer with a 4 MiB limit made 21 server
    /// hits and moved 1,344 MiB). The first answer pauses 20 s after its first 1,000 bytes, so
    /// the late request is answered, by its own transfer, while the first is still streaming.
    func testALateRequestForAnAnswerKnownToExceedTheLimitSendsItsOwnAtOnce() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let parts = [Data(repeating: 65, count: 1_000), Data(repeating: 66, count: 2_000)]
        let hits = LockedBox(0)
        server.route("/long") { _ in
            let hit = hits.withLock {
                $0 += 1
                return $0
            }
            // The first hit streams slowly; any later one is answered at once.
            return ServerResponse(headers: ["Content-Length": "3000"], body: .chunked(parts, chunkDelay: hit == 1 ? .seconds(20) : nil))
        }
        let coalescing = CoalescingInterceptor(configuration: .init(lateJoinLimit: 1_000))
        let manager = URLTaskManager(interceptors: [coalescing])
        defer { manager.invalidateAndCancel() }
        let sharing = Kit.Events(coalescing.events())
        let collector = EventCollector(manager.events())
        let first = Task { await fetched(manager.session, URLRequest(url: server.url("/long"))) }
        try await collector.waitFor("the first answer began") {
            $0.contains { if case .responseHead = $0.kind { return true } else { return false } }
        }

        let late = await fetched(manager.session, URLRequest(url: server.url("/long")))
        guard case .response(200, _, let body) = late else { return XCTFail("not answered: \(late)") }
        XCTAssertEqual(body, parts.reduce(Data(), +), "its own whole body, from the first byte")
        XCTAssertEqual(server.requestCount(path: "/long"), 2, "one request each, none sent twice")
        try await sharing.wait("the late request started its own transfer", count: 2) {
            if case .started = $0 { return true } else { return false }
        }
        XCTAssertEqual(sharing.count { if case .joined = $0 { return true } else { return false } }, 0, "the late request joined")
        first.cancel()
        _ = await first.value
    }
}

extension CoalescingCompositionTests {
    /// Finding 7: through a 401 storm, where requests that decided their headers before the
    /// refresh are intercepted again before they leave, there is exactly one `curl` line and one
    /// `traceparent` per request the server received (0.2 logged 46 `curl` lines for 31 sent).
    func testThroughARefreshStormEachRequestSentHasOneCurlLineAndOneSpan() async throws {
        let api = try OAuthServer(access: nil)
        defer { api.shutdown() }
        api.delayUnauthorized(by: .milliseconds(30))
        let endpoint = api.endpoint
        let auth = OAuth2Authenticator(
            origins: [api.server.baseURL], store: InMemoryCredentialStore(api.credential(access: "stale", refresh: "refresh-0")),
            isTokenRequest: { endpoint.matches($0) }, refresh: { try await endpoint.refresh($0) })
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth), TraceContextInterceptor(), CURLDescriptionInterceptor()],
            reactors: [OAuth2RefreshReactor(authenticator: auth)],
            options: .init(maximumRequestsInFlightPerHost: 2))
        let collector = EventCollector(manager.events())
        let results = await withTaskGroup(of: Fetched.self) { group in
            for n in 0..<30 { group.addTask { await fetched(manager.session, URLRequest(url: api.apiURL("/profile?n=\(n)"))) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        XCTAssertEqual(results.filter { $0.status == 200 }.count, 30, "\(ReactorTestKit.tally(results))")
        try await collector.waitFor("30 completions") { $0.filter(\.isCompletion).count == 30 }
        let all = collector.all
        let sent = all.filter { if case .sent = $0.kind { return true } else { return false } }.count
        let curl = all.filter { if case .annotated("curl", _) = $0.kind { return true } else { return false } }.count
        let spans = all.filter { if case .annotated("traceparent", _) = $0.kind { return true } else { return false } }.count
        XCTAssertEqual(sent, api.apiRequests.count, "one sent event per request the server received")
        XCTAssertEqual(curl, api.apiRequests.count, "one curl line per request the server received")
        XCTAssertEqual(spans, api.apiRequests.count, "one span per request the server received")
    }
}

extension CoalescingCompositionTests {
    /// Every task that listened to a shared transfer is released once it completed, those whose
    /// callers cancelled included: a subscription and its task never keep each other alive.
    func testListenersThatCancelOrCompleteAreAllReleased() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = Gate()
        server.route("/r") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return .text("done")
        }
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(interceptors: [coalescing])
        let collector = EventCollector(manager.events())
        let events = Kit.Events(coalescing.events())
        let url = server.url("/r")
        let leader = Task { await fetched(manager.session, URLRequest(url: url)) }
        try await events.wait("the first started") { if case .started = $0 { return true } else { return false } }
        let leaving = Task { await fetched(manager.session, URLRequest(url: url)) }
        let staying = Task { await fetched(manager.session, URLRequest(url: url)) }
        try await events.wait("2 joined", count: 2) { if case .joined = $0 { return true } else { return false } }
        leader.cancel()
        leaving.cancel()
        let cancelled = [await leader.value, await leaving.value]
        XCTAssertEqual(cancelled.map(\.urlErrorCode), [.cancelled, .cancelled])
        gate.open()
        let answered = await staying.value
        XCTAssertEqual(answered.text, "done", "the transfer went on for the one still listening")
        try await collector.waitFor("3 completions") { $0.filter(\.isCompletion).count == 3 }
        let ids = Set(collector.all.map(\.task))
        XCTAssertEqual(ids.count, 3)
        try await waitUntil("every task released") { ids.allSatisfy { !TaskEventRecorderDirectory.shared.hasEntry(for: $0) } }
        XCTAssertEqual(coalescing.sharedRequestsInFlight, 0)
    }
}
