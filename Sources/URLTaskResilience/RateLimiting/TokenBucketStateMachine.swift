import URLTaskManager
/// One host's token bucket: `rate` tokens a second up to `burst`; a request takes one token or
/// waits its turn, in arrival order. A 429 or 503 with `Retry-After` pauses the bucket. Pure: time
/// is passed in, no locks, no I/O.
struct TokenBucketStateMachine: HostState {
    typealias Instant = ContinuousClock.Instant

    /// One request waiting for a token.
    struct Waiter: Hashable, Sendable {
        let rawValue: UInt64
    }

    private enum State {
        case flowing
        /// Nothing goes before `until` (a server's `Retry-After`).
        case paused(until: Instant)
    }

    let rate: Double
    let burst: Double
    let maximumQueueLength: Int?
    private var state = State.flowing
    private var tokens: Double
    private var refilledAt: Instant
    private var queue: [Waiter] = []

    init(rate: Double, burst: Int, maximumQueueLength: Int?, now: Instant) {
        // Not positive (NaN included) lets nothing through: the wait for a token is then infinite,
        // clamped to the longest wait in `nextWake`.
        self.rate = rate > 0 ? rate : 0
        self.burst = Double(max(1, burst))
        self.maximumQueueLength = maximumQueueLength
        self.tokens = self.burst
        self.refilledAt = now
    }

    /// What an arriving request does.
    enum ArrivalAction: Equatable {
        /// Go now (a token was taken).
        case go
        /// Wait; it is `position`th in line (1 = next) and the bucket should be looked at again at `wakeAt`.
        case wait(position: Int, wakeAt: Instant)
        /// The line is full: fail it.
        case refuse(queued: Int)
    }

    /// Who may go after time passed, and when to look again.
    struct TickAction: Equatable {
        var released: [Waiter]
        var wakeAt: Instant?
    }

    /// How many requests wait.
    var queuedCount: Int { queue.count }

    /// Nobody waits, no pause is in force, and the bucket has refilled by `now`: the same as a
    /// fresh bucket, which starts full.
    func isIdle(at now: Instant) -> Bool {
        guard mayBeEvicted(at: now) else { return false }
        return tokens + max(0, (now - refilledAt) / .seconds(1)) * rate >= burst - 1e-9
    }

    /// Nobody waits and no pause a server asked for is in force: dropped when the limiter keeps
    /// too many hosts, the host starts again with a full bucket.
    func mayBeEvicted(at now: Instant) -> Bool {
        guard queue.isEmpty else { return false }
        if case .paused(let until) = state, now < until { return false }
        return true
    }

    mutating func arrive(_ waiter: Waiter, now: Instant) -> ArrivalAction {
        refill(now)
        resumeIfPauseEnded(now)
        if queue.isEmpty, case .flowing = state, hasToken {
            tokens -= 1
            return .go
        }
        if let maximumQueueLength, queue.count >= maximumQueueLength { return .refuse(queued: queue.count) }
        queue.append(waiter)
        return .wait(position: queue.count, wakeAt: nextWake(now) ?? now)
    }

    /// A waiting request left (cancelled, timed out); `false` if it was not waiting.
    mutating func leave(_ waiter: Waiter) -> Bool {
        guard let index = queue.firstIndex(of: waiter) else { return false }
        queue.remove(at: index)
        return true
    }

    /// Time passed: release the requests whose turn came, in arrival order.
    mutating func tick(now: Instant) -> TickAction {
        refill(now)
        resumeIfPauseEnded(now)
        var released: [Waiter] = []
        if case .flowing = state {
            while !queue.isEmpty, hasToken {
                tokens -= 1
                released.append(queue.removeFirst())
            }
        }
        return TickAction(released: released, wakeAt: nextWake(now))
    }

    /// A request that took a token sent nothing (it joined an identical request's transfer): the
    /// token goes back (up to `burst`; not during a pause, which spends the burst) and the
    /// requests whose turn that makes are released, as by ``tick(now:)``.
    mutating func refund(now: Instant) -> TickAction {
        refill(now)
        resumeIfPauseEnded(now)
        if case .flowing = state { tokens = min(burst, tokens + 1) }
        return tick(now: now)
    }

    /// The server asked for a pause of `duration`: nothing goes before then (a longer pause
    /// already in force stays). Returns when the waiting requests should be looked at again.
    mutating func pause(for duration: Duration, now: Instant) -> Instant? {
        let until = now + duration.clampedWait
        switch state {
        case .paused(let current) where current >= until: break
        default: state = .paused(until: until)
        }
        // The pause spends what is left of the burst now; the bucket refills over the pause as
        // over any idle time, so when it ends up to `burst` waiting requests go at once (a server
        // that asked for the pause asked for nothing for that long, not for a slower rate after
        // it), the rest at the rate.
        refill(now)
        tokens = min(tokens, 1)
        return nextWake(now)
    }

    private var hasToken: Bool { tokens >= 1 - 1e-9 }

    private mutating func refill(_ now: Instant) {
        guard now > refilledAt else { return }
        if case .paused(let until) = state, now < until {
            refilledAt = now
            return
        }
        tokens = min(burst, tokens + ((now - refilledAt) / .seconds(1)) * rate)
        refilledAt = now
    }

    private mutating func resumeIfPauseEnded(_ now: Instant) {
        if case .paused(let until) = state, now >= until { state = .flowing }
    }

    private func nextWake(_ now: Instant) -> Instant? {
        guard !queue.isEmpty else { return nil }
        if case .paused(let until) = state { return until }
        let missing = max(0, 1 - tokens)
        return now + Duration(clampingSeconds: missing / rate)
    }
}
