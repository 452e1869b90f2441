import Foundation

/// Thrown when an awaited event did not happen before its deadline.
package struct WaitTimedOut: Error, CustomStringConvertible {
    package let what: String
    package let after: Duration

    package init(what: String, after: Duration) {
        self.what = what
        self.after = after
    }
    package var description: String { "timed out after \(after) waiting for \(what)" }
}

/// A value that is set once, from any thread, and that async code awaits with a deadline.
///
/// Tests synchronise on these instead of sleeping: a callback fulfils the latch, the test awaits
/// it, and a forgotten event fails the test after the deadline instead of hanging it.
package final class Latch<Value: Sendable>: @unchecked Sendable {  // `value`, `waiters`, `expired` are guarded by `lock`.
    package let what: String
    private let lock = NSLock()
    private var value: Value?
    private var waiters: [Int: CheckedContinuation<Value, any Error>] = [:]
    private var expired: Set<Int> = []
    private var nextWaiter = 0

    package init(_ what: String) {
        self.what = what
    }

    /// Sets the value and wakes every waiter; returns false (and changes nothing) if already set.
    @discardableResult
    package func fulfill(_ value: Value) -> Bool {
        let woken: [CheckedContinuation<Value, any Error>]? = lock.withLock {
            guard self.value == nil else { return nil }
            self.value = value
            defer { waiters = [:] }
            return Array(waiters.values)
        }
        guard let woken else { return false }
        for waiter in woken { waiter.resume(returning: value) }
        return true
    }

    /// The value, if it has been set.
    package var current: Value? { lock.withLock { value } }

    /// Waits for the value; throws ``WaitTimedOut`` after `timeout`.
    package func wait(timeout: Duration = .seconds(30)) async throws -> Value {
        let id = lock.withLock {
            nextWaiter += 1
            return nextWaiter
        }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            guard !Task.isCancelled else { return }
            self?.expire(id, after: timeout)
        }
        defer { timer.cancel() }
        return try await withCheckedThrowingContinuation { continuation in
            let outcome: Result<Value, any Error>? = lock.withLock {
                if let value { return .success(value) }
                if expired.remove(id) != nil { return .failure(WaitTimedOut(what: what, after: timeout)) }
                waiters[id] = continuation
                return nil
            }
            if let outcome { continuation.resume(with: outcome) }
        }
    }

    private func expire(_ id: Int, after timeout: Duration) {
        let waiter: CheckedContinuation<Value, any Error>? = lock.withLock {
            if value != nil { return nil }
            guard let waiter = waiters.removeValue(forKey: id) else {
                expired.insert(id)
                return nil
            }
            return waiter
        }
        waiter?.resume(throwing: WaitTimedOut(what: what, after: timeout))
    }
}

/// A thread-safe counter.
package final class CallCounter: @unchecked Sendable {  // `count` is guarded by `lock`.
    private let lock = NSLock()
    private var count = 0

    package init() {}

    @discardableResult
    package func increment() -> Int {
        lock.withLock {
            count += 1
            return count
        }
    }

    package var value: Int { lock.withLock { count } }
}

/// A value shared between a test and callbacks on other threads.
package final class LockedBox<Value>: @unchecked Sendable {  // `value` is guarded by `lock`.
    private let lock = NSLock()
    private var value: Value

    package init(_ value: Value) {
        self.value = value
    }

    package func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        try lock.withLock { try body(&value) }
    }

    package var snapshot: Value { lock.withLock { value } }
}
