/// Which shared requests of a ``CoalescingInterceptor`` are in flight, and who waits for each.
///
/// One entry per key (method, URL, answer-changing headers) while its shared request runs. The
/// first waiter for a key starts a shared request (a new generation); later ones join it. A
/// waiter that leaves (cancelled, timed out) never stops the shared request while another still
/// waits; the last one to leave cancels it. The entry ends when the shared request finishes, and
/// every waiter still there gets its answer. Pure: no locks, no I/O.
struct CoalescingStateMachine {
    /// One caller's task waiting in the interceptor.
    struct Waiter: Hashable, Sendable {
        let rawValue: UInt64
    }

    private enum State {
        /// A shared request is in flight; `waiters` in arrival order.
        case inFlight(generation: Int, waiters: [Waiter])
    }

    private var entries: [String: State] = [:]
    /// Where each waiting waiter is, and under which key each generation runs.
    private var keyOfWaiter: [Waiter: String] = [:]
    private var keyOfGeneration: [Int: String] = [:]
    private var lastGeneration = 0

    /// What a waiter's arrival does.
    enum ArrivalAction: Equatable {
        /// Nothing is in flight for the key: start shared request `generation`.
        case startShared(generation: Int)
        /// Wait for the shared request already in flight.
        case join(generation: Int)
    }

    /// What a waiter's departure does.
    enum LeaveAction: Equatable {
        /// The waiter was not waiting (already answered): an expected race.
        case none
        /// It left; others still wait for the shared request.
        case left
        /// It was the last: cancel shared request `generation`, nobody wants its answer.
        case cancelShared(generation: Int)
    }

    /// How many keys have a shared request in flight.
    var inFlightCount: Int { entries.count }

    mutating func waiterArrived(_ waiter: Waiter, key: String) -> ArrivalAction {
        precondition(keyOfWaiter[waiter] == nil, "a waiter arrives once")
        keyOfWaiter[waiter] = key
        switch entries[key] {
        case .inFlight(let generation, var waiters):
            waiters.append(waiter)
            entries[key] = .inFlight(generation: generation, waiters: waiters)
            return .join(generation: generation)
        case nil:
            lastGeneration += 1
            entries[key] = .inFlight(generation: lastGeneration, waiters: [waiter])
            keyOfGeneration[lastGeneration] = key
            return .startShared(generation: lastGeneration)
        }
    }

    mutating func waiterLeft(_ waiter: Waiter) -> LeaveAction {
        guard let key = keyOfWaiter.removeValue(forKey: waiter), case .inFlight(let generation, var waiters) = entries[key] else {
            return .none
        }
        waiters.removeAll { $0 == waiter }
        if waiters.isEmpty {
            entries[key] = nil
            keyOfGeneration[generation] = nil
            return .cancelShared(generation: generation)
        }
        entries[key] = .inFlight(generation: generation, waiters: waiters)
        return .left
    }

    /// Shared request `generation` passes the interceptor again (a requeue after a token refresh)
    /// with headers that make `newKey`: callers arriving with those headers join it rather than
    /// start another, unless another shared request already runs under that key.
    mutating func sharedReintercepted(generation: Int, newKey: String) {
        guard let key = keyOfGeneration[generation], key != newKey, entries[newKey] == nil, let state = entries.removeValue(forKey: key)
        else {
            return
        }
        entries[newKey] = state
        keyOfGeneration[generation] = newKey
        if case .inFlight(_, let waiters) = state {
            for waiter in waiters { keyOfWaiter[waiter] = newKey }
        }
    }

    /// Shared request `generation` ended: the waiters to answer, in arrival order (none when every
    /// waiter left and the request was cancelled).
    mutating func sharedFinished(generation: Int) -> [Waiter] {
        guard let key = keyOfGeneration.removeValue(forKey: generation), case .inFlight(let current, let waiters) = entries[key],
            current == generation
        else { return [] }
        entries[key] = nil
        for waiter in waiters { keyOfWaiter[waiter] = nil }
        return waiters
    }
}
