import Foundation
import URLTaskManager

/// What the parts of a stack learn about a host, shared so that they agree on it instead of
/// holding four opinions.
///
/// An ``OfflineHold`` probes a host its requests could not reach; when a probe is answered, the
/// host is reachable again for every part, and a ``CircuitBreaker`` whose circuit that outage
/// opened closes at once instead of refusing the held requests the hold is about to send
/// (before, the breaker counted the hold's failures, opened for 30 s, and refused those requests
/// with the server already back). The rest of the shared view needs no object: a `503` or `429`
/// with `Retry-After` is a pause every part reads from the answer itself (the breaker does not
/// count it, the ``RateLimiter`` holds the host's requests until it ends, the ``RetryReactor``
/// waits it out), and a failure another part turns into a success (a retried `503`, a connection
/// refused that the hold waits out) is judged by the breaker at the task's end, not at the
/// attempt.
///
/// Every part uses ``shared`` unless it is given another: parts of one process that talk to one
/// host see one host. Give your own instance to parts that must not learn from the rest of the
/// process (tests that reuse a port).
public final class HostHealth: Sendable {
    /// The process's view, which every part uses by default.
    public static let shared = HostHealth()

    private struct State {
        /// For each host that answered a probe, the number of that answer in this view's sequence.
        var answers: [String: UInt64] = [:]
        var counter: UInt64 = 0
        /// Told of each answer (an ``OfflineHold`` sends the requests it holds for that host).
        var listeners: [UInt64: @Sendable (String) -> Void] = [:]
        var lastListener: UInt64 = 0
    }

    private let state = LockedState(State())
    /// The most hosts remembered; past it the older half is forgotten (a forgotten host reads as
    /// never answered, which closes nothing early).
    private let capacity: Int

    /// An empty view.
    public init() {
        self.capacity = 4_096
    }

    init(capacity: Int) {
        self.capacity = max(2, capacity)
    }

    /// `host` (`scheme://host:port`, as `URLOrigin` spells it) answered a probe: it is reachable.
    /// Every part learns it: a breaker closes the circuit that host's outage opened, a hold sends
    /// the requests it holds for it without waiting for its own next probe.
    public func hostAnswered(_ host: String) {
        let listeners = state.withLock { state in
            state.counter += 1
            state.answers[host] = state.counter
            if state.answers.count > capacity {
                let keep = state.answers.sorted { $0.value > $1.value }.prefix(capacity / 2)
                state.answers = Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
            }
            return Array(state.listeners.values)
        }
        for listener in listeners { listener(host) }
    }

    /// Calls `listener` with each host that answers from now on, until ``removeListener(_:)``.
    func addListener(_ listener: @escaping @Sendable (String) -> Void) -> UInt64 {
        state.withLock { state in
            state.lastListener += 1
            state.listeners[state.lastListener] = listener
            return state.lastListener
        }
    }

    func removeListener(_ id: UInt64) {
        state.withLock { _ = $0.listeners.removeValue(forKey: id) }
    }

    /// A mark of the last answer of `host`: compared with a mark taken earlier, it says whether
    /// the host answered in between (a greater mark). 0 when it never did.
    func answerMark(of host: String) -> UInt64 {
        state.withLock { $0.answers[host] ?? 0 }
    }
}
