import Foundation

/// Collects values from any thread; a test waits, with a deadline, until enough have arrived.
package final class ProbeLog<Value: Sendable>: @unchecked Sendable {  // `values`, `waiters` and `nextWaiter` are guarded by `lock`.
    package struct Timeout: Error, CustomStringConvertible {
        package let expected: Int
        package let received: Int
        package var description: String { "timed out waiting for \(expected) events, \(received) arrived" }
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

    package init() {}

    package var all: [Value] { lock.withLock { values } }
    package var count: Int { lock.withLock { values.count } }

    package func append(_ value: Value) {
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
    package func wait(count: Int, timeout: Duration = .seconds(5)) async throws -> [Value] {
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
