/// The life of the client's command connection, as a pure state machine (no I/O, no clock of its
/// own): `disconnected` → `connecting` → `ready` → (lost) `disconnected`, or (a failed attempt)
/// `backingOff` until a delay that doubles with each failure. Commands arriving while connecting
/// wait for the attempt; commands arriving while backing off fail at once without touching the
/// network (so a caller can fall back quickly while Redis is down).
struct ConnectionLifecycle<Connection: AnyObject, Waiter> {
    enum State {
        /// No connection: the next command connects at once.
        case disconnected
        /// An attempt is under way; `waiters` get its outcome.
        case connecting(waiters: [Waiter])
        /// Commands use this connection.
        case ready(Connection)
        /// The last attempt failed; no attempt before `until`.
        case backingOff(until: ContinuousClock.Instant)
        /// The client was closed: every call fails.
        case closed
    }

    /// What the caller of ``acquire(_:now:)`` does next, after releasing its lock.
    enum AcquireAction {
        /// Send on this connection now.
        case use(Connection)
        /// Start an attempt; the waiter was stored and gets its outcome.
        case connect
        /// An attempt is under way; the waiter was stored.
        case wait
        /// Fail the waiter: the client is closed.
        case failClosed
        /// Fail the waiter: a reconnect is not due for `remaining`.
        case failBackingOff(remaining: Duration)
    }

    private(set) var state: State = .disconnected
    /// Consecutive failed attempts: the back-off exponent.
    private(set) var failures = 0
    let reconnectDelay: Duration
    let maximumReconnectDelay: Duration

    init(reconnectDelay: Duration, maximumReconnectDelay: Duration) {
        self.reconnectDelay = reconnectDelay
        self.maximumReconnectDelay = maximumReconnectDelay
    }

    /// A command wants the connection.
    mutating func acquire(_ waiter: Waiter, now: ContinuousClock.Instant) -> AcquireAction {
        switch state {
        case .ready(let connection):
            return .use(connection)
        case .closed:
            return .failClosed
        case .connecting(var waiters):
            waiters.append(waiter)
            state = .connecting(waiters: waiters)
            return .wait
        case .backingOff(let until) where now < until:
            return .failBackingOff(remaining: now.duration(to: until))
        case .disconnected, .backingOff:
            state = .connecting(waiters: [waiter])
            return .connect
        }
    }

    /// The attempt succeeded: the waiters to give `connection` to, or `nil` if the client was
    /// closed meanwhile (close `connection`).
    mutating func connected(_ connection: Connection) -> [Waiter]? {
        guard case .connecting(let waiters) = state else { return nil }
        failures = 0
        state = .ready(connection)
        return waiters
    }

    /// The attempt failed: the waiters to fail (none if the client was closed meanwhile).
    mutating func connectFailed(now: ContinuousClock.Instant) -> [Waiter] {
        guard case .connecting(let waiters) = state else { return [] }
        failures += 1
        state = .backingOff(until: now + delay(afterFailures: failures))
        return waiters
    }

    /// `connection` closed: the next command reconnects at once (a connection that worked is
    /// not a failed attempt).
    mutating func lost(_ connection: Connection) {
        guard case .ready(let current) = state, current === connection else { return }
        state = .disconnected
    }

    /// The client closes: the waiters to fail and the connection to close.
    mutating func close() -> (waiters: [Waiter], connection: Connection?) {
        defer { state = .closed }
        switch state {
        case .connecting(let waiters): return (waiters, nil)
        case .ready(let connection): return ([], connection)
        default: return ([], nil)
        }
    }

    /// `reconnectDelay` doubled per failure after the first, at most `maximumReconnectDelay`.
    func delay(afterFailures failures: Int) -> Duration {
        Self.delay(afterFailures: failures, first: reconnectDelay, maximum: maximumReconnectDelay)
    }

    /// `first` doubled per failure after the first, at most `maximum`.
    static func delay(afterFailures failures: Int, first: Duration, maximum: Duration) -> Duration {
        var delay = first
        var step = 1
        while step < failures && delay < maximum {
            delay *= 2
            step += 1
        }
        return min(delay, maximum)
    }
}
