import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
import URLTaskManager

/// Helpers for the resilience components' tests: every wait is on an event with a deadline.
package enum ResilienceTestKit {
    /// Collects a component's events as they come, and waits (with a deadline) for one that
    /// matches.
    package final class Events<Event: Sendable>: @unchecked Sendable {  // `events` and `waiters` are guarded by `lock`.
        private struct Waiter {
            let matches: @Sendable (Event) -> Bool
            let count: Int
            let continuation: CheckedContinuation<Void, any Error>
        }

        private let lock = NSLock()
        private var events: [Event] = []
        private var waiters: [Int: Waiter] = [:]
        private var nextWaiter = 0
        private var reader: Task<Void, Never>?

        package init(_ stream: AsyncStream<Event>) {
            reader = Task { [weak self] in
                for await event in stream { self?.append(event) }
            }
        }

        deinit { reader?.cancel() }

        package var all: [Event] { lock.withLock { events } }

        package func count(where matches: (Event) -> Bool) -> Int {
            lock.withLock { events.filter(matches).count }
        }

        private func append(_ event: Event) {
            let due: [Waiter] = lock.withLock {
                events.append(event)
                let ready = waiters.filter { id, waiter in events.filter(waiter.matches).count >= waiter.count }
                for id in ready.keys { waiters[id] = nil }
                return Array(ready.values)
            }
            for waiter in due { waiter.continuation.resume() }
        }

        /// Returns once `count` events matching `matches` arrived; throws ``WaitTimedOut`` after `timeout`.
        package func wait(
            _ what: String, count: Int = 1, timeout: Duration = .seconds(10), where matches: @escaping @Sendable (Event) -> Bool
        ) async throws {
            let id: Int = lock.withLock {
                nextWaiter += 1
                return nextWaiter
            }
            let timer = Task { [weak self] in
                try? await Task.sleep(for: timeout)
                guard !Task.isCancelled else { return }
                self?.expire(id, WaitTimedOut(what: what, after: timeout))
            }
            defer { timer.cancel() }
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let done: Bool = lock.withLock {
                    if events.filter(matches).count >= count { return true }
                    waiters[id] = Waiter(matches: matches, count: count, continuation: continuation)
                    return false
                }
                if done { continuation.resume() }
            }
        }

        private func expire(_ id: Int, _ error: any Error) {
            let waiter = lock.withLock { waiters.removeValue(forKey: id) }
            waiter?.continuation.resume(throwing: error)
        }
    }

    /// A clock a test moves by hand.
    package final class ManualClock: @unchecked Sendable {  // `offset` is guarded by `lock`.
        private let lock = NSLock()
        private let start = ContinuousClock.now
        private var offset = Duration.zero

        package init() {}

        package var now: ContinuousClock.Instant { lock.withLock { start + offset } }

        package func advance(by duration: Duration) {
            lock.withLock { offset += duration }
        }
    }

    /// A port nothing listens on: a server started and shut down.
    package static func deadURL(_ path: String) throws -> URL {
        let server = try LoopbackServer()
        let url = server.url(path)
        server.shutdown()
        return url
    }

    /// The underlying error of an interceptor's or reactor's failure.
    package static func underlying(_ fetched: Fetched) -> (any Error)? {
        fetched.taskError?.underlying
    }
}
