import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The subscribers of a stream of events, and the one check every task makes: is anyone
/// listening? The manager's task events (``URLTaskEvent``) and each resilience component's
/// decisions go through one of these.
///
/// A task started while nobody listens records nothing and emits nothing (its ``TaskObserver``
/// is `nil`). Events go to each subscriber's `AsyncStream`, which keeps the newest ones when
/// its reader falls behind: a slow listener loses the oldest events, never blocks a task.
/// Every stream ends when ``finish()`` is called or the hub is released.
final class EventHub<Event: Sendable>: @unchecked Sendable {  // `subscribers` and `nextKey` are guarded by `lock`.
    private let lock = NSLock()
    private var subscribers: [Int: AsyncStream<Event>.Continuation] = [:]
    private var nextKey = 0

    var isListening: Bool {
        lock.withLock { !subscribers.isEmpty }
    }

    func subscribe(bufferingNewest limit: Int) -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(limit))
        let key: Int = lock.withLock {
            nextKey += 1
            subscribers[nextKey] = continuation
            return nextKey
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            _ = self.lock.withLock { self.subscribers.removeValue(forKey: key) }
        }
        return stream
    }

    func emit(_ event: Event) {
        let current = lock.withLock { Array(subscribers.values) }
        for continuation in current { continuation.yield(event) }
    }

    /// Ends every subscriber's stream (the session is gone).
    func finish() {
        let current = lock.withLock {
            defer { subscribers = [:] }
            return Array(subscribers.values)
        }
        for continuation in current { continuation.finish() }
    }

    deinit {
        for continuation in subscribers.values { continuation.finish() }
    }
}
