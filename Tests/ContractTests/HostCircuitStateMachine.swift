import URLTaskManager  // not @testable: this target sees what an app sees

// DocC third-party breaker machine: begin
/// The circuits of every host a breaker has seen, without I/O and without a clock of its own:
/// the breaker passes the time in, so tests can move it.
///
/// A host is closed until `threshold` failures in a row, then open (refused at once) for
/// `coolDown`; then one request goes as a probe while the others are still refused. The probe's
/// success closes the circuit, its failure opens it again. A closed host with no failures has
/// no entry, so the state stays as small as the hosts that are failing.
struct HostCircuitStateMachine {
    private enum State {
        case closed(failures: Int)
        case open(until: ContinuousClock.Instant)
        /// `probe` is on its way; if its outcome never comes (cancelled), another may go after
        /// `until`.
        case probing(probe: URLTask.ID, until: ContinuousClock.Instant)
    }

    /// What to do with a request about to be sent.
    enum RequestAction: Equatable {
        case send
        /// Send it as the probe: it must hear the server itself (``ExclusiveTransfer``).
        case sendAsProbe
        case refuse(retryAfter: Duration)
    }

    /// What an outcome changed.
    enum OutcomeAction: Equatable {
        case none
        case opened(failures: Int)
        case closed
        case reopened
    }

    let threshold: Int
    let coolDown: Duration
    private var hosts: [URLOrigin: State] = [:]

    init(threshold: Int, coolDown: Duration) {
        precondition(threshold > 0, "a circuit opens after at least one failure")
        self.threshold = threshold
        self.coolDown = coolDown
    }

    /// How many hosts have state (failing, open or probing).
    var trackedHosts: Int { hosts.count }

    mutating func requestArrives(_ task: URLTask.ID, to host: URLOrigin, now: ContinuousClock.Instant) -> RequestAction {
        switch hosts[host] {
        case nil, .closed:
            return .send
        case .open(let until), .probing(_, let until):
            guard now >= until else { return .refuse(retryAfter: until - now) }
            hosts[host] = .probing(probe: task, until: now + coolDown)
            return .sendAsProbe
        }
    }

    mutating func outcomeArrives(of task: URLTask.ID, at host: URLOrigin, failed: Bool, now: ContinuousClock.Instant) -> OutcomeAction {
        switch hosts[host] {
        case nil:
            guard failed else { return .none }
            return countFailure(at: host, failures: 1, now: now)
        case .closed(let failures):
            guard failed else {
                hosts[host] = nil
                return .none
            }
            return countFailure(at: host, failures: failures + 1, now: now)
        case .open:
            // A request sent before the circuit opened: it tells nothing new.
            return .none
        case .probing(let probe, _):
            guard probe == task else { return .none }
            if failed {
                hosts[host] = .open(until: now + coolDown)
                return .reopened
            }
            hosts[host] = nil
            return .closed
        }
    }

    private mutating func countFailure(at host: URLOrigin, failures: Int, now: ContinuousClock.Instant) -> OutcomeAction {
        guard failures >= threshold else {
            hosts[host] = .closed(failures: failures)
            return .none
        }
        hosts[host] = .open(until: now + coolDown)
        return .opened(failures: failures)
    }
}
// DocC third-party breaker machine: end
