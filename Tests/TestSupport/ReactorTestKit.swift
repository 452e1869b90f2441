import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
import URLTaskManager

/// Helpers for the reactor, retry, body-replay and OAuth2 tests, in one namespace so they cannot
/// collide with the other suites' helpers. Every wait is on an event with a deadline; no test
/// sleeps to let something happen.
package enum ReactorTestKit {
    /// How one caller's task ended (shared with the other suites).
    package typealias Fetch = Fetched

    /// Runs `request` with async `data(for:)`.
    package static func fetch(_ session: URLSession, _ request: URLRequest) async -> Fetch {
        await fetched(session, request)
    }

    package static func fetch(_ session: URLSession, _ url: URL) async -> Fetch {
        await fetch(session, URLRequest(url: url))
    }

    /// Starts `request` in its own task, to be awaited (or cancelled) later.
    package static func start(_ session: URLSession, _ request: URLRequest) -> Task<Fetch, Never> {
        Task { await fetch(session, request) }
    }

    package static func start(_ session: URLSession, _ url: URL) -> Task<Fetch, Never> {
        start(session, URLRequest(url: url))
    }

    /// Runs `count` requests at once and returns every outcome (in completion order).
    package static func storm(_ session: URLSession, count: Int, _ request: @escaping @Sendable (Int) -> URLRequest) async -> [Fetch] {
        await withTaskGroup(of: Fetch.self) { group in
            for index in 0..<count {
                group.addTask { await fetch(session, request(index)) }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
    }

    /// Outcomes grouped by label, for one readable assertion message.
    package static func tally(_ results: [Fetch]) -> [String: Int] {
        results.reduce(into: [:]) { $0[$1.label, default: 0] += 1 }
    }

    /// A thread-safe counter (shared with the other suites).
    package typealias Counter = CallCounter

    /// An async one-shot latch. `wait()` deliberately ignores cancellation: it stands for work
    /// that does not cooperate (a reactor awaiting someone else's task).
    package final class AsyncLatch: @unchecked Sendable {  // `opened` and `waiters` are guarded by `lock`.
        private let lock = NSLock()
        private var opened = false
        private var waiters: [CheckedContinuation<Void, Never>] = []

        package init() {}

        package func wait() async {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now: Bool = lock.withLock {
                    if opened { return true }
                    waiters.append(continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        }

        package func open() {
            let waiting: [CheckedContinuation<Void, Never>] = lock.withLock {
                opened = true
                defer { waiters.removeAll() }
                return waiters
            }
            waiting.forEach { $0.resume() }
        }
    }

    /// Counts events from any thread; a test waits, with a deadline, until enough happened.
    package final class Signal: Sendable {
        private let events = ProbeLog<Void>()

        package init() {}

        package var value: Int { events.count }

        package func fire() { events.append(()) }

        /// Returns once `target` events happened; throws ``ProbeLog/Timeout`` after `timeout`.
        package func wait(for target: Int, timeout: Duration = .seconds(10)) async throws {
            try await events.wait(count: target, timeout: timeout)
        }
    }

    /// A value set once by a test after construction (a manager its own reactor needs).
    package final class Box<Value: AnyObject & Sendable>: @unchecked Sendable {  // `stored` is guarded by `lock`.
        private let lock = NSLock()
        private weak var stored: Value?

        package init() {}

        package var value: Value? {
            get { lock.withLock { stored } }
            set { lock.withLock { stored = newValue } }
        }
    }

    /// Whether `error` is `URLError.cancelled`.
    package static func isCancelled(_ fetch: Fetch) -> Bool {
        fetch.urlErrorCode == .cancelled
    }
}
