/// Whether a ``FleetRateLimiter`` takes its turns from Redis (the fleet's shared bucket) or from
/// its local fallback bucket, and when it asks Redis again after it stopped answering.
///
/// Pure: time is passed in, no locks, no I/O. The limiter holds it under its lock, calls one
/// method per event and does what the returned value says.
///
/// - **shared**: every request asks Redis.
/// - **local**: Redis did not answer (a closed connection, a timeout); every request takes the
///   local bucket until `probeAt`; the first request after it asks Redis (it is the probe).
/// - **probing**: one request asks Redis; the others keep to the local bucket meanwhile. An
///   answer goes back to shared; another failure goes back to local with the back-off doubled
///   (up to its maximum).
struct FleetRateLimitMode {
    typealias Instant = ContinuousClock.Instant

    private enum State: Equatable {
        case shared
        case local(probeAt: Instant, backOff: Duration)
        case probing(backOff: Duration)
    }

    /// Where an arriving request takes its turn.
    enum Route: Equatable {
        /// Ask Redis.
        case shared
        /// Ask Redis; this request is the probe after a fall back, so whatever it learns decides
        /// the mode for the others.
        case probe
        /// Take the local bucket.
        case local
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
    private var state = State.shared

    init(probeDelay: Duration, maximumProbeDelay: Duration) {
        self.probeDelay = max(.zero, probeDelay)
        self.maximumProbeDelay = max(self.probeDelay, maximumProbeDelay)
    }

    /// Whether requests ask Redis (no fall back in force).
    var isShared: Bool { state == .shared }

    /// A request arrives at `now`.
    mutating func requestArrived(now: Instant) -> Route {
        switch state {
        case .shared:
            return .shared
        case .local(let probeAt, let backOff):
            guard now >= probeAt else { return .local }
            state = .probing(backOff: backOff)
            return .probe
        case .probing:
            return .local
        }
    }

    /// Redis answered a request (its turn, or a wait).
    mutating func redisAnswered() -> Action {
        switch state {
        case .shared:
            return .none
        case .local, .probing:
            // An answer to a request sent before the fall back counts as much as the probe's.
            state = .shared
            return .rejoined
        }
    }

    /// Redis did not answer a request (a closed connection, a timeout) at `now`.
    mutating func redisFailed(now: Instant) -> Action {
        switch state {
        case .shared:
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

    /// The probe ended without an answer or a failure (its caller cancelled it): the next
    /// request probes instead.
    mutating func probeAbandoned(now: Instant) {
        guard case .probing(let backOff) = state else { return }
        state = .local(probeAt: now, backOff: backOff)
    }
}
