import XCTest
import LoopbackServer
@testable import URLTaskManager
import TestSupport

// Helpers for the interceptor integration tests. Every wait is on an event, with a deadline
// (``ProbeLog``): a test never sleeps to let something happen.

/// The interceptor suites' fixture: a fresh loopback server per test that answers `ok` to
/// every path, so a test only routes what it needs differently.
class OKServerTestCase: XCTestCase {
    var server: LoopbackServer!

    override func setUpWithError() throws {
        server = try LoopbackServer()
        server.route(prefix: "/") { _ in .text("ok") }
    }

    override func tearDown() {
        server.shutdown()
        server = nil
    }
}

/// What a ``ProbeInterceptor`` saw and decided.
struct ProbeEvent: Sendable {
    enum Decision: Sendable, Equatable {
        case execute, hold, release, fail, respond, threw
    }

    let taskID: URLTask.ID
    let attempt: Int
    let path: String
    let decision: Decision
    /// `InterceptContext.currentBatchCount` as the interceptor was given it.
    let batchCount: Int
    let headers: [String: String]
}

/// Runs `inner` and records each decision as it is returned, so a test can wait for "9 tasks
/// returned `.hold`" as an event instead of polling `heldTaskCount`.
///
/// The event comes just before the manager puts the task in its batch. That is enough for
/// every release a test then triggers: a size-based release (`BatchInterceptor` intercepts
/// one task at a time, and the next call starts only once this hold has landed), a cancel
/// (a hold that lands after its task was cancelled is taken out again), and a flush (a hold
/// decided before a flush that has happened since is released at once).
struct ProbeInterceptor<Inner: URLTaskInterceptor>: URLTaskInterceptor {
    let inner: Inner
    let log: ProbeLog<ProbeEvent>

    init(_ inner: Inner, log: ProbeLog<ProbeEvent>) {
        self.inner = inner
        self.log = log
    }

    var interceptsOneAtATime: Bool { inner.interceptsOneAtATime }

    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        let command: InterceptCommand
        do {
            command = try await inner.intercept(&task, context: context)
        } catch {
            record(task, .threw, context)
            throw error
        }
        let decision: ProbeEvent.Decision
        switch command {
        case .execute: decision = .execute
        case .hold: decision = .hold
        case .release: decision = .release
        case .fail: decision = .fail
        case .respond: decision = .respond
        }
        record(task, decision, context)
        return command
    }

    private func record(_ task: URLTask, _ decision: ProbeEvent.Decision, _ context: InterceptContext) {
        log.append(
            ProbeEvent(
                taskID: task.id, attempt: task.attempt, path: task.request.url?.path ?? "",
                decision: decision, batchCount: context.currentBatchCount,
                headers: task.request.allHTTPHeaderFields ?? [:]
            ))
    }
}

/// Counts its calls and passes the task on.
struct CountingInterceptor: URLTaskInterceptor {
    let log: ProbeLog<ProbeEvent>

    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        log.append(
            ProbeEvent(
                taskID: task.id, attempt: task.attempt, path: task.request.url?.path ?? "",
                decision: .execute, batchCount: context.currentBatchCount, headers: [:]
            ))
        return .execute
    }
}

extension XCTestCase {
    /// The time between the first and the last arrival.
    func arrivalSpread(_ requests: [RecordedRequest]) -> Duration {
        guard let first = requests.map(\.arrivedAt).min(), let last = requests.map(\.arrivedAt).max() else { return .zero }
        return first.duration(to: last)
    }
}
