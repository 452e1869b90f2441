import URLTaskManager
/// One host's circuit: closed (counting failures in a sliding window), open (failing requests
/// at once until a cool-down ends), or half-open (one probe request is out; its outcome closes
/// or reopens the circuit). Pure: time is passed in, no locks, no I/O.
struct CircuitBreakerStateMachine: HostState {
    typealias Instant = ContinuousClock.Instant

    let failureThreshold: Int
    let window: Duration
    let coolDown: Duration
    /// How long a probe may stay unanswered (cancelled, lost) before another request probes.
    let probeTimeout: Duration

    private enum State {
        case closed(failures: [Instant])
        case open(until: Instant)
        case halfOpen(probe: URLTask.ID, since: Instant)
    }

    private var state = State.closed(failures: [])

    init(failureThreshold: Int, window: Duration, coolDown: Duration, probeTimeout: Duration) {
        self.failureThreshold = max(1, failureThreshold)
        self.window = window
        self.coolDown = coolDown
        self.probeTimeout = probeTimeout
    }

    /// What happens to a request about to be sent.
    enum Admission: Equatable {
        /// The circuit is closed: send it.
        case pass
        /// The cool-down ended: send it as the one probe.
        case probe
        /// The circuit is open: fail it; the next probe may go after `retryAfter`.
        case reject(retryAfter: Duration)
    }

    /// How the circuit changed after an outcome.
    enum Transition: Equatable {
        case none
        /// `failures` failures within the window: open.
        case opened(failures: Int)
        /// The probe succeeded.
        case closed
        /// The probe failed: open for another cool-down.
        case reopened
    }

    /// Closed with no failure within the window: the same as a circuit never seen. Open, it is
    /// forgotten once its cool-down ended a window ago with no request since (the next request
    /// would have probed; it passes instead); half-open, once its probe went unanswered for its
    /// timeout and a window more.
    func isIdle(at now: Instant) -> Bool {
        switch state {
        case .closed(let failures): return failures.allSatisfy { now - $0 > window }
        case .open(let until): return now >= until + window
        case .halfOpen(_, let since): return now - since >= probeTimeout + window
        }
    }

    /// Any circuit may be forgotten when the breaker remembers too many hosts: nothing waits on it.
    func mayBeEvicted(at now: Instant) -> Bool { true }

    var isOpen: Bool {
        if case .closed = state { return false }
        return true
    }

    mutating func requestArrives(_ task: URLTask.ID, now: Instant) -> Admission {
        switch state {
        case .closed:
            return .pass
        case .open(let until):
            guard now >= until else { return .reject(retryAfter: until - now) }
            state = .halfOpen(probe: task, since: now)
            return .probe
        case .halfOpen(let probe, let since):
            // A probe requeued (a token refresh) passes again.
            if probe == task { return .probe }
            guard now - since >= probeTimeout else { return .reject(retryAfter: since + probeTimeout - now) }
            state = .halfOpen(probe: task, since: now)
            return .probe
        }
    }

    mutating func outcome(of task: URLTask.ID, failed: Bool, now: Instant) -> Transition {
        switch state {
        case .closed(var failures):
            guard failed else { return .none }
            failures.removeAll { now - $0 > window }
            failures.append(now)
            if failures.count >= failureThreshold {
                state = .open(until: now + coolDown)
                return .opened(failures: failures.count)
            }
            state = .closed(failures: failures)
            return .none
        case .open:
            // Answers to requests sent before the circuit opened change nothing.
            return .none
        case .halfOpen(let probe, _):
            guard probe == task else { return .none }
            if failed {
                state = .open(until: now + coolDown)
                return .reopened
            }
            state = .closed(failures: [])
            return .closed
        }
    }
}
