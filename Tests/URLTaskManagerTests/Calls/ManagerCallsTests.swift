import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
import TestSupport

/// The manager's own methods (`data(for:)`, `data(from:)`, `upload(for:from:)`,
/// `upload(for:fromFile:)`) over real HTTP: cancelling the calling task wherever the request
/// is, what `data(from:)` takes from the configuration, the uploads' bodies, and how they fail
/// where the session fails.
final class ManagerCallsTests: XCTestCase {
    private var server: LoopbackServer!
    /// Holds `/held`'s answer until opened (in tearDown at the latest).
    private var gate: Gate!
    /// 300 KB: more than one socket write.
    private let payload = Data(GeneratedBody.bytes(offset: 3, count: 300_000))

    override func setUpWithError() throws {
        server = try LoopbackServer()
        let gate = Gate()
        self.gate = gate
        server.route(nil, "/held") { _ in
            gate.wait(timeout: .seconds(30))
            return .text("late")
        }
        server.route(nil, "/echo") { ParityHarness.echo($0) }
        server.route(nil, "/slow") { _ in .text("too late").with { $0.delay = .seconds(4) } }
        server.route(nil, "/basic") { request in
            if let authorization = request.headers["Authorization"] { return .text("welcome, \(authorization)") }
            return ServerResponse(
                status: 401, headers: ["WWW-Authenticate": "Basic realm=\"calls\"", "X-Custom": "denied"], body: .data(Data("denied".utf8)))
        }
    }

    override func tearDown() {
        gate.open()
        server.shutdown()
        server = nil
    }

    // MARK: Cancelling the calling task

    /// A task cancelled before it calls: `cancelled` at once, and no pipeline task is made.
    func testCancelledBeforeTheCallItIsAnsweredCancelledAndNothingIsSent() async throws {
        let manager = URLTaskManager(configuration: ParityHarness.defaultConfiguration())
        defer { manager.invalidateAndCancel() }
        let events = EventLog(manager)
        let url = server.url("/echo")
        let answered = Latch<Fetched>("the call's answer")
        Task {
            withUnsafeCurrentTask { $0?.cancel() }
            answered.fulfill(await fetched(manager, URLRequest(url: url)))
        }
        let result = try await answered.wait(timeout: .seconds(5))
        assertCancelled(result, url: url)

        // A second call's whole life passes through the events after anything of the first would.
        let barrier = await fetched(manager, URLRequest(url: server.url("/echo?barrier")))
        XCTAssertEqual(barrier.status, 200)
        try await events.wait("the barrier's completion") { $0.completions >= 1 }
        XCTAssertEqual(events.all.filter(\.isCreation).count, 1, "the cancelled call made no pipeline task")
        XCTAssertEqual(server.requests(path: "/echo").map(\.query), ["barrier"])
    }

    /// Held by a batch: `cancelled` at once, the batch lets go of it, and it is never sent.
    func testCancelledWhileAnInterceptorHoldsItIsAnsweredCancelledAndNeverSent() async throws {
        let manager = URLTaskManager(
            interceptors: [BatchInterceptor(size: 100, window: .seconds(60))], configuration: ParityHarness.defaultConfiguration())
        defer { manager.invalidateAndCancel() }
        let events = EventLog(manager)
        let url = server.url("/echo?held")
        let answered = Latch<Fetched>("the call's answer")
        let call = Task { answered.fulfill(await fetched(manager, URLRequest(url: url))) }
        try await events.wait("the batch holds the call") { $0.contains { $0.isHeld } }
        XCTAssertEqual(manager.heldTaskCount(interceptorAt: 0), 1)

        let cancelledAt = ContinuousClock.now
        call.cancel()
        let result = try await answered.wait(timeout: .seconds(5))
        XCTAssertLessThan(ContinuousClock.now - cancelledAt, .seconds(3), "answered at once, not at the batch's window")
        assertCancelled(result, url: url)
        try await events.wait("the task's completion") { $0.completions >= 1 }
        XCTAssertEqual(manager.heldTaskCount(interceptorAt: 0), 0, "the batch let go of it")

        // Released now, it would go out before or with the next request, which is sent alone.
        manager.flush()
        let barrierURL = server.url("/echo?barrier")
        let barrier = Task { await fetched(manager, URLRequest(url: barrierURL)) }
        try await events.wait("the barrier held") { $0.filter(\.isHeld).count >= 2 }
        manager.flush()
        let barrierResult = await barrier.value
        XCTAssertEqual(barrierResult.status, 200)
        try await events.wait("the barrier's completion") { $0.completions >= 2 }
        XCTAssertEqual(events.all.completions, 2, "one completion each")
        XCTAssertEqual(server.requests(path: "/echo").map(\.query), ["barrier"], "the cancelled call was never sent")
    }

    /// On the wire, the server withholding its answer: `cancelled` at once, exactly once, and the
    /// transfer is stopped (the server finds its connection closed when it answers).
    func testCancelledWhileTheServerWithholdsItsAnswerIsAnsweredCancelledAndTheTransferStops() async throws {
        let manager = URLTaskManager(configuration: ParityHarness.defaultConfiguration())
        defer { manager.invalidateAndCancel() }
        let events = EventLog(manager)
        let url = server.url("/held")
        let answered = Latch<Fetched>("the call's answer")
        let call = Task { answered.fulfill(await fetched(manager, URLRequest(url: url))) }
        _ = try await server.waitForRequests(path: "/held", count: 1, timeout: .seconds(10))
        XCTAssertEqual(server.openConnectionCount, 1)

        let cancelledAt = ContinuousClock.now
        call.cancel()
        let result = try await answered.wait(timeout: .seconds(5))
        XCTAssertLessThan(ContinuousClock.now - cancelledAt, .seconds(3), "answered at once, not when the server answers")
        assertCancelled(result, url: url)
        try await events.wait("the task's completion") { $0.completions >= 1 }
        XCTAssertTrue(manager.pipeline.engine.liveRuns.isEmpty, "the pipeline task ended")

        // The server answers now: on a connection the client closed, which it then closes too.
        gate.open()
        try await waitUntil("the server sees the connection closed") { server.openConnectionCount == 0 }
        let barrier = await fetched(manager, URLRequest(url: server.url("/echo")))
        XCTAssertEqual(barrier.status, 200)
        try await events.wait("the barrier's completion") { $0.completions >= 2 }
        XCTAssertEqual(events.all.completions, 2, "one completion each")
        XCTAssertEqual(server.requestCount(path: "/held"), 1, "sent once")
    }

    // MARK: What the methods send

    /// `data(from:)` makes its request as the session's `data(from:)` does (`URLRequest(url:)`):
    /// the interceptors see the same request through both doors, and the configuration's timeout
    /// fails it as it fails a plain session's.
    func testDataFromURLSendsWhatTheSessionSendsUnderTheConfigurationsTimeout() async throws {
        let configuration = {
            let configuration = ParityHarness.defaultConfiguration()
            configuration.requestCachePolicy = .returnCacheDataElseLoad
            configuration.timeoutIntervalForRequest = 1
            return configuration
        }
        let recorder = RequestRecorder()
        let manager = URLTaskManager(interceptors: [recorder], configuration: configuration())
        defer { manager.invalidateAndCancel() }
        let plain = URLSession(configuration: configuration())
        defer { plain.invalidateAndCancel() }
        let url = server.url("/slow")

        let started = ContinuousClock.now
        let viaMethods = await Fetched { try await manager.data(from: url) }
        let elapsed = ContinuousClock.now - started
        let viaSession = await Fetched { try await manager.session.data(from: url) }
        let viaPlain = await Fetched { try await plain.data(from: url) }

        XCTAssertEqual(viaMethods.urlErrorCode, .timedOut, "\(viaMethods.label)")
        XCTAssertEqual(viaMethods.urlErrorCode, viaPlain.urlErrorCode)
        XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(900), "the configuration's 1 s, not the request's default 60 s")
        XCTAssertLessThan(elapsed, .milliseconds(3500), "before the server answers")
        // What the interceptors see: the request's defaults through both doors (the inner session
        // applies the configuration's timeout to both).
        let seen = recorder.requests
        XCTAssertEqual(seen.count, 2)
        XCTAssertEqual(seen.first?.cachePolicy, seen.last?.cachePolicy)
        XCTAssertEqual(seen.first?.timeoutInterval, seen.last?.timeoutInterval)
        XCTAssertEqual(seen.first?.httpMethod ?? "GET", "GET")
        XCTAssertEqual(viaSession.urlErrorCode, viaMethods.urlErrorCode)
    }

    func testUploadFromDataSendsTheBody() async throws {
        let manager = URLTaskManager(configuration: ParityHarness.defaultConfiguration())
        defer { manager.invalidateAndCancel() }
        var request = post()
        request.httpBody = Data("replaced".utf8)
        let result = await Fetched { try await manager.upload(for: request, from: payload) }
        assertServerReceivedPayload(result)
    }

    func testUploadFromFileSendsTheBody() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("calls-upload-\(UUID().uuidString).bin")
        try payload.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let manager = URLTaskManager(configuration: ParityHarness.defaultConfiguration())
        defer { manager.invalidateAndCancel() }
        let result = await Fetched { try await manager.upload(for: post(), fromFile: file) }
        assertServerReceivedPayload(result)
    }

    /// A file that is not there fails as a plain session's `upload(for:fromFile:)` fails, and
    /// nothing is sent.
    func testUploadFromAMissingFileFailsAsAPlainSessionFails() async throws {
        let missing = FileManager.default.temporaryDirectory.appendingPathComponent("calls-missing-\(UUID().uuidString).bin")
        let manager = URLTaskManager(configuration: ParityHarness.defaultConfiguration())
        defer { manager.invalidateAndCancel() }
        let plain = URLSession(configuration: ParityHarness.defaultConfiguration())
        defer { plain.invalidateAndCancel() }
        let request = post()
        let viaMethods = await Fetched { try await manager.upload(for: request, fromFile: missing) }
        let viaPlain = await Fetched { try await plain.upload(for: request, fromFile: missing) }
        let methodsError = try XCTUnwrap(viaMethods.error as NSError?, viaMethods.label)
        let plainError = try XCTUnwrap(viaPlain.error as NSError?, viaPlain.label)
        XCTAssertEqual(methodsError.domain, plainError.domain)
        XCTAssertEqual(methodsError.code, plainError.code)
        XCTAssertEqual(
            methodsError.userInfo.mapValues { "\($0)" }, plainError.userInfo.mapValues { "\($0)" },
            "the same user info, failing URL included")
        XCTAssertEqual(server.requestCount(path: "/echo"), 0)
    }

    // MARK: Where the session fails

    /// `invalidateAndCancel()` cancels a call on the wire as it cancels the session's task;
    /// afterwards a call fails with the error the session gave its tasks, and sends nothing. (A
    /// new task of an invalidated session stops the process: corelibs' `fatalError("Session
    /// invalidated")`, an exception on Apple platforms. The methods throw instead.)
    func testAfterInvalidateAndCancelTheMethodsFailAsTheSessionDoes() async throws {
        let manager = URLTaskManager(configuration: ParityHarness.defaultConfiguration())
        let viaSession = Latch<Fetched>("the session's task")
        let viaMethods = Latch<Fetched>("the call")
        let sessionURL = server.url("/held?session")
        let methodsURL = server.url("/held?methods")
        Task { viaSession.fulfill(await fetched(manager.session, URLRequest(url: sessionURL))) }
        Task { viaMethods.fulfill(await fetched(manager, URLRequest(url: methodsURL))) }
        _ = try await server.waitForRequests(path: "/held", count: 2, timeout: .seconds(10))

        manager.invalidateAndCancel()
        let session = try await viaSession.wait(timeout: .seconds(5))
        let methods = try await viaMethods.wait(timeout: .seconds(5))
        assertCancelled(session, url: sessionURL)
        assertCancelled(methods, url: methodsURL)

        let url = server.url("/echo")
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("calls-after-\(UUID().uuidString).bin")
        try payload.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let calls: [(String, @Sendable () async throws -> (Data, URLResponse))] = [
            ("data(for:)", { try await manager.data(for: URLRequest(url: url)) }),
            ("data(from:)", { try await manager.data(from: url) }),
            ("upload(for:from:)", { try await manager.upload(for: URLRequest(url: url), from: Data("x".utf8)) }),
            ("upload(for:fromFile:)", { try await manager.upload(for: URLRequest(url: url), fromFile: file) }),
            (
                "download(for:)",
                {
                    let (location, response) = try await manager.download(for: URLRequest(url: url))
                    try? FileManager.default.removeItem(at: location)
                    return (Data(), response)
                }
            ),
        ]
        for (name, call) in calls {
            let answered = Latch<Fetched>(name)
            Task { answered.fulfill(await Fetched(call)) }
            assertCancelled(try await answered.wait(timeout: .seconds(5)), url: url, name)
        }
        XCTAssertEqual(server.requestCount(path: "/echo"), 0, "nothing is sent")
    }

    /// A 401 challenge with no credential to answer it: the caller gets the 401 (without the
    /// `WWW-Authenticate` header), as from the session, not `cancelled`.
    func testA401ChallengeWithoutACredentialGivesThe401AsTheSessionDoes() async throws {
        let manager = URLTaskManager(configuration: ParityHarness.defaultConfiguration())
        defer { manager.invalidateAndCancel() }
        let request = URLRequest(url: server.url("/basic"))
        let viaSession = await fetched(manager.session, request)
        let viaMethods = await fetched(manager, request)
        XCTAssertEqual(viaSession.status, 401, viaSession.label)
        XCTAssertEqual(viaMethods.status, 401, viaMethods.label)
        guard case .response(_, let sessionHeaders, let sessionBody) = viaSession,
            case .response(_, let methodsHeaders, let methodsBody) = viaMethods
        else { return }
        XCTAssertNil(methodsHeaders["www-authenticate"])
        XCTAssertEqual(methodsHeaders["x-custom"], sessionHeaders["x-custom"])
        XCTAssertEqual(sessionBody, Data("denied".utf8))
        XCTAssertEqual(methodsBody, sessionBody, "the 401's body, not truncated")
        // corelibs' async API drops a refused challenge's body: the methods' GET was sent again,
        // streamed (see WholeTransfer), never with a credential.
        let sent = server.requests(path: "/basic").map { $0.headers["Authorization"] ?? "none" }
        XCTAssertEqual(sent, Array(repeating: "none", count: Platform.sendsWholeTransfers ? 3 : 2))
    }

    // MARK: Helpers

    private func post() -> URLRequest {
        var request = URLRequest(url: server.url("/echo"))
        request.httpMethod = "POST"
        request.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
        return request
    }

    private func assertServerReceivedPayload(_ result: Fetched, file: StaticString = #filePath, line: UInt = #line) {
        let sha = SHA256.hex(payload)
        XCTAssertEqual(result.status, 200, result.label, file: file, line: line)
        guard case .response(_, let headers, _) = result else { return }
        XCTAssertEqual(headers["x-body-length"], String(payload.count), file: file, line: line)
        XCTAssertEqual(headers["x-body-sha256"], sha, file: file, line: line)
        let seen = server.requests(path: "/echo")
        XCTAssertEqual(seen.map(\.bodyLength), [payload.count], file: file, line: line)
        XCTAssertEqual(seen.map(\.bodySHA256), [sha], file: file, line: line)
        XCTAssertEqual(seen.map(\.method), ["POST"], file: file, line: line)
    }

    private func assertCancelled(
        _ result: Fetched, url: URL, _ what: String = "", file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertEqual(result.urlErrorCode, .cancelled, "\(what) \(result.label)", file: file, line: line)
        let error = result.error as NSError?
        XCTAssertEqual(error?.domain, NSURLErrorDomain, what, file: file, line: line)
        XCTAssertEqual(error?.userInfo[NSURLErrorFailingURLErrorKey] as? URL, url, what, file: file, line: line)
    }
}

extension Fetched {
    /// What `call` (an async URLSession-shaped call) returned or threw.
    init(_ call: () async throws -> (Data, URLResponse)) async {
        do {
            let (data, response) = try await call()
            self.init(data: data, response: response, error: nil)
        } catch {
            self = .failure(error)
        }
    }
}

extension URLTaskEvent {
    fileprivate var isCreation: Bool { if case .created = kind { true } else { false } }
    fileprivate var isHeld: Bool { if case .held = kind { true } else { false } }
}

extension [URLTaskEvent] {
    /// How many `completed` events.
    fileprivate var completions: Int { filter(\.isCompletion).count }
}

/// A manager's events, subscribed when made, and waits on them with deadlines: each wait ends
/// when an event that satisfies it arrives.
private final class EventLog: Sendable {
    /// What a wait waits for, of the events so far.
    typealias Condition = @Sendable ([URLTaskEvent]) -> Bool

    private struct Waiter {
        let isSatisfied: Condition
        let latch: Latch<Void>
    }

    private struct State {
        var events: [URLTaskEvent] = []
        var waiters: [Waiter] = []
    }

    private let state: LockedState<State>
    private let reader: Task<Void, Never>

    init(_ manager: URLTaskManager) {
        let state = LockedState(State())
        let stream = manager.events()
        self.state = state
        reader = Task {
            for await event in stream {
                let satisfied = state.withLock { state -> [Latch<Void>] in
                    state.events.append(event)
                    let events = state.events
                    let satisfied = state.waiters.filter { $0.isSatisfied(events) }
                    state.waiters.removeAll { $0.isSatisfied(events) }
                    return satisfied.map(\.latch)
                }
                for latch in satisfied { latch.fulfill(()) }
            }
        }
    }

    deinit { reader.cancel() }

    var all: [URLTaskEvent] { state.withLock { $0.events } }

    /// Returns once the events so far satisfy `isSatisfied`; throws ``WaitTimedOut`` after `timeout`.
    func wait(_ what: String, timeout: Duration = .seconds(10), until isSatisfied: @escaping Condition) async throws {
        let latch = Latch<Void>(what)
        let already = state.withLock { state in
            if isSatisfied(state.events) { return true }
            state.waiters.append(Waiter(isSatisfied: isSatisfied, latch: latch))
            return false
        }
        if !already { try await latch.wait(timeout: timeout) }
    }
}

/// Records the request of every task it intercepts.
private final class RequestRecorder: URLTaskInterceptor, Sendable {
    private let seen = LockedState<[URLRequest]>([])

    var requests: [URLRequest] { seen.withLock { $0 } }

    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        seen.withLock { $0.append(task.request) }
        return .execute
    }
}
