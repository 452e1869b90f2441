import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The subscribers of a stream of events, and the one check every task makes: is anyone
/// listening? The manager's task events (``URLTaskEvent``) and each resilience component's
/// decisions (through ``DecisionEvents``) go through one of these.
///
/// A task started while nobody listens records nothing and emits nothing (its ``TaskEventRecorder``
/// is `nil`). Events go to each subscriber's `AsyncStream`, which keeps the newest ones when
/// its reader falls behind: a slow listener loses the oldest events, never blocks a task.
/// Every stream ends when ``finish()`` is called or the hub is released.
///
/// A hub made with a `batchWindow` yields its events in batches, at most that long after they
/// were emitted, in order (see ``EventBatchStateMachine``); one without yields each at once.
final class EventHub<Event: Sendable>: Sendable {
    private struct State {
        var subscribers: [Int: AsyncStream<Event>.Continuation] = [:]
        var nextKey = 0
        var batch = EventBatchStateMachine<Event>()
    }

    private let state = LockedState(State())
    private let batchWindow: Duration?
    /// Where batches are yielded: one at a time, so they reach the streams in order.
    private let flushQueue = DispatchQueue(label: "URLTaskManager.EventHub")

    /// The longest a batch gathers: a longer window (a timer that never fires) would keep every
    /// event in memory and hand none over.
    static var longestBatchWindow: Duration { .seconds(60) }

    init(batchWindow: Duration? = nil) {
        self.batchWindow = batchWindow.map { min($0.clampedWait, Self.longestBatchWindow) }
    }

    var isListening: Bool {
        state.withLock { !$0.subscribers.isEmpty }
    }

    func subscribe(bufferingNewest limit: Int) -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(limit))
        let key: Int = state.withLock { state in
            state.nextKey += 1
            state.subscribers[state.nextKey] = continuation
            return state.nextKey
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            _ = self.state.withLock { $0.subscribers.removeValue(forKey: key) }
        }
        return stream
    }

    func emit(_ event: Event) {
        guard let batchWindow else {
            let current = state.withLock { Array($0.subscribers.values) }
            for continuation in current { continuation.yield(event) }
            return
        }
        switch state.withLock({ $0.batch.emitted(event) }) {
        case .scheduleFlush:
            flushQueue.asyncAfter(deadline: .now() + batchWindow.dispatchInterval) { [self] in
                let (events, current) = state.withLock { ($0.batch.flushDue(), Array($0.subscribers.values)) }
                Self.yield(events, to: current, thenFinish: false)
            }
        case .none:
            break
        }
    }

    /// Ends every subscriber's stream (the session is gone), after the events still pending.
    ///
    /// With batches, the pending events are yielded and the streams ended on the flush queue,
    /// after a batch being yielded there now (so no event is yielded out of order or after its
    /// stream ended), and this waits for it: when it returns, every event is in the streams, as
    /// without batches, and a reader that starts only then finds the newest of them. (Waiting
    /// cannot deadlock: the flush queue only yields, and a yield never waits.) Calling it again
    /// does nothing, at once: an invalidated and cancelled session ends its streams as it is
    /// cancelled, and again when its inner session goes.
    func finish() {
        let (action, current) = state.withLock { state in
            defer { state.subscribers = [:] }
            return (state.batch.finished(), Array(state.subscribers.values))
        }
        guard case .yieldThenEnd(let events) = action else { return }
        let end: @Sendable () -> Void = { Self.yield(events, to: current, thenFinish: true) }
        if batchWindow == nil { end() } else { flushQueue.sync(execute: end) }
    }

    /// Yields `events`, in order, to each of `continuations`, and ends their streams if asked.
    private static func yield(_ events: [Event], to continuations: [AsyncStream<Event>.Continuation], thenFinish: Bool) {
        for continuation in continuations {
            for event in events { continuation.yield(event) }
            if thenFinish { continuation.finish() }
        }
    }

    deinit {
        // A flush still scheduled holds the hub, so nothing is pending here.
        for continuation in state.withLock({ $0.subscribers.values }) { continuation.finish() }
    }
}
