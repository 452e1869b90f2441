/// How many requests to each host are with URLSession at once, without I/O.
///
/// URLSession opens at most `httpMaximumConnectionsPerHost` connections to a host and queues
/// the rest of its tasks inside, with their headers already decided. A request queued there
/// when a token refresh starts would go out later with the stale token. So while a reactor
/// may hold new tasks, the manager keeps the queue itself: a task takes one of the host's
/// `limit` slots just before it is sent (after its interceptors ran) and gives it back when
/// its transfer ends. A task that waits for a slot is checked against the reactors again when
/// it gets one, so its headers are never older than the last refresh.
///
/// ```
///  open(inFlight < limit) ──acquire──> open(inFlight + 1) or full(waiting: [])
///  full(waiting) ──acquire──> full(waiting + [id])          (the task waits)
///  full([first, ...]) ──release──> full([...])               (first gets the slot)
///  full([]) ──release──> open(limit - 1) ──...──> (host forgotten at 0)
/// ```
struct ConnectionSlotsStateMachine {
    typealias TaskID = URLTask.ID

    enum AcquireAction: Equatable {
        /// The task has a slot: send it now.
        case send
        /// Every slot is taken: the task waits for ``release(host:)`` to hand it one.
        case wait
    }

    private enum HostState {
        /// Fewer than `limit` requests in flight, nobody waiting.
        case open(inFlight: Int)
        /// `limit` requests in flight; these tasks wait, first come first served.
        case full(waiting: [TaskID])
    }

    let limit: Int
    private var hosts: [String: HostState] = [:]

    /// - Parameter limit: Requests per host at once; at least 1.
    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// The number of hosts with a request in flight (for tests: a finished burst leaves none).
    var busyHosts: Int { hosts.count }
    /// How many hosts the table has room for (for tests: a burst's room goes back after it).
    var hostRoom: Int { hosts.capacity }

    /// Task `id` is about to send a request to `host`.
    mutating func acquire(_ id: TaskID, host: String) -> AcquireAction {
        switch hosts[host] ?? .open(inFlight: 0) {
        case .open(let inFlight):
            hosts[host] = inFlight + 1 == limit ? .full(waiting: []) : .open(inFlight: inFlight + 1)
            return .send
        case .full(var waiting):
            waiting.append(id)
            hosts[host] = .full(waiting: waiting)
            return .wait
        }
    }

    /// A request to `host` ended (or was not sent after all). Returns the waiting task that now
    /// has its slot, if any.
    mutating func release(host: String) -> TaskID? {
        switch hosts[host] {
        case nil:
            return nil
        case .open(let inFlight):
            if inFlight > 1 {
                hosts[host] = .open(inFlight: inFlight - 1)
            } else {
                // Back at the default: forgotten, and the room a burst of hosts took goes back.
                hosts.removeValueShrinking(forKey: host)
            }
            return nil
        case .full(var waiting):
            guard !waiting.isEmpty else {
                if limit > 1 {
                    hosts[host] = .open(inFlight: limit - 1)
                } else {
                    hosts.removeValueShrinking(forKey: host)
                }
                return nil
            }
            let next = waiting.removeFirst()
            hosts[host] = .full(waiting: waiting)
            return next
        }
    }

    /// A waiting task was cancelled. Returns whether it was waiting.
    mutating func remove(_ id: TaskID, host: String) -> Bool {
        guard case .full(var waiting) = hosts[host], let index = waiting.firstIndex(of: id) else { return false }
        waiting.remove(at: index)
        hosts[host] = .full(waiting: waiting)
        return true
    }
}
