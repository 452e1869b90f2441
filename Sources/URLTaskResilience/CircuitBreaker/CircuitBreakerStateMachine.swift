import URLTaskManager

/// One host's circuit: closed (counting how the host's tasks ended in a sliding window), open
/// (failing requests at once until a cool-down ends), or half-open (one probe request is out;
/// its outcome closes or reopens the circuit). Pure: time and the host's answer mark are passed
/// in, no locks, no I/O.
///
/// ```
///  closed ─failures ≥ threshold and ≥ ratio of the window's ends─> open(coolDown)
///    ^  ^                                                           │  │
///    │  └──────────── the host answered another part's probe ───────┘  │ cool-down over
///    │                                                                 v
///    └──────────── probe succeeded ───────────────── halfOpen ─probe failed─> open(coolDown × 2, capped)
/// ```
struct CircuitBreakerStateMachine: HostState {
    typealias Instant = ContinuousClock.Instant

    /// How one of the host's tasks ended, or how the probe's attempt did.
    enum Verdict: Equatable {
        case success
        case failure
        /// The server asked for a pause (`429`/`503` with `Retry-After`): neither.
        case pause
    }

    let failureThreshold: Int
    let failureRatio: Double
    let window: Duration
    let coolDown: Duration
    let maximumCoolDown: Duration
    /// How long a probe may stay unanswered (cancelled, lost) before another request probes.
    let probeTimeout: Duration

    private enum State {
        case closed(WindowCounts)
        /// Refusing until `until`; `mark` is the host's answer mark when it opened.
        case open(until: Instant, coolDown: Duration, mark: UInt64)
        case halfOpen(probe: URLTask.ID, since: Instant, coolDown: Duration)
    }

    private var state: State

    init(
        failureThreshold: Int, failureRatio: Double, window: Duration, coolDown: Duration, maximumCoolDown: Duration, probeTimeout: Duration
    ) {
        self.failureThreshold = max(1, failureThreshold)
        self.failureRatio = failureRatio.isNaN ? 0 : min(max(failureRatio, 0), 1)
        self.window = window
        self.coolDown = coolDown
        self.maximumCoolDown = max(coolDown, maximumCoolDown)
        self.probeTimeout = probeTimeout
        self.state = .closed(WindowCounts(window: window))
    }

    /// What happens to a request about to be sent.
    enum Admission: Equatable {
        /// The circuit is closed: send it.
        case pass
        /// The circuit was open, but the host answered another part's probe since it opened: it
        /// is closed now, and the request is sent.
        case closedByAnswer
        /// The cool-down ended: send it as the one probe.
        case probe
        /// The circuit is open: fail it; the next probe may go after `retryAfter`.
        case reject(retryAfter: Duration)
    }

    /// How the circuit changed after an outcome or an end.
    enum Transition: Equatable {
        case none
        /// `failures` of the window's ended tasks failed: open.
        case opened(failures: Int)
        /// The probe succeeded.
        case closed
        /// The probe failed: open for a longer cool-down.
        case reopened(coolDown: Duration)
    }

    /// Closed with nothing recent in the window: the same as a circuit never seen. Open, it is
    /// forgotten once its cool-down ended a window ago with no request since (the next request
    /// would have probed; it passes instead); half-open, once its probe went unanswered for its
    /// timeout and a window more.
    func isIdle(at now: Instant) -> Bool {
        switch state {
        case .closed(let counts): return counts.isEmpty(at: now)
        case .open(let until, _, _): return now >= until + window
        case .halfOpen(_, let since, _): return now - since >= probeTimeout + window
        }
    }

    /// Any circuit may be forgotten when the breaker remembers too many hosts: nothing waits on it.
    func mayBeEvicted(at now: Instant) -> Bool { true }

    var isOpen: Bool {
        if case .closed = state { return false }
        return true
    }

    /// A request to the host is about to be sent; `mark` is the host's answer mark now.
    mutating func requestArrives(_ task: URLTask.ID, now: Instant, mark: UInt64) -> Admission {
        switch state {
        case .closed:
            return .pass
        case .open(let until, let coolDown, let openedAt):
            if mark > openedAt {
                state = .closed(WindowCounts(window: window))
                return .closedByAnswer
            }
            guard now >= until else { return .reject(retryAfter: until - now) }
            state = .halfOpen(probe: task, since: now, coolDown: coolDown)
            return .probe
        case .halfOpen(let probe, let since, let coolDown):
            // A probe requeued (a token refresh) passes again.
            if probe == task { return .probe }
            guard now - since >= probeTimeout else { return .reject(retryAfter: since + probeTimeout - now) }
            state = .halfOpen(probe: task, since: now, coolDown: coolDown)
            return .probe
        }
    }

    /// An attempt of `task` ended with `verdict`: only the probe's attempt decides anything here
    /// (the other tasks are judged when they end). A probe answered with a pause reopens the
    /// circuit without growing its cool-down.
    mutating func attemptEnded(_ task: URLTask.ID, verdict: Verdict, now: Instant, mark: UInt64) -> Transition {
        guard case .halfOpen(let probe, _, let coolDown) = state, probe == task else { return .none }
        switch verdict {
        case .success:
            state = .closed(WindowCounts(window: window))
            return .closed
        case .failure, .pause:
            let next = verdict == .failure ? min(coolDown * 2, maximumCoolDown) : coolDown
            state = .open(until: now + next, coolDown: next, mark: mark)
            return .reopened(coolDown: next)
        }
    }

    /// A task of the host ended; `verdict` is its last attempt's (a failure a later attempt turned
    /// into a success never gets here). Counted while closed; the circuit opens when at least
    /// ``failureThreshold`` of the window's ended tasks failed and they are at least
    /// ``failureRatio`` of them.
    mutating func taskEnded(verdict: Verdict, now: Instant, mark: UInt64) -> Transition {
        guard case .closed(var counts) = state, verdict != .pause else { return .none }
        counts.record(failed: verdict == .failure, at: now)
        let (failures, total) = counts.totals(at: now)
        if failures >= failureThreshold, Double(failures) >= failureRatio * Double(total) {
            state = .open(until: now + coolDown, coolDown: coolDown, mark: mark)
            return .opened(failures: failures)
        }
        state = .closed(counts)
        return .none
    }
}

/// Failures and ends in a sliding window, in ten buckets of a tenth of the window each: memory
/// that does not grow with the request rate (the window of a host answering 1,000 requests a
/// second holds ten pairs of counts, not 30,000 instants). A bucket leaves the window once its
/// last possible count is a window old, so a count stays a tenth of the window too long at most,
/// never too short.
struct WindowCounts {
    private struct Bucket {
        var start: ContinuousClock.Instant
        var failures: Int
        var total: Int
    }

    private let window: Duration
    private let width: Duration
    private var buckets: [Bucket] = []

    init(window: Duration) {
        self.window = window
        self.width = max(window / 10, .nanoseconds(1))
    }

    mutating func record(failed: Bool, at now: ContinuousClock.Instant) {
        buckets.removeAll { now - $0.start >= window + width }
        if let last = buckets.indices.last, now - buckets[last].start < width {
            buckets[last].total += 1
            if failed { buckets[last].failures += 1 }
        } else {
            buckets.append(Bucket(start: now, failures: failed ? 1 : 0, total: 1))
        }
    }

    func totals(at now: ContinuousClock.Instant) -> (failures: Int, total: Int) {
        var failures = 0
        var total = 0
        for bucket in buckets where now - bucket.start < window + width {
            failures += bucket.failures
            total += bucket.total
        }
        return (failures, total)
    }

    func isEmpty(at now: ContinuousClock.Instant) -> Bool {
        buckets.allSatisfy { now - $0.start >= window + width }
    }
}
