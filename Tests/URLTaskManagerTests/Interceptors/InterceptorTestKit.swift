import XCTest
import LoopbackServer
@testable import URLTaskManager

// Helpers for the interceptor integration tests. Every wait here is on an event, with a
// deadline: a test never sleeps to let something happen.

/// Collects values from any thread; a test waits, with a deadline, until enough have arrived.
final class ProbeLog<Value: Sendable>: @unchecked Sendable {  // `values`, `waiters` and `nextWaiter` are guarded by `lock`.
    struct Timeout: Error, CustomStringConvertible {
        let expected: Int
        let received: Int
        var description: String { "timed out waiting for \(expected) events, \(received) arrived" }
    }

    private struct Waiter {
        var count: Int
        var continuation: CheckedContinuation<[Value], any Error>
        var deadline: Task<Void, Never>?
    }

    private let lock = NSLock()
    private var values: [Value] = []
    private var waiters: [Int: Waiter] = [:]
    private var nextWaiter = 0

    var all: [Value] { lock.withLock { values } }
    var count: Int { lock.withLock { values.count } }

    func append(_ value: Value) {
        let due: [(Waiter, [Value])] = lock.withLock {
            values.append(value)
            let ready = waiters.filter { $0.value.count <= values.count }
            for id in ready.keys { waiters[id] = nil }
            return ready.values.map { ($0, Array(values.prefix($0.count))) }
        }
        for (waiter, values) in due {
            waiter.deadline?.cancel()
            waiter.continuation.resume(returning: values)
        }
    }

    /// The first `count` values once they have arrived; throws ``Timeout`` after `timeout`.
    @discardableResult
    func wait(count: Int, timeout: Duration = .seconds(5)) async throws -> [Value] {
        try await withCheckedThrowingContinuation { continuation in
            let id: Int? = lock.withLock {
                guard values.count < count else { return nil }
                defer { nextWaiter += 1 }
                waiters[nextWaiter] = Waiter(count: count, continuation: continuation)
                return nextWaiter
            }
            guard let id else {
                continuation.resume(returning: Array(all.prefix(count)))
                return
            }
            let deadline = Task {
                do { try await Task.sleep(for: timeout) } catch { return }
                let (expired, received) = self.lock.withLock { (self.waiters.removeValue(forKey: id), self.values.count) }
                expired?.continuation.resume(throwing: Timeout(expected: count, received: received))
            }
            let stillWaiting = lock.withLock {
                guard waiters[id] != nil else { return false }
                waiters[id]?.deadline = deadline
                return true
            }
            if !stillWaiting { deadline.cancel() }
        }
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
        log.append(ProbeEvent(
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
        log.append(ProbeEvent(
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
