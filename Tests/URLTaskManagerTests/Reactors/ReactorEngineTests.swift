import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
import TestSupport

/// The single-flight engine over real HTTP, with a reactor whose run the test controls:
/// cancellation of waiters, timeouts, the loop guard, the per-task limit, late answers, and a
/// reactor that sends its own request through the manager.
final class ReactorEngineTests: XCTestCase {
    typealias Kit = ReactorTestKit

    /// The client's token, the server's idea of the valid one, and the run's controls.
    final class Tokens: @unchecked Sendable {  // all state is guarded by `lock`.
        private let lock = NSLock()
        private var client = "t0"
        private var server: String? = "t1"
        private var latch: Kit.AsyncLatch?
        private var failure: (any Error)?
        /// Fired when a run's work begins, when it ends, and each time a 401 head is judged.
        let runStarted = Kit.Signal()
        let runEnded = Kit.Signal()
        let judged401 = Kit.Signal()

        var clientToken: String { lock.withLock { client } }
        var serverToken: String? {
            get { lock.withLock { server } }
            set { lock.withLock { server = newValue } }
        }
        var runs: Int { runStarted.value }

        /// Runs wait on `latch` (ignoring cancellation) until it opens.
        func holdRuns(on latch: Kit.AsyncLatch?) { lock.withLock { self.latch = latch } }
        /// Runs throw `error` (`nil`: they succeed).
        func failRuns(with error: (any Error)?) { lock.withLock { failure = error } }

        /// The work: run `n` makes the client's token `t<n>`.
        func run() async throws {
            let number = runStarted.value + 1
            runStarted.fire()
            defer { runEnded.fire() }
            let (latch, failure) = lock.withLock { (self.latch, self.failure) }
            await latch?.wait()
            if let failure { throw failure }
            lock.withLock { client = "t\(number)" }
        }
    }

    struct ControlledReactor: URLTaskReactor {
        let tokens: Tokens
        let configuration: URLTaskReactorConfiguration

        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
            guard outcome.statusCode == 401 else { return false }
            tokens.judged401.fire()
            return true
        }

        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
            try await tokens.run()
        }
    }

    struct TokenHeader: URLTaskInterceptor {
        let tokens: Tokens

        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            task.request.setValue("Bearer \(tokens.clientToken)", forHTTPHeaderField: "Authorization")
            return .execute
        }
    }

    struct RefusedError: Error, Equatable {}

    private var server: LoopbackServer!
    private var tokens: Tokens!

    override func setUp() async throws {
        server = try LoopbackServer()
        tokens = Tokens()
        server.route(prefix: "/api/") { [tokens] request in
            guard let valid = tokens!.serverToken, request.headers["authorization"] == "Bearer \(valid)" else { return .status(401) }
            return .text("ok")
        }
    }

    override func tearDown() async throws {
        server.shutdown()
    }

    private func manager(
        _ configuration: URLTaskReactorConfiguration = .authentication,
        interceptors: [any URLTaskInterceptor] = []
    ) -> URLTaskManager {
        URLTaskManager(
            interceptors: [TokenHeader(tokens: tokens)] + interceptors,
            reactors: [ControlledReactor(tokens: tokens, configuration: configuration)]
        )
    }

    private func url(_ path: String = "/r") -> URL { server.url("/api" + path) }

    // MARK: Cancellation

    func testCancellingAWaitingTaskCompletesItAtOnceWhileTheRunGoesOnForTheOthers() async throws {
        let latch = Kit.AsyncLatch()
        tokens.holdRuns(on: latch)
        // Both 401s are answered together, so both tasks end up waiting on the one run.
        let answer = Gate()
        defer { answer.open() }
        server.route(prefix: "/api/pair/") { [tokens] _ in
            answer.wait(timeout: .seconds(10))
            _ = tokens
            return .status(401)
        }
        let manager = manager()
        let first = Kit.start(manager.session, url("/pair/a"))
        let second = Kit.start(manager.session, url("/pair/b"))
        _ = try await server.waitForRequests(count: 2)
        answer.open()
        try await tokens.judged401.wait(for: 2)
        try await tokens.runStarted.wait(for: 1)
        // A task started now waits at the gate instead.
        let gated = Kit.start(manager.session, url("/gated"))

        var cancelled = ContinuousClock.now
        first.cancel()
        let firstResult = await first.value
        XCTAssertTrue(Kit.isCancelled(firstResult), firstResult.label)
        XCTAssertLessThan(cancelled.duration(to: .now), .seconds(1), "a cancelled waiter must not wait for the run")

        cancelled = .now
        gated.cancel()
        let gatedResult = await gated.value
        XCTAssertTrue(Kit.isCancelled(gatedResult), gatedResult.label)
        XCTAssertLessThan(cancelled.duration(to: .now), .seconds(1), "a cancelled gated task must not wait for the run")
        XCTAssertEqual(tokens.runEnded.value, 0, "the run is still going")

        latch.open()
        server.route(prefix: "/api/pair/") { [tokens] request in
            request.headers["authorization"] == "Bearer \(tokens!.serverToken ?? "")" ? .text("ok") : .status(401)
        }
        let secondResult = await second.value
        XCTAssertEqual(secondResult.status, 200)
        XCTAssertEqual(tokens.runs, 1)
        XCTAssertEqual(server.requestCount(path: "/api/gated"), 0)
        XCTAssertEqual(server.requestCount(path: "/api/pair/a"), 1, "the cancelled task was not sent again")
    }

    func testCancellingEveryWaiterLeavesTheReactorReadyForItsNextRun() async throws {
        let latch = Kit.AsyncLatch()
        tokens.holdRuns(on: latch)
        let answer = Gate()
        defer { answer.open() }
        server.route(prefix: "/api/w/") { _ in
            answer.wait(timeout: .seconds(10))
            return .status(401)
        }
        let manager = manager()
        let waiters = (0..<3).map { index in Kit.start(manager.session, url("/w/\(index)")) }
        _ = try await server.waitForRequests(count: 3)
        answer.open()
        try await tokens.runStarted.wait(for: 1)
        try await tokens.judged401.wait(for: 3)
        waiters.forEach { $0.cancel() }
        for waiter in waiters {
            let result = await waiter.value
            XCTAssertTrue(Kit.isCancelled(result), result.label)
        }

        latch.open()
        try await tokens.runEnded.wait(for: 1)
        XCTAssertEqual(tokens.clientToken, "t1", "the run finished with nobody waiting")

        // The server moves on; the next 401 needs (and gets) a second, clean run.
        tokens.serverToken = "t2"
        let next = await Kit.fetch(manager.session, url("/next"))
        XCTAssertEqual(next.status, 200)
        XCTAssertEqual(tokens.runs, 2)
    }

    // MARK: Limits

    func testATimedOutRunFailsEveryWaiterWithReactorTimedOutEvenIfTheWorkIgnoresCancellation() async throws {
        let latch = Kit.AsyncLatch()
        defer { latch.open() }
        tokens.holdRuns(on: latch)  // never opened during the test: the work never notices
        var configuration = URLTaskReactorConfiguration.authentication
        configuration.timeout = .milliseconds(300)
        let manager = manager(configuration)

        let started = ContinuousClock.now
        let target = url()
        let results = await Kit.storm(manager.session, count: 8) { _ in URLRequest(url: target) }
        let elapsed = started.duration(to: .now)

        for result in results {
            guard let failure = result.taskError, failure.code == .reactorTimedOut, let reactor = failure.component?.name,
                let after = failure.limit
            else {
                XCTFail(result.label)
                continue
            }
            XCTAssertEqual(reactor, "ControlledReactor")
            XCTAssertEqual(after, .milliseconds(300))
        }
        XCTAssertEqual(tokens.runs, 1)
        XCTAssertLessThan(elapsed, .seconds(3))
    }

    /// A resource that refuses every token: the task goes out once more after one run, with the
    /// new token, and its caller then gets the server's 401 (no second run, no error of ours).
    /// A second such request costs one more run; then a genuine revocation still refreshes:
    /// the loop guard was not tripped by the one bad resource.
    func testAResourceThatRefusesEveryTokenGetsItsAnswerAfterOneRun() async throws {
        server.route("/api/always-401") { _ in .status(401) }
        let manager = manager()
        let first = await Kit.fetch(manager.session, url("/always-401"))
        XCTAssertEqual(first.status, 401, first.label)
        XCTAssertEqual(tokens.runs, 1, "one refresh for the task, not two")
        XCTAssertEqual(server.requestCount(path: "/api/always-401"), 2)

        let second = await Kit.fetch(manager.session, url("/always-401"))
        XCTAssertEqual(second.status, 401, second.label)
        XCTAssertEqual(tokens.runs, 2)

        tokens.serverToken = "t3"  // revoked server-side: the next run's token is the valid one
        let genuine = await Kit.fetch(manager.session, url())
        XCTAssertEqual(genuine.status, 200, "a legitimate refresh is not refused: \(genuine.label)")
        XCTAssertEqual(tokens.runs, 3)
    }

    /// The loop guard counts runs that start right after a successful one whose token no
    /// answer accepted: requests to a resource that refuses every token, one after another, with
    /// nothing else in between, trip it at the limit.
    func testTheLoopGuardCountsRunsThatFollowASuccess() async throws {
        server.route("/api/always-401") { _ in .status(401) }
        var configuration = URLTaskReactorConfiguration.authentication
        configuration.mode = .refresh(loopGuard: .init(maximumRuns: 2, window: .seconds(60)))
        let manager = manager(configuration)
        for _ in 1...3 {
            let result = await Kit.fetch(manager.session, url("/always-401"))
            XCTAssertEqual(result.status, 401, result.label)
        }
        XCTAssertEqual(tokens.runs, 3, "the first run follows no success; the next two are counted")
        let refused = await Kit.fetch(manager.session, url("/always-401"))
        guard let failure = refused.taskError, failure.code == .reactionLoop, let reactor = failure.component?.name,
            let runs = failure.count
        else { return XCTFail(refused.label) }
        XCTAssertEqual(reactor, "ControlledReactor")
        XCTAssertEqual(runs, 2)
        XCTAssertEqual(tokens.runs, 3)
    }

    /// The same resource among requests the refreshed token is accepted for: each token a run
    /// produced works, so no run counts and the guard never trips (before, the fourth such
    /// request failed with `reactionLoop`); each request to that resource costs one run and
    /// ends with the server's 401.
    func testAResourceThatRefusesEveryTokenAmongAcceptedRequestsNeverTripsTheGuard() async throws {
        server.route("/api/always-401") { _ in .status(401) }
        server.route("/api/current") { [tokens] request in
            request.headers["authorization"] == "Bearer \(tokens!.clientToken)" ? .text("ok") : .status(401)
        }
        var configuration = URLTaskReactorConfiguration.authentication
        configuration.mode = .refresh(loopGuard: .init(maximumRuns: 2, window: .seconds(60)))
        let manager = manager(configuration)
        for round in 1...5 {
            let refused = await Kit.fetch(manager.session, url("/always-401"))
            XCTAssertEqual(refused.status, 401, "round \(round): \(refused.label)")
            let accepted = await Kit.fetch(manager.session, url("/current"))
            XCTAssertEqual(accepted.status, 200, "round \(round): \(accepted.label)")
        }
        XCTAssertEqual(tokens.runs, 5, "one run per request to the refusing resource")
    }

    /// A reactor that runs once per task (no shared version to compare with) keeps reacting
    /// until its per-task limit.
    func testThePerTaskLimitFailsATaskRefusedAgainAfterEveryRun() async throws {
        tokens.serverToken = nil
        var configuration = URLTaskReactorConfiguration.authentication
        configuration.mode = .perTask(afterwards: .sendAgain)
        let manager = manager(configuration)
        let result = await Kit.fetch(manager.session, url())
        guard let failure = result.taskError, failure.code == .tooManyAttempts, let reactor = failure.component?.name,
            let attempts = failure.count
        else { return XCTFail(result.label) }
        XCTAssertEqual(reactor, "ControlledReactor")
        XCTAssertEqual(attempts, 3)
        XCTAssertEqual(tokens.runs, 2, "maximumReactionsPerTask of .authentication is 2")
    }

    // MARK: Late answers

    func testA401ArrivingAfterARunFailedFailsWithThatErrorWithoutAnotherRun() async throws {
        tokens.failRuns(with: RefusedError())
        let gate = Gate()
        defer { gate.open() }
        server.route("/api/slow") { [tokens] _ in
            gate.wait(timeout: .seconds(10))
            _ = tokens
            return .status(401)
        }
        let manager = manager()
        let slow = Kit.start(manager.session, url("/slow"))
        _ = try await server.waitForRequests(path: "/api/slow", count: 1)
        let fast = await Kit.fetch(manager.session, url("/fast"))
        guard fast.taskError?.code == .reactorFailed, let underlying = fast.taskError?.underlying else { return XCTFail(fast.label) }
        XCTAssertTrue(underlying is RefusedError)

        gate.open()
        let late = await slow.value
        guard late.taskError?.code == .reactorFailed, let lateUnderlying = late.taskError?.underlying else { return XCTFail(late.label) }
        XCTAssertTrue(lateUnderlying is RefusedError)
        XCTAssertEqual(tokens.runs, 1, "the late 401 belongs to the run that failed")

        // A request made after the failure is a new question: it gets a new run.
        tokens.failRuns(with: nil)
        tokens.serverToken = "t2"  // what run 2 will issue
        let fresh = await Kit.fetch(manager.session, url("/fresh"))
        XCTAssertEqual(fresh.status, 200)
        XCTAssertEqual(tokens.runs, 2)
    }

    /// Holds each task to `/api/held` once, the first time it is intercepted, until the batch is flushed.
    final class HoldOnce: URLTaskInterceptor, @unchecked Sendable {  // `seen` is guarded by `lock`.
        let holding = Kit.Signal()
        private let lock = NSLock()
        private var seen: Set<URLTask.ID> = []

        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            guard task.request.url?.path == "/api/held", lock.withLock({ seen.insert(task.id).inserted }) else { return .execute }
            holding.fire()
            return .hold()
        }
    }

    func testATaskWhoseTokenWasAppliedBeforeARunButSentAfterItIsInterceptedAgainNotSentStale() async throws {
        let hold = HoldOnce()
        let manager = manager(interceptors: [hold])
        let held = Kit.start(manager.session, url("/held"))
        try await hold.holding.wait(for: 1)
        // The hold takes effect right after the interceptor returns it.
        let deadline = ContinuousClock.now.advanced(by: .seconds(5))
        while manager.heldTaskCount(interceptorAt: 1) == 0, ContinuousClock.now < deadline { await Task.yield() }
        XCTAssertEqual(manager.heldTaskCount(interceptorAt: 1), 1)

        // Meanwhile another request needs, and gets, a refresh.
        let other = await Kit.fetch(manager.session, url("/other"))
        XCTAssertEqual(other.status, 200)
        XCTAssertEqual(tokens.runs, 1)

        // Released now, the held task carries the token it was given before the run: it runs
        // the interceptors again instead of going out with it.
        manager.flush()
        let result = await held.value
        XCTAssertEqual(result.status, 200)
        XCTAssertEqual(tokens.runs, 1, "no second run")
        XCTAssertEqual(server.requests(path: "/api/held").map { $0.headers["authorization"] }, ["Bearer t1"], "the stale token never left")
    }

    // MARK: The reactor's own request

    struct RefreshThroughManager: URLTaskReactor {
        let tokens: Tokens
        let manager: Kit.Box<URLTaskManager>
        let tokenURL: URL

        var configuration: URLTaskReactorConfiguration {
            var configuration = URLTaskReactorConfiguration.authentication
            configuration.timeout = .seconds(5)
            configuration.exempts = { $0.url?.path == "/token" }
            return configuration
        }

        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 401 }

        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
            guard let session = manager.value?.session else { throw URLError(.cancelled) }
            var request = URLRequest(url: tokenURL)
            request.httpMethod = "POST"
            let (_, response) = try await session.data(for: request)
            guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw URLError(.badServerResponse) }
            try await tokens.run()
        }
    }

    func testAReactorSendingItsOwnRequestThroughTheManagerDoesNotDeadlock() async throws {
        server.route("POST", "/token") { _ in .text("issued") }
        let box = Kit.Box<URLTaskManager>()
        let manager = URLTaskManager(
            interceptors: [TokenHeader(tokens: tokens)],
            reactors: [RefreshThroughManager(tokens: tokens, manager: box, tokenURL: server.url("/token"))]
        )
        box.value = manager
        let started = ContinuousClock.now
        let base = server.url("/api/")
        let results = await Kit.storm(manager.session, count: 20) { index in URLRequest(url: base.appendingPathComponent("\(index)")) }
        XCTAssertEqual(Kit.tally(results), ["200": 20])
        XCTAssertEqual(server.requestCount(path: "/token"), 1)
        XCTAssertEqual(tokens.runs, 1)
        XCTAssertLessThan(started.duration(to: .now), .seconds(5))
    }
}
