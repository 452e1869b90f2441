import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest

/// Runs one scenario twice against the same `LoopbackServer`: through a plain
/// `URLSession(configuration:)` and through `URLTaskManager(configuration:).session`, so a test
/// can assert that the manager is a drop-in replacement.
///
/// ```swift
/// let result = try await harness.both { client in
///     await client.asyncData(URLRequest(url: client.url("/hello")))
/// }
/// XCTAssertParity(result)
/// ```
final class ParityHarness {
    let server: LoopbackServer

    init() throws {
        server = try LoopbackServer()
        server.route(nil, "/barrier") { _ in .text("barrier") }
    }

    /// A handler that answers with what the server received, in headers: `X-Method`,
    /// `X-Body-Length`, `X-Body-SHA256`, `X-Chunked`, `X-Received-Cookie`, `X-Received-Extra`,
    /// `X-Received-Content-Type`, and a short text body.
    @Sendable static func echo(_ request: RecordedRequest) -> ServerResponse {
        var headers: HTTPFields = [
            "Content-Type": "text/plain; charset=utf-8",
            "X-Method": request.method,
            "X-Path": request.path,
            "X-Body-Length": String(request.bodyLength),
            "X-Body-SHA256": request.bodySHA256,
            "X-Chunked": String(request.wasChunked),
        ]
        for (name, echoed) in [
            ("Cookie", "X-Received-Cookie"), ("X-Extra", "X-Received-Extra"), ("Content-Type", "X-Received-Content-Type"),
        ] {
            if let value = request.headers[name] { headers[echoed] = value }
        }
        return ServerResponse(status: 200, headers: headers, body: .data(Data("echo \(request.method) \(request.bodyLength)".utf8)))
    }

    /// An ephemeral configuration (own cookie store, no disk cache) with generous timeouts.
    static func defaultConfiguration() -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.timeoutIntervalForRequest = 30
        configuration.timeoutIntervalForResource = 120
        return configuration
    }

    /// Registers `handler` at `/side-plain<path>` and `/side-manager<path>`.
    func route(_ path: String, method: String? = nil, _ handler: @escaping @Sendable (Side, RecordedRequest) -> ServerResponse) {
        for side in Side.allCases {
            server.route(method, side.pathPrefix + path) { handler(side, $0) }
        }
    }

    /// Runs `scenario` through a plain session, then through a manager's session, each with a
    /// fresh configuration from `configuration` and its own sessions, invalidated afterwards.
    func both<T: Equatable>(
        configuration: () -> URLSessionConfiguration = ParityHarness.defaultConfiguration,
        _ scenario: (ParityClient) async throws -> T
    ) async throws -> (plain: T, manager: T) {
        let plain = try await run(.plain, configuration: configuration(), scenario)
        let manager = try await run(.manager, configuration: configuration(), scenario)
        return (plain, manager)
    }

    /// Runs `scenario` on one side only.
    func run<T>(
        _ side: Side, configuration: URLSessionConfiguration = ParityHarness.defaultConfiguration(),
        _ scenario: (ParityClient) async throws -> T
    ) async throws -> T {
        let client = ParityClient(side: side, server: server, configuration: configuration)
        defer { client.invalidateAll() }
        return try await scenario(client)
    }

    func shutdown() {
        server.shutdown()
    }
}

/// One side of a parity scenario: makes that side's sessions and runs tasks through them,
/// returning normalised ``Outcome``s.
final class ParityClient: @unchecked Sendable {  // `owned` is guarded by `lock`; the rest is immutable.
    private struct Owned {
        var plainSessions: [URLSession] = []
        var managers: [URLTaskManager] = []
        var defaultSession: URLSession?
    }

    let side: Side
    let server: LoopbackServer
    let configuration: URLSessionConfiguration
    private let lock = NSLock()
    private var owned = Owned()

    init(side: Side, server: LoopbackServer, configuration: URLSessionConfiguration) {
        self.side = side
        self.server = server
        self.configuration = configuration
    }

    /// The server URL for `path` on this side (`/side-plain/x` or `/side-manager/x`).
    func url(_ path: String) -> URL { server.url(self.path(path)) }

    /// The server path for `path` on this side.
    func path(_ path: String) -> String { side.pathPrefix + path }

    /// This side's session without a delegate, made on first use.
    var session: URLSession {
        if let session = lock.withLock({ owned.defaultSession }) { return session }
        let session = makeSession()
        lock.withLock { owned.defaultSession = session }
        return session
    }

    /// The managers this client made (manager side only), oldest first.
    var managers: [URLTaskManager] { lock.withLock { owned.managers } }

    /// A new session of this side: `URLSession(configuration:delegate:delegateQueue:)` or the
    /// session of a new `URLTaskManager` made with the same arguments.
    func makeSession(
        configuration: URLSessionConfiguration? = nil,
        delegate: (any URLSessionDelegate)? = nil,
        delegateQueue: OperationQueue? = nil
    ) -> URLSession {
        let configuration = configuration ?? self.configuration
        switch side {
        case .plain:
            let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue)
            lock.withLock { owned.plainSessions.append(session) }
            return session
        case .manager:
            let manager = URLTaskManager(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue)
            lock.withLock { owned.managers.append(manager) }
            return manager.session
        }
    }

    /// `session.invalidateAndCancel()`, or `manager.invalidateAndCancel()` for a manager's session.
    func invalidateAndCancel(_ session: URLSession) {
        if let manager = managers.first(where: { $0.session === session }) {
            manager.invalidateAndCancel()
        } else {
            session.invalidateAndCancel()
        }
    }

    /// `session.finishTasksAndInvalidate()`, or the manager's.
    func finishTasksAndInvalidate(_ session: URLSession) {
        if let manager = managers.first(where: { $0.session === session }) {
            manager.finishTasksAndInvalidate()
        } else {
            session.finishTasksAndInvalidate()
        }
    }

    /// Invalidates every session this client made (end of scenario).
    func invalidateAll() {
        let owned = lock.withLock {
            defer { self.owned = Owned() }
            return self.owned
        }
        for manager in owned.managers { manager.invalidateAndCancel() }
        for session in owned.plainSessions { session.invalidateAndCancel() }
    }

    func outcome(data: Data?, response: URLResponse?, error: (any Error)?) -> Outcome {
        Outcome(side: side, data: data, response: response, error: error)
    }

    // MARK: Async API

    /// The outcome of one async URLSession call: its data and response, or its error.
    private func captured(_ call: () async throws -> (Data, URLResponse)) async -> Outcome {
        do {
            let (data, response) = try await call()
            return outcome(data: data, response: response, error: nil)
        } catch {
            return outcome(data: nil, response: nil, error: error)
        }
    }

    func asyncData(_ request: URLRequest, session: URLSession? = nil) async -> Outcome {
        await captured { try await (session ?? self.session).data(for: request) }
    }

    func asyncData(from url: URL) async -> Outcome {
        await captured { try await session.data(from: url) }
    }

    func asyncUpload(_ request: URLRequest, from body: Data) async -> Outcome {
        await captured { try await session.upload(for: request, from: body) }
    }

    func asyncUpload(_ request: URLRequest, fromFile file: URL) async -> Outcome {
        await captured { try await session.upload(for: request, fromFile: file) }
    }

    /// `download(for:)`; the outcome's body is the downloaded file, which is then removed.
    func asyncDownload(_ request: URLRequest) async -> Outcome {
        do {
            let (location, response) = try await session.download(for: request)
            defer { try? FileManager.default.removeItem(at: location) }
            let contents = try Data(contentsOf: location)
            return outcome(data: contents, response: response, error: nil)
        } catch {
            return outcome(data: nil, response: nil, error: error)
        }
    }

    // MARK: Completion handlers

    /// The result of a task with a completion handler, and how often the handler ran.
    struct Completed {
        let outcome: Outcome
        let calls: CallCounter
    }

    /// Makes a task with `make`, resumes it and waits for its completion handler.
    func completion(
        timeout: Duration = .seconds(30),
        resume: Bool = true,
        _ make: (URLSession, @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> URLSessionTask
    ) async throws -> Completed {
        let (task, done, calls) = start(make)
        if resume { task.resume() }
        return Completed(outcome: try await done.wait(timeout: timeout), calls: calls)
    }

    /// Makes (but does not resume) a task with a completion handler.
    func start(
        _ make: (URLSession, @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> URLSessionTask
    ) -> (URLSessionTask, Latch<Outcome>, CallCounter) {
        let done = Latch<Outcome>("completion handler")
        let calls = CallCounter()
        let side = self.side
        let task = make(session) { data, response, error in
            calls.increment()
            done.fulfill(Outcome(side: side, data: data, response: response, error: error))
        }
        return (task, done, calls)
    }

    func completionData(_ request: URLRequest) async throws -> Outcome {
        try await completion { $0.dataTask(with: request, completionHandler: $1) }.outcome
    }

    /// `downloadTask(with:completionHandler:)`; the body is read from the file inside the handler.
    func completionDownload(_ request: URLRequest) async throws -> Outcome {
        let done = Latch<Outcome>("download completion handler")
        let side = self.side
        let task = session.downloadTask(with: request) { location, response, error in
            let contents = location.flatMap { try? Data(contentsOf: $0) }
            done.fulfill(Outcome(side: side, data: contents, response: response, error: error))
        }
        task.resume()
        return try await done.wait()
    }

    // MARK: Delegates

    /// A session of this side with `delegate`, one task made by `make`, run to completion.
    func delegateTask(
        _ delegate: RecordingDelegate,
        timeout: Duration = .seconds(60),
        _ make: (URLSession) -> URLSessionTask
    ) async throws -> (outcome: Outcome, record: RecordingDelegate.Record, task: URLSessionTask) {
        let session = makeSession(delegate: delegate)
        let task = make(session)
        task.resume()
        try await delegate.completion(of: task, timeout: timeout)
        return (delegate.outcome(for: task, side: side), delegate.record(for: task), task)
    }

    /// Runs a small GET through `session` and waits for it: callbacks of earlier tasks on the
    /// same session have been delivered by then, so "exactly once" can be checked without
    /// sleeping.
    func barrier(_ session: URLSession? = nil) async throws {
        let session = session ?? self.session
        let done = Latch<Void>("barrier")
        let task = session.dataTask(with: server.url("/barrier")) { _, _, _ in done.fulfill(()) }
        task.resume()
        try await done.wait(timeout: .seconds(20))
    }
}

/// Asserts that the plain and manager results are equal, and logs the pair for the parity table.
func XCTAssertParity<T: Equatable>(
    _ pair: (plain: T, manager: T), _ scenario: String,
    file: StaticString = #filePath, line: UInt = #line
) {
    XCTAssertEqual(pair.plain, pair.manager, "\(scenario): plain and manager differ", file: file, line: line)
    ParityLog.record(scenario, plain: pair.plain, manager: pair.manager)
}

/// One line per compared scenario, grep-able from the test log ("PARITY|"), printed only when
/// `URLTASKMANAGER_VERBOSE=1` is set: the assertions say whether plain and manager agree, and a
/// default `swift test` run stays quiet.
enum ParityLog {
    /// Whether `URLTASKMANAGER_VERBOSE` is set to `1` (or `true`/`yes`) for this test process.
    static let isVerbose = ["1", "true", "yes"].contains(ProcessInfo.processInfo.environment["URLTASKMANAGER_VERBOSE"]?.lowercased() ?? "")

    static func record<T>(_ scenario: String, plain: T, manager: T) {
        guard isVerbose else { return }
        print(line(scenario, plain: plain, manager: manager))
    }

    /// The line `record` prints.
    static func line<T>(_ scenario: String, plain: T, manager: T) -> String {
        "PARITY| \(scenario) | \(summary(plain)) | \(summary(manager))"
    }

    private static func summary<T>(_ value: T) -> String {
        if let outcome = value as? Outcome { return outcome.summary }
        return String(describing: value).replacingOccurrences(of: "\n", with: " ")
    }
}

/// Prints a measured figure only when `URLTASKMANAGER_VERBOSE=1` is set: the assertions say
/// whether a test passed, and a default `swift test` run stays quiet.
func printFigures(_ line: @autoclosure () -> String) {
    if ParityLog.isVerbose { print(line()) }
}
