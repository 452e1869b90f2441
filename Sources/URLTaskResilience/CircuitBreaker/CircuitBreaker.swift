import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Stops sending requests to a host that keeps failing, and tries it again after a cool-down.
///
/// After ``Policy/failureThreshold`` failures (5xx answers and transport errors by default)
/// within ``Policy/window``, a host's circuit **opens**: every new request to it fails at once,
/// without touching the network: the caller receives a `URLTaskError` with code
/// `URLTaskError.Code.circuitOpen` whose `URLTaskError.underlying` is a
/// ``CircuitOpenError`` (the host, and when the next probe may go). After
/// ``Policy/coolDown`` one request goes through as a **probe** (half-open); if it succeeds the
/// circuit closes, if it fails it opens for another cool-down. Each host (scheme, host, port) has
/// its own circuit; requests ``Policy/exempts`` names (a token endpoint) are neither stopped nor
/// counted.
///
/// It is an interceptor (it decides before a request is sent) and an outcome observer
/// (`URLTaskOutcomeObserver`: it counts every attempt's outcome, the 5xx a ``RetryReactor``
/// retries included, off URLSession's queue); the manager finds the observer in the interceptor,
/// so it goes in the interceptors only.
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
        /// Failures within ``window`` that open the circuit.
        public var failureThreshold: Int
        /// The sliding window failures are counted in.
        public var window: Duration
        /// How long an open circuit fails requests before it lets a probe through.
        public var coolDown: Duration
        /// How long a probe may go unanswered (cancelled by its caller) before the next request
        /// probes instead.
        public var probeTimeout: Duration
        /// Whether an outcome counts as a failure. Defaults to 5xx answers and transport errors
        /// other than cancellation.
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

        /// Opens after 5 failures in 30 seconds, for 30 seconds.
        public init(
            failureThreshold: Int = 5, window: Duration = .seconds(30), coolDown: Duration = .seconds(30),
            probeTimeout: Duration = .seconds(60),
            isFailure: @escaping @Sendable (URLTaskOutcome) -> Bool = CircuitBreaker.isServerOrTransportFailure,
            exempts: @escaping @Sendable (URLRequest) -> Bool = { _ in false }, maximumHosts: Int = 4_096
        ) {
            self.failureThreshold = failureThreshold
            self.window = window
            self.coolDown = coolDown
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
    /// cancellation.
    public static let isServerOrTransportFailure: @Sendable (URLTaskOutcome) -> Bool = { outcome in
        switch outcome {
        case .response(let response): return response.statusCode >= 500
        case .failure(let error): return (error as? URLError)?.code != .cancelled && !(error is CancellationError)
        }
    }

    /// When circuits open and close.
    public let policy: Policy
    private let storage: CircuitBreakerStorage
    private let decisions = DecisionEvents<Event>()
    /// The clock cool-downs and windows are measured on (a test's own, to skip a cool-down).
    private let now: @Sendable () -> ContinuousClock.Instant

    /// A breaker with one circuit per host, as `policy` says.
    public convenience init(policy: Policy = Policy()) {
        self.init(policy: policy, now: { .now })
    }

    init(policy: Policy, now: @escaping @Sendable () -> ContinuousClock.Instant) {
        self.policy = policy
        self.storage = CircuitBreakerStorage(policy: policy)
        self.now = now
    }

    /// How many hosts the breaker keeps a circuit for (at most about ``Policy/maximumHosts``).
    var rememberedHostCount: Int { storage.hostCount }

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
        switch storage.requestArrives(task.id, host: host, now: now()) {
        case .pass:
            return .execute
        case .probe:
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

    /// Counts the outcome against its host's circuit.
    public func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
        guard !policy.exempts(task.originalRequest) else { return }
        let host = URLOrigin(task.request.url)?.description ?? ""
        switch storage.outcome(of: task.id, host: host, failed: policy.isFailure(outcome), now: now()) {
        case .none: break
        case .opened(let failures):
            decisions.emit(.opened(host: host, failures: failures, task: task.id))
            task.annotate("circuit-breaker", "opened the circuit for \(host) after \(failures) failures")
        case .closed:
            decisions.emit(.closed(host: host))
            task.annotate("circuit-breaker", "closed the circuit for \(host)")
        case .reopened:
            decisions.emit(.reopened(host: host))
            task.annotate("circuit-breaker", "reopened the circuit for \(host)")
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
/// most ``CircuitBreaker/Policy/maximumHosts`` kept), behind a lock.
final class CircuitBreakerStorage: @unchecked Sendable {  // `circuits` is guarded by `lock`.
    private let lock = NSLock()
    private var circuits: HostTable<CircuitBreakerStateMachine>
    private let policy: CircuitBreaker.Policy

    init(policy: CircuitBreaker.Policy) {
        self.policy = policy
        self.circuits = HostTable(capacity: policy.maximumHosts)
    }

    private func fresh() -> CircuitBreakerStateMachine {
        CircuitBreakerStateMachine(
            failureThreshold: policy.failureThreshold, window: policy.window, coolDown: policy.coolDown, probeTimeout: policy.probeTimeout)
    }

    func requestArrives(_ task: URLTask.ID, host: String, now: ContinuousClock.Instant) -> CircuitBreakerStateMachine.Admission {
        lock.withLock {
            // A host without a circuit is closed: nothing to record.
            guard circuits[host] != nil else { return .pass }
            return circuits.update(host, now: now, make: fresh) { circuit in
                let admission = circuit.requestArrives(task, now: now)
                return (!circuit.isIdle(at: now), admission)
            }
        }
    }

    func outcome(of task: URLTask.ID, host: String, failed: Bool, now: ContinuousClock.Instant) -> CircuitBreakerStateMachine.Transition {
        lock.withLock {
            // A success for a host without a circuit changes nothing: nothing to record.
            guard failed || circuits[host] != nil else { return .none }
            return circuits.update(host, now: now, make: fresh) { circuit in
                let transition = circuit.outcome(of: task, failed: failed, now: now)
                // A closed circuit without recent failures is the default: forget it.
                return (!circuit.isIdle(at: now), transition)
            }
        }
    }

    func isOpen(host: String) -> Bool {
        lock.withLock { circuits[host]?.isOpen ?? false }
    }

    /// How many hosts have a circuit on record (for tests and the `hosts` benchmark).
    var hostCount: Int {
        lock.withLock { circuits.count }
    }
}
