import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Stops sending requests to a host that keeps failing, and tries it again after a cool-down.
///
/// A host's circuit **opens** when, among its tasks that ended within ``Policy/window``, at
/// least ``Policy/failureThreshold`` failed (a 5xx answer or a transport error by default) and
/// the failures are at least ``Policy/failureRatio`` of them. Then every new request to it fails
/// at once, without touching the network: the caller receives a `URLTaskError` with code
/// `URLTaskError.Code.circuitOpen` whose `URLTaskError.underlying` is a ``CircuitOpenError``
/// (the host, and when the next probe may go). After ``Policy/coolDown`` one request goes
/// through as a **probe** (half-open); if it succeeds the circuit closes, if it fails it opens
/// again for twice as long, up to ``Policy/maximumCoolDown``. Each host (scheme, host, port) has
/// its own circuit; requests ``Policy/exempts`` names (a token endpoint) are neither stopped nor
/// counted.
///
/// **It judges a host by what its callers finally get**, so that it agrees with the parts around
/// it instead of undoing them:
/// - A task counts once, when it ends, by its last attempt: a `503` a ``RetryReactor`` turns into
///   a `200`, or a connection refused that an ``OfflineHold`` waits out, is no failure of the host
///   (before, a flaky endpoint answering each of three requests `503` twice then `200` opened the
///   circuit for 30 s on the sixth attempt and refused the retries).
/// - A `503` or `429` with `Retry-After` is the server asking for a pause, not a fault: it is not
///   counted (the ``RateLimiter`` holds the host's requests and the ``RetryReactor`` waits until
///   the pause ends).
/// - When an ``OfflineHold``'s probe reaches a host whose circuit is open, the circuit closes at
///   once (``HostHealth``): the requests the hold then sends are not refused.
/// - A probe's own attempt decides at once: the circuit closes on its success, without waiting for
///   the probe's task to end.
///
/// It is an interceptor (it decides before a request is sent) and an outcome observer
/// (`URLTaskOutcomeObserver`: it is told every attempt's outcome and every task's end, off
/// URLSession's queue, before the caller hears the end); the manager finds the observer in the
/// interceptor, so it goes in the interceptors only.
///
/// ```swift
/// let breaker = CircuitBreaker(policy: .init(exempts: { auth.isTokenRequest($0) }))
/// let manager = URLTaskManager(interceptors: [breaker, BearerInterceptor(authenticator: auth)],
///                              reactors: [OAuth2RefreshReactor(authenticator: auth)])
/// ```
/// It is placed `URLTaskPlacement.first` (the manager checks it): it refuses a request before
/// another interceptor spends work on it. A task's caller hears its end only after the breaker
/// counted its outcomes, so the request sent after the answer that opened the circuit is refused.
public final class CircuitBreaker: URLTaskInterceptor, URLTaskOutcomeObserver {
    /// When a circuit opens and how long it stays open.
    public struct Policy: Sendable {
        /// The fewest failed tasks within ``window`` that open the circuit: a host is never judged
        /// on one or two bad answers.
        public var failureThreshold: Int
        /// The share (0 to 1) of the tasks that ended within ``window`` that must have failed for
        /// the circuit to open: a busy host with a few failures among many successes stays in use.
        /// Counted from the host's first recent failure; NaN counts as 0, values outside 0 to 1
        /// are clamped.
        public var failureRatio: Double
        /// The sliding window tasks are counted in.
        public var window: Duration
        /// How long an open circuit fails requests before it lets a probe through, the first time.
        /// Short, because an outage is usually short: each failed probe doubles it.
        public var coolDown: Duration
        /// The longest cool-down, however many probes failed (at least ``coolDown``).
        public var maximumCoolDown: Duration
        /// How long a probe may go unanswered (cancelled by its caller) before the next request
        /// probes instead.
        public var probeTimeout: Duration
        /// Whether an outcome counts as a failure. Defaults to 5xx answers and transport errors
        /// other than cancellation. A `429` or `503` with a `Retry-After` beyond 0 s is a pause, never a
        /// failure, whatever this says.
        public var isFailure: @Sendable (URLTaskOutcome) -> Bool
        /// Requests the breaker neither stops nor counts (a token endpoint's).
        public var exempts: @Sendable (URLRequest) -> Bool
        /// The most hosts whose circuit is remembered (default 4,096; at least 1). A host whose
        /// failures are all older than ``window`` is forgotten (it is closed either way), as is
        /// one whose cool-down ended a ``window`` ago with no request since; past this many, the
        /// least recently used circuit is forgotten too, and that host starts closed when it is
        /// seen again. So a client that talks to any number of hosts keeps a bounded state (a
        /// few hundred bytes a host).
        public var maximumHosts: Int

        /// Opens when at least 5 tasks, and at least half of those that ended, failed within 30
        /// seconds; for 5 seconds, doubled after each failed probe up to 60 seconds.
        public init(
            failureThreshold: Int = 5, failureRatio: Double = 0.5, window: Duration = .seconds(30),
            coolDown: Duration = .seconds(5), maximumCoolDown: Duration = .seconds(60),
            probeTimeout: Duration = .seconds(60),
            isFailure: @escaping @Sendable (URLTaskOutcome) -> Bool = CircuitBreaker.isServerOrTransportFailure,
            exempts: @escaping @Sendable (URLRequest) -> Bool = { _ in false }, maximumHosts: Int = 4_096
        ) {
            self.failureThreshold = failureThreshold
            self.failureRatio = failureRatio
            self.window = window
            self.coolDown = coolDown
            self.maximumCoolDown = maximumCoolDown
            self.probeTimeout = probeTimeout
            self.isFailure = isFailure
            self.exempts = exempts
            self.maximumHosts = max(1, maximumHosts)
        }
    }

    /// What the breaker decided, for logs and tests (``events(bufferingNewest:)``).
    public enum Event: Sendable {
        /// `host`'s circuit opened after `failures` failures; `task` was the last of them.
        case opened(host: String, failures: Int, task: URLTask.ID)
        /// `task` was failed with ``CircuitOpenError`` without being sent.
        case rejected(task: URLTask.ID, host: String)
        /// `task` goes through as the probe of `host`'s half-open circuit.
        case probing(task: URLTask.ID, host: String)
        /// The probe succeeded: `host`'s circuit is closed.
        case closed(host: String)
        /// The probe failed: `host`'s circuit is open again.
        case reopened(host: String)
    }

    /// The default ``Policy/isFailure``: a 5xx status, or a transport error other than
    /// cancellation (a `503` with a `Retry-After` of more than 0 s is a pause, see ``Policy/isFailure``).
    public static let isServerOrTransportFailure: @Sendable (URLTaskOutcome) -> Bool = { outcome in
        switch outcome {
        case .response(let response): return response.statusCode >= 500
        case .failure(let error): return (error as? URLError)?.code != .cancelled && !(error is CancellationError)
        }
    }

    /// When circuits open and close.
    public let policy: Policy
    /// Where the breaker learns that a host answered another part's probe.
    public let health: HostHealth
    private let storage: CircuitBreakerStorage
    private let decisions = DecisionEvents<Event>()
    /// The clock cool-downs and windows are measured on (a test's own, to skip a cool-down).
    private let now: @Sendable () -> ContinuousClock.Instant

    /// A breaker with one circuit per host, as `policy` says, sharing `health` with the other
    /// parts (``HostHealth/shared`` unless you isolate it).
    public convenience init(policy: Policy = Policy(), health: HostHealth = .shared) {
        self.init(policy: policy, health: health, now: { .now })
    }

    init(policy: Policy, health: HostHealth = .shared, now: @escaping @Sendable () -> ContinuousClock.Instant) {
        self.policy = policy
        self.health = health
        self.storage = CircuitBreakerStorage(policy: policy)
        self.now = now
    }

    /// How many hosts the breaker keeps a circuit for (at most about ``Policy/maximumHosts``).
    var rememberedHostCount: Int { storage.hostCount }
    /// ``CircuitBreakerStorage/pendingVerdicts``, for tests.
    var pendingVerdicts: (count: Int, room: Int) { storage.pendingVerdicts }

    /// A stream of the breaker's decisions; it ends when the breaker is released.
    public func events(bufferingNewest limit: Int = 1_000) -> AsyncStream<Event> {
        decisions.subscribe(bufferingNewest: limit)
    }

    /// Whether `url`'s host has an open (or half-open) circuit right now.
    public func isOpen(for url: URL) -> Bool {
        storage.isOpen(host: URLOrigin(url)?.description ?? "")
    }

    /// Lets the task go while its host's circuit is closed, or as the probe of a half-open one;
    /// fails it otherwise with a `URLTaskError` coded `URLTaskError.Code.circuitOpen`
    /// carrying a ``CircuitOpenError``.
    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        guard !policy.exempts(task.originalRequest) else { return .execute }
        let host = URLOrigin(task.request.url)?.description ?? ""
        switch storage.requestArrives(task.id, host: host, now: now(), mark: health.answerMark(of: host)) {
        case .pass:
            return .execute
        case .closedByAnswer:
            decisions.emit(.closed(host: host))
            task.annotate("circuit-breaker", "closed the circuit for \(host): it answered a probe")
            return .execute
        case .probe:
            // A probe sent back through the interceptors before it left (a token refresh) is
            // still the one probe, already told: its attempt keeps the mark.
            guard task.attemptValues[ExclusiveTransfer.self] != true else { return .execute }
            // The probe must hear the server itself: it never listens to another's transfer.
            task.attemptValues[ExclusiveTransfer.self] = true
            decisions.emit(.probing(task: task.id, host: host))
            task.annotate("circuit-breaker", "probe for \(host)")
            return .execute
        case .reject(let retryAfter):
            decisions.emit(.rejected(task: task.id, host: host))
            task.annotate("circuit-breaker", "refused: the circuit for \(host) is open")
            return .fail(URLTaskError(code: .circuitOpen, underlying: CircuitOpenError(host: host, retryAfter: retryAfter)))
        }
    }

    /// Remembers the attempt's verdict for the task's end; a probe's attempt decides at once.
    public func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
        guard !policy.exempts(task.originalRequest) else { return }
        let host = URLOrigin(task.request.url)?.description ?? ""
        let transition = storage.attemptEnded(
            task.id, host: host, verdict: verdict(of: outcome), now: now(), mark: health.answerMark(of: host))
        report(transition, host: host, task: task)
    }

    /// `true`: the breaker counts a task when it ends.
    public var observesEnds: Bool { true }

    /// Counts the task against its host's circuit by its last attempt's verdict; a task cancelled
    /// by its caller, or refused before any attempt ended, counts for nothing.
    public func observeEnd(of task: URLTask, error: (any Error)?) {
        guard !policy.exempts(task.originalRequest) else { return }
        let cancelled = (error as? URLError)?.code == .cancelled || error is CancellationError
        let host = URLOrigin(task.request.url)?.description ?? ""
        let transition = storage.taskEnded(task.id, host: host, cancelled: cancelled, now: now(), mark: health.answerMark(of: host))
        report(transition, host: host, task: task)
    }

    /// A failure, a pause (`429`/`503` with `Retry-After`), or a success.
    private func verdict(of outcome: URLTaskOutcome) -> CircuitBreakerStateMachine.Verdict {
        if case .response(let response) = outcome, response.statusCode == 429 || response.statusCode == 503,
            let retryAfter = RetryAfter(response: response), retryAfter.delay > .zero
        {
            return .pause
        }
        return policy.isFailure(outcome) ? .failure : .success
    }

    private func report(_ transition: CircuitBreakerStateMachine.Transition, host: String, task: URLTask) {
        switch transition {
        case .none: break
        case .opened(let failures):
            decisions.emit(.opened(host: host, failures: failures, task: task.id))
            task.annotate("circuit-breaker", "opened the circuit for \(host) after \(failures) failures")
        case .closed:
            decisions.emit(.closed(host: host))
            task.annotate("circuit-breaker", "closed the circuit for \(host)")
            // The probe reached the host: an offline hold holding requests for it sends them now.
            health.hostAnswered(host)
        case .reopened(let coolDown):
            decisions.emit(.reopened(host: host))
            task.annotate(
                "circuit-breaker",
                "reopened the circuit for \(host) for \(coolDown.formatted(.units(allowed: [.seconds, .milliseconds], width: .narrow)))")
        }
    }

    /// `URLTaskPlacement.first`: a request the breaker refuses costs no other interceptor any
    /// work (no token refresh, no rate-limit token).
    public var interceptorPlacement: URLTaskPlacement { .first }
}

/// Why a request was failed without being sent: its host's circuit is open. The caller finds
/// it as the `URLTaskError.underlying` error of a `URLTaskError` coded
/// `URLTaskError.Code.circuitOpen`.
public struct CircuitOpenError: Error, Sendable, CustomStringConvertible, LocalizedError {
    /// The host (`scheme://host:port`) whose circuit is open.
    public let host: String
    /// How long until the breaker lets a probe through.
    public let retryAfter: Duration

    /// An error for `host`, whose probe may go after `retryAfter`.
    public init(host: String, retryAfter: Duration) {
        self.host = host
        self.retryAfter = retryAfter
    }

    /// The host and when the next probe may go: nothing secret.
    public var description: String {
        "The circuit for \(host) is open after repeated failures; not sent (next probe in \(retryAfter.formatted(.units(allowed: [.seconds, .milliseconds], width: .narrow))))"
    }

    /// The same as ``description``, for `localizedDescription`.
    public var errorDescription: String? { description }
}

/// One ``CircuitBreakerStateMachine`` per host, in a ``HostTable`` (idle circuits forgotten, at
/// most ``CircuitBreaker/Policy/maximumHosts`` kept), and the last attempt's verdict of each task
/// in flight (what its end is counted by), behind a lock.
final class CircuitBreakerStorage: Sendable {
    typealias Machine = CircuitBreakerStateMachine

    private struct State {
        var circuits: HostTable<Machine>
        /// Each task's last attempt verdict and host, until the task ends.
        var verdicts: [URLTask.ID: (host: String, verdict: Machine.Verdict)] = [:]
    }

    private let state: LockedState<State>
    private let policy: CircuitBreaker.Policy

    init(policy: CircuitBreaker.Policy) {
        self.policy = policy
        self.state = LockedState(State(circuits: HostTable(capacity: policy.maximumHosts)))
    }

    private func fresh() -> Machine {
        Machine(
            failureThreshold: policy.failureThreshold, failureRatio: policy.failureRatio, window: policy.window,
            coolDown: policy.coolDown, maximumCoolDown: policy.maximumCoolDown, probeTimeout: policy.probeTimeout)
    }

    func requestArrives(_ task: URLTask.ID, host: String, now: ContinuousClock.Instant, mark: UInt64) -> Machine.Admission {
        state.withLock { state in
            // A host without a circuit is closed: nothing to record.
            guard state.circuits[host] != nil else { return .pass }
            return state.circuits.update(host, now: now, make: fresh) { circuit in
                let admission = circuit.requestArrives(task, now: now, mark: mark)
                return (!circuit.isIdle(at: now), admission)
            }
        }
    }

    func attemptEnded(
        _ task: URLTask.ID, host: String, verdict: Machine.Verdict, now: ContinuousClock.Instant, mark: UInt64
    ) -> Machine.Transition {
        state.withLock { state in
            state.verdicts[task] = (host, verdict)
            guard state.circuits[host] != nil else { return .none }
            return state.circuits.updateIfPresent(host) { $0.attemptEnded(task, verdict: verdict, now: now, mark: mark) } ?? .none
        }
    }

    func taskEnded(_ task: URLTask.ID, host: String, cancelled: Bool, now: ContinuousClock.Instant, mark: UInt64) -> Machine.Transition {
        state.withLock { state in
            // Shrinking: a burst of tasks in flight at once must not leave room for all of them.
            guard let last = state.verdicts.removeValueShrinking(forKey: task), !cancelled else { return .none }
            // A success for a host without a circuit changes nothing: nothing to record (the
            // ratio counts from the host's first recent failure).
            guard last.verdict == .failure || state.circuits[last.host] != nil else { return .none }
            return state.circuits.update(last.host, now: now, make: fresh) { circuit in
                let transition = circuit.taskEnded(verdict: last.verdict, now: now, mark: mark)
                // A closed circuit with nothing recent is the default: forget it.
                return (!circuit.isIdle(at: now), transition)
            }
        }
    }

    func isOpen(host: String) -> Bool {
        state.withLock { $0.circuits[host]?.isOpen ?? false }
    }

    /// How many hosts have a circuit on record (for tests and the `hosts` benchmark).
    var hostCount: Int {
        state.withLock { $0.circuits.count }
    }

    /// The tasks whose verdict waits for their end, and how many the table has room for (for
    /// tests: a burst's room goes back after it).
    var pendingVerdicts: (count: Int, room: Int) {
        state.withLock { ($0.verdicts.count, $0.verdicts.capacity) }
    }
}
