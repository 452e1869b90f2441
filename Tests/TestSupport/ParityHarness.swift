import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest

/// Runs one scenario against the same `LoopbackServer` through a plain
/// `URLSession(configuration:)` and through `URLTaskManager(configuration:).session`, so a test
/// can assert that the manager is a drop-in replacement; and, when the scenario used only the
/// async calls the manager's own methods mirror, a third time through those methods (the
/// methods door), asserting that it sees what the session door saw.
///
/// ```swift
/// let result = try await harness.both { client in
///     await client.asyncData(URLRequest(url: client.url("/hello")))
/// }
/// XCTAssertParity(result)
/// ```
package final class ParityHarness {
    /// Whether ``both(configuration:methods:function:file:line:_:)`` runs a scenario through
    /// the methods door too.
    package enum MethodsDoor {
        /// When the scenario used only calls the methods door has (``ParityClient`` tracks it),
        /// and its result must equal the session door's.
        case compare
        /// Never: what the scenario observes has no equivalent without an outer `URLSessionTask`.
        /// The reason is one line, for the table of what differs between the doors.
        case exempt(String)
    }

    package let server: LoopbackServer
    /// The sides the latest ``both(configuration:methods:function:file:line:_:)`` ran, in order.
    package private(set) var lastSides: [Side] = []

    package init() throws {
        server = try LoopbackServer()
        server.route(nil, "/barrier") { _ in .text("barrier") }
    }

    /// A handler that answers with what the server received, in headers: `X-Method`,
    /// `X-Body-Length`, `X-Body-SHA256`, `X-Chunked`, `X-Received-Cookie`, `X-Received-Extra`,
    /// `X-Received-Content-Type`, and a short text body.
    @Sendable package static func echo(_ request: RecordedRequest) -> ServerResponse {
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
    package static func defaultConfiguration() -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.timeoutIntervalForRequest = 30
        configuration.timeoutIntervalForResource = 120
        return configuration
    }

    /// Registers `handler` at `/side-plain<path>`, `/side-manager<path>` and `/side-methods<path>`.
    package func route(_ path: String, method: String? = nil, _ handler: @escaping @Sendable (Side, RecordedRequest) -> ServerResponse) {
        for side in Side.allCases {
            server.route(method, side.pathPrefix + path) { handler(side, $0) }
        }
    }

    /// Runs `scenario` through a plain session, then through a manager's session, each with a
    /// fresh configuration from `configuration` and its own sessions, invalidated afterwards.
    ///
    /// Then, unless `methods` exempts it or the manager's run used a call only a session has
    /// (``ParityClient/sessionOnlyCalls``), runs it a third time on the ``Side/methods`` side,
    /// whose async calls go to the manager's own methods, and asserts that its result equals
    /// the manager's run (the session door's): a caller sees the same whichever door it uses.
    package func both<T: Equatable>(
        configuration: () -> URLSessionConfiguration = ParityHarness.defaultConfiguration,
        methods: MethodsDoor = .compare,
        function: String = #function, file: StaticString = #filePath, line: UInt = #line,
        _ scenario: (ParityClient) async throws -> T
    ) async throws -> (plain: T, manager: T) {
        lastSides = []
        let plain = try await run(.plain, configuration: configuration(), scenario)
        let (manager, sessionOnly) = try await recordingRun(.manager, configuration: configuration(), scenario)
        lastSides = [.plain, .manager]
        let place = "\(function) (\(URL(fileURLWithPath: "\(file)").lastPathComponent):\(line))"
        if case .exempt(let reason) = methods {
            XCTAssertTrue(
                sessionOnly.isEmpty, "\(place): exempted from the methods door, but it uses \(sessionOnly) anyway: drop the exemption",
                file: file, line: line)
            ParityLog.recordDoors(place, skipped: "exempt: \(reason)")
            return (plain, manager)
        }
        if !sessionOnly.isEmpty {
            ParityLog.recordDoors(place, skipped: "session only: \(sessionOnly.joined(separator: ", "))")
            return (plain, manager)
        }
        let (viaMethods, methodsSessionOnly) = try await recordingRun(.methods, configuration: configuration(), scenario)
        lastSides.append(.methods)
        XCTAssertEqual(methodsSessionOnly, [], "\(place): the methods door's run used session-only calls", file: file, line: line)
        XCTAssertEqual(viaMethods, manager, "\(place): the methods door differs from the session door", file: file, line: line)
        ParityLog.recordDoors(place, session: manager, methods: viaMethods)
        return (plain, manager)
    }

    /// Runs `scenario` on one side only.
    package func run<T>(
        _ side: Side, configuration: URLSessionConfiguration = ParityHarness.defaultConfiguration(),
        _ scenario: (ParityClient) async throws -> T
    ) async throws -> T {
        try await recordingRun(side, configuration: configuration, scenario).result
    }

    /// Runs `scenario` on one side and returns, with its result, the session-only calls it made.
    private func recordingRun<T>(
        _ side: Side, configuration: URLSessionConfiguration, _ scenario: (ParityClient) async throws -> T
    ) async throws -> (result: T, sessionOnly: [String]) {
        let client = ParityClient(side: side, server: server, configuration: configuration)
        defer { client.invalidateAll() }
        let result = try await scenario(client)
        return (result, client.sessionOnlyCalls)
    }

    package func shutdown() {
        server.shutdown()
    }
}

/// One side of a parity scenario: makes that side's sessions and runs tasks through them,
/// returning normalised ``Outcome``s.
///
/// On the ``Side/methods`` side the async calls that have a method of the manager's own
/// (``asyncData(_:session:)``, ``asyncData(from:)``, ``asyncUpload(_:from:)``,
/// ``asyncUpload(_:fromFile:)``, ``asyncDownload(_:)``) go to that method of the manager whose
/// session they would have used. Every other call needs a session (``sessionOnlyCalls``).
package final class ParityClient: @unchecked Sendable {  // `owned` is guarded by `lock`; the rest is immutable.
    private struct Owned {
        var plainSessions: [URLSession] = []
        var managers: [URLTaskManager] = []
        var defaultSession: URLSession?
        var sessionOnlyCalls: [String] = []
    }

    package let side: Side
    package let server: LoopbackServer
    package let configuration: URLSessionConfiguration
    private let lock = NSLock()
    private var owned = Owned()

    package init(side: Side, server: LoopbackServer, configuration: URLSessionConfiguration) {
        self.side = side
        self.server = server
        self.configuration = configuration
    }

    /// The server URL for `path` on this side (`/side-plain/x` or `/side-manager/x`).
    package func url(_ path: String) -> URL { server.url(self.path(path)) }

    /// The server path for `path` on this side.
    package func path(_ path: String) -> String { side.pathPrefix + path }

    /// This side's session without a delegate, made on first use. A scenario that reads it
    /// uses the session door alone (``sessionOnlyCalls``).
    package var session: URLSession {
        noteSessionOnly("session")
        return defaultSession
    }

    /// ``session``, for this client's own calls.
    private var defaultSession: URLSession {
        if let session = lock.withLock({ owned.defaultSession }) { return session }
        let session = newSession()
        return lock.withLock {
            if let made = owned.defaultSession { return made }
            owned.defaultSession = session
            return session
        }
    }

    /// The managers this client made (manager and methods sides), oldest first.
    package var managers: [URLTaskManager] { lock.withLock { owned.managers } }

    /// The calls of this scenario that only a session has, in the order first made: a scenario
    /// with any is not run through the methods door.
    package var sessionOnlyCalls: [String] { lock.withLock { owned.sessionOnlyCalls } }

    private func noteSessionOnly(_ call: String) {
        lock.withLock {
            if !owned.sessionOnlyCalls.contains(call) { owned.sessionOnlyCalls.append(call) }
        }
    }

    /// The manager whose session is `session`, on the methods side (where the async calls go
    /// to its methods); `nil` elsewhere.
    private func methodsManager(_ session: URLSession) -> URLTaskManager? {
        guard side == .methods else { return nil }
        return managers.first { $0.session === session }
    }

    /// A new session of this side: `URLSession(configuration:delegate:delegateQueue:)` or the
    /// session of a new `URLTaskManager` made with the same arguments.
    package func makeSession(
        configuration: URLSessionConfiguration? = nil,
        delegate: (any URLSessionDelegate)? = nil,
        delegateQueue: OperationQueue? = nil
    ) -> URLSession {
        noteSessionOnly("makeSession")
        return newSession(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue)
    }

    private func newSession(
        configuration: URLSessionConfiguration? = nil, delegate: (any URLSessionDelegate)? = nil, delegateQueue: OperationQueue? = nil
    ) -> URLSession {
        let configuration = configuration ?? self.configuration
        switch side {
        case .plain:
            let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue)
            lock.withLock { owned.plainSessions.append(session) }
            return session
        case .manager, .methods:
            let manager = URLTaskManager(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue)
            lock.withLock { owned.managers.append(manager) }
            return manager.session
        }
    }

    /// `session.invalidateAndCancel()`, or `manager.invalidateAndCancel()` for a manager's session.
    package func invalidateAndCancel(_ session: URLSession) {
        noteSessionOnly("invalidateAndCancel")
        if let manager = managers.first(where: { $0.session === session }) {
            manager.invalidateAndCancel()
        } else {
            session.invalidateAndCancel()
        }
    }

    /// `session.finishTasksAndInvalidate()`, or the manager's.
    package func finishTasksAndInvalidate(_ session: URLSession) {
        noteSessionOnly("finishTasksAndInvalidate")
        if let manager = managers.first(where: { $0.session === session }) {
            manager.finishTasksAndInvalidate()
        } else {
            session.finishTasksAndInvalidate()
        }
    }

    /// Invalidates every session this client made (end of scenario).
    package func invalidateAll() {
        let owned = lock.withLock {
            defer { self.owned = Owned() }
            return self.owned
        }
        for manager in owned.managers { manager.invalidateAndCancel() }
        for session in owned.plainSessions { session.invalidateAndCancel() }
    }

    package func outcome(data: Data?, response: URLResponse?, error: (any Error)?) -> Outcome {
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

    /// `data(for:)` of `session` (this side's own by default), or of its manager on the
    /// methods side.
    package func asyncData(_ request: URLRequest, session: URLSession? = nil) async -> Outcome {
        let session = session ?? defaultSession
        if let manager = methodsManager(session) { return await captured { try await manager.data(for: request) } }
        return await captured { try await session.data(for: request) }
    }

    package func asyncData(from url: URL) async -> Outcome {
        let session = defaultSession
        if let manager = methodsManager(session) { return await captured { try await manager.data(from: url) } }
        return await captured { try await session.data(from: url) }
    }

    package func asyncUpload(_ request: URLRequest, from body: Data) async -> Outcome {
        let session = defaultSession
        if let manager = methodsManager(session) { return await captured { try await manager.upload(for: request, from: body) } }
        return await captured { try await session.upload(for: request, from: body) }
    }

    package func asyncUpload(_ request: URLRequest, fromFile file: URL) async -> Outcome {
        let session = defaultSession
        if let manager = methodsManager(session) { return await captured { try await manager.upload(for: request, fromFile: file) } }
        return await captured { try await session.upload(for: request, fromFile: file) }
    }

    /// `download(for:)`; the outcome's body is the downloaded file, which is then removed.
    package func asyncDownload(_ request: URLRequest) async -> Outcome {
        let session = defaultSession
        let manager = methodsManager(session)
        do {
            let (location, response) =
                if let manager { try await manager.download(for: request) } else { try await session.download(for: request) }
            defer { try? FileManager.default.removeItem(at: location) }
            let contents = try Data(contentsOf: location)
            return outcome(data: contents, response: response, error: nil)
        } catch {
            return outcome(data: nil, response: nil, error: error)
        }
    }

    // MARK: Completion handlers

    /// The result of a task with a completion handler, and how often the handler ran.
    package struct Completed {
        package let outcome: Outcome
        package let calls: CallCounter
    }

    /// Makes a task with `make`, resumes it and waits for its completion handler.
    package func completion(
        timeout: Duration = .seconds(30),
        resume: Bool = true,
        _ make: (URLSession, @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> URLSessionTask
    ) async throws -> Completed {
        noteSessionOnly("completion handler")
        let (task, done, calls) = start(make)
        if resume { task.resume() }
        return Completed(outcome: try await done.wait(timeout: timeout), calls: calls)
    }

    /// Makes (but does not resume) a task with a completion handler.
    package func start(
        _ make: (URLSession, @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> URLSessionTask
    ) -> (URLSessionTask, Latch<Outcome>, CallCounter) {
        noteSessionOnly("start")
        let done = Latch<Outcome>("completion handler")
        let calls = CallCounter()
        let side = self.side
        let task = make(defaultSession) { data, response, error in
            calls.increment()
            done.fulfill(Outcome(side: side, data: data, response: response, error: error))
        }
        return (task, done, calls)
    }

    package func completionData(_ request: URLRequest) async throws -> Outcome {
        try await completion { $0.dataTask(with: request, completionHandler: $1) }.outcome
    }

    /// `downloadTask(with:completionHandler:)`; the body is read from the file inside the handler.
    package func completionDownload(_ request: URLRequest) async throws -> Outcome {
        noteSessionOnly("completionDownload")
        let done = Latch<Outcome>("download completion handler")
        let side = self.side
        let task = defaultSession.downloadTask(with: request) { location, response, error in
            let contents = location.flatMap { try? Data(contentsOf: $0) }
            done.fulfill(Outcome(side: side, data: contents, response: response, error: error))
        }
        task.resume()
        return try await done.wait()
    }

    // MARK: Delegates

    /// A session of this side with `delegate`, one task made by `make`, run to completion.
    package func delegateTask(
        _ delegate: RecordingDelegate,
        timeout: Duration = .seconds(60),
        _ make: (URLSession) -> URLSessionTask
    ) async throws -> (outcome: Outcome, record: RecordingDelegate.Record, task: URLSessionTask) {
        noteSessionOnly("delegateTask")
        let session = newSession(delegate: delegate)
        let task = make(session)
        task.resume()
        try await delegate.completion(of: task, timeout: timeout)
        return (delegate.outcome(for: task, side: side), delegate.record(for: task), task)
    }

    /// Runs a small GET through `session` and waits for it: callbacks of earlier tasks on the
    /// same session have been delivered by then, so "exactly once" can be checked without
    /// sleeping. Not a session-only call: on the methods side it runs through the manager's
    /// session (a scenario's own calls there have no callbacks to wait for).
    package func barrier(_ session: URLSession? = nil) async throws {
        let session = session ?? defaultSession
        let done = Latch<Void>("barrier")
        let task = session.dataTask(with: server.url("/barrier")) { _, _, _ in done.fulfill(()) }
        task.resume()
        try await done.wait(timeout: .seconds(20))
    }
}

/// Asserts that the plain and manager results are equal, and logs the pair for the parity table.
package func XCTAssertParity<T: Equatable>(
    _ pair: (plain: T, manager: T), _ scenario: String,
    file: StaticString = #filePath, line: UInt = #line
) {
    XCTAssertEqual(pair.plain, pair.manager, "\(scenario): plain and manager differ", file: file, line: line)
    ParityLog.record(scenario, plain: pair.plain, manager: pair.manager)
}

/// One line per compared scenario, grep-able from the test log ("PARITY|"), printed only when
/// `URLTASKMANAGER_VERBOSE=1` is set: the assertions say whether plain and manager agree, and a
/// default `swift test` run stays quiet.
package enum ParityLog {
    /// Whether `URLTASKMANAGER_VERBOSE` is set to `1` (or `true`/`yes`) for this test process.
    package static let isVerbose = ["1", "true", "yes"].contains(
        ProcessInfo.processInfo.environment["URLTASKMANAGER_VERBOSE"]?.lowercased() ?? "")

    package static func record<T>(_ scenario: String, plain: T, manager: T) {
        guard isVerbose else { return }
        print(line(scenario, plain: plain, manager: manager))
    }

    /// A "DOORS|" line: what the session door and the methods door gave for a scenario.
    package static func recordDoors<T>(_ scenario: String, session: T, methods: T) {
        guard isVerbose else { return }
        print("DOORS| \(scenario) | \(summary(session)) | \(summary(methods))")
    }

    /// A "DOORS|" line for a scenario not run through the methods door, and why.
    package static func recordDoors(_ scenario: String, skipped reason: String) {
        guard isVerbose else { return }
        print("DOORS| \(scenario) | skipped | \(reason)")
    }

    /// The line `record` prints.
    package static func line<T>(_ scenario: String, plain: T, manager: T) -> String {
        "PARITY| \(scenario) | \(summary(plain)) | \(summary(manager))"
    }

    private static func summary<T>(_ value: T) -> String {
        if let outcome = value as? Outcome { return outcome.summary }
        return String(describing: value).replacingOccurrences(of: "\n", with: " ")
    }
}

/// Prints a measured figure only when `URLTASKMANAGER_VERBOSE=1` is set: the assertions say
/// whether a test passed, and a default `swift test` run stays quiet.
package func printFigures(_ line: @autoclosure () -> String) {
    if ParityLog.isVerbose { print(line()) }
}
