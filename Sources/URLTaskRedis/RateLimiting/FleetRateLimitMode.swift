import URLTaskManager

/// Whether a ``FleetRateLimiter`` takes its turns from Redis (the fleet's shared bucket), from
/// its local fallback bucket, or from both, and when it asks Redis again after it stopped
/// answering.
///
/// Pure: time (and the random phase of a fall back) is passed in, no locks, no I/O. The limiter
/// holds it under its lock, calls one method per event and does what the returned value says.
/// Only the head of a host's line in the process asks ("the request" below): the others wait in
/// line, so that whatever this machine says when Redis comes back applies to all of them.
///
/// - **shared**: a request asks Redis.
/// - **local**: Redis did not answer (a closed connection, a timeout, a "not yet" reply); a
///   request takes the local bucket's turn. The first local turn after a fall back from shared
///   comes no sooner than an empty local bucket would give one, at a random phase
///   (`localFrom`): the shared bucket may have just given its burst, and every process of the
///   fleet falls back at the same moment, so full buckets started together would add a burst to
///   that one and then release in lockstep. A request that has its local turn after `probeAt`
///   asks Redis as well (it is the probe).
/// - **probing**: one request asks Redis; the others keep to the local bucket meanwhile. An
///   answer rejoins; another failure goes back to local with the back-off doubled (up to its
///   maximum).
/// - **rejoining**: Redis answered again, but the other processes find that out only at their
///   own next probe, up to the longest back-off later, and keep to their local share until
///   then. Until `until` a request takes a local turn first and then asks Redis: this process
///   stays within its share too, and its turns are counted in the shared bucket, so when the
///   grace ends nothing the fleet sent meanwhile comes on top of a fresh burst.
struct FleetRateLimitMode {
    typealias Instant = ContinuousClock.Instant

    private enum State: Equatable {
        case shared
        case rejoining(until: Instant)
        case local(probeAt: Instant, backOff: Duration)
        case probing(backOff: Duration)
    }

    /// What the request at the head of the line does next.
    enum Route: Equatable {
        /// Ask Redis.
        case shared
        /// Ask Redis; this request is the probe after a fall back, so whatever it learns decides
        /// the mode for the others. It already has its local turn.
        case probe
        /// Take a turn from the local bucket, then ask again.
        case local
        /// The local bucket gives no turn before `until` (its empty start after a fall back):
        /// wait, then ask again.
        case wait(until: Instant)
        /// Go: the local turn it has is all it needs.
        case go
    }

    /// What the limiter announces after an event.
    enum Action: Equatable {
        case none
        /// Redis stopped answering: the local bucket takes over; Redis is asked again after
        /// `probeIn`.
        case fellBack(probeIn: Duration)
        /// Redis answered again after a fall back: the shared bucket is back.
        case rejoined
    }

    /// The first wait before Redis is asked again after it stopped answering.
    let probeDelay: Duration
    /// The longest wait between two probes: the wait doubles after each failed probe up to this.
    let maximumProbeDelay: Duration
    /// One local turn: `processCount / rate`.
    let localInterval: Duration
    /// How long an empty local bucket takes to fill: its burst of local intervals.
    let localFill: Duration
    /// How long after its rejoin a process keeps to its local share as well: until every other
    /// process has probed again (the longest back-off, and the wait for its first local turn).
    let rejoinGrace: Duration
    private var state = State.shared
    /// No local turn before this (set by a fall back from shared).
    private var localFrom: Instant?

    /// `localInterval` and `localBurst` are the local bucket's (`processCount / rate` and
    /// `burst / processCount`).
    init(probeDelay: Duration, maximumProbeDelay: Duration, localInterval: Duration = .zero, localBurst: Int = 1) {
        self.probeDelay = max(.zero, probeDelay)
        self.maximumProbeDelay = max(self.probeDelay, maximumProbeDelay)
        self.localInterval = localInterval.clampedWait
        self.localFill = Duration(clampingSeconds: Self.seconds(self.localInterval) * Double(max(1, localBurst)))
        self.rejoinGrace = (self.maximumProbeDelay + localFill + self.localInterval).clampedWait
    }

    /// Whether requests ask Redis (no fall back in force; a rejoin's grace counts as shared).
    var isShared: Bool {
        switch state {
        case .shared, .rejoining: return true
        case .local, .probing: return false
        }
    }

    /// Whether a request needs a turn from the local bucket now (while Redis is away, and during
    /// a rejoin's grace).
    func needsLocalTurn(now: Instant) -> Bool {
        switch state {
        case .shared: return false
        case .rejoining(let until): return now < until
        case .local, .probing: return true
        }
    }

    /// The request at the head of the line asks what to do at `now`; `hasLocalTurn` once the
    /// local bucket gave it a turn.
    mutating func requestArrived(now: Instant, hasLocalTurn: Bool) -> Route {
        switch state {
        case .shared:
            return .shared
        case .rejoining(let until):
            guard now < until else {
                state = .shared
                localFrom = nil
                return .shared
            }
            return hasLocalTurn ? .shared : localRoute(now: now)
        case .local(let probeAt, let backOff):
            guard hasLocalTurn else { return localRoute(now: now) }
            guard now >= probeAt else { return .go }
            state = .probing(backOff: backOff)
            return .probe
        case .probing:
            return hasLocalTurn ? .go : localRoute(now: now)
        }
    }

    private func localRoute(now: Instant) -> Route {
        if let localFrom, now < localFrom { return .wait(until: localFrom) }
        return .local
    }

    /// Redis answered a request (its turn, or a wait) at `now`.
    mutating func redisAnswered(now: Instant) -> Action {
        switch state {
        case .shared, .rejoining:
            return .none
        case .local, .probing:
            // An answer to a request sent before the fall back counts as much as the probe's.
            state = .rejoining(until: now + rejoinGrace)
            return .rejoined
        }
    }

    /// Redis did not answer a request (a closed connection, a timeout, a "not yet" reply) at
    /// `now`. `phase`, in 0..<1, places this process's first local turn within one local
    /// interval (the limiter draws it at random), so that the fleet's processes, which all fall
    /// back at the same moment, do not release together.
    mutating func redisFailed(now: Instant, phase: Double) -> Action {
        switch state {
        case .shared:
            state = .local(probeAt: now + probeDelay, backOff: probeDelay)
            // As if the local bucket started empty at a random moment of the next local interval.
            let offset = Duration(clampingSeconds: Self.seconds(localInterval) * (phase.isFinite ? min(max(phase, 0), 1) : 0))
            localFrom = now + (localFill + offset).clampedWait
            return .fellBack(probeIn: probeDelay)
        case .rejoining:
            // The local bucket was in use throughout the grace: it goes on from where it is.
            state = .local(probeAt: now + probeDelay, backOff: probeDelay)
            return .fellBack(probeIn: probeDelay)
        case .probing(let backOff):
            let next = min(backOff * 2, maximumProbeDelay)
            state = .local(probeAt: now + next, backOff: next)
            return .none
        case .local:
            // Another request that had asked before the fall back: nothing new.
            return .none
        }
    }

    private static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// The probe ended without an answer or a failure (its caller cancelled it): the next
    /// request probes instead.
    mutating func probeAbandoned(now: Instant) {
        guard case .probing(let backOff) = state else { return }
        state = .local(probeAt: now, backOff: backOff)
    }
}
