import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Network)
import Network
#endif

/// Holds requests that failed because their host could not be reached, and sends them again
/// when it can be.
///
/// A request whose transport fails before any byte arrived with one of ``Policy/codes``
/// (`notConnectedToInternet`, `cannotConnectToHost`, `networkConnectionLost` by default) is not
/// failed: it waits while its host is **probed** (a `HEAD` to the host's root through a session of
/// its own, any HTTP answer counts), first after ``Policy/probeInterval``, then at doubling
/// intervals up to ``Policy/maximumProbeInterval``. When a probe is answered, every request held for
/// that host goes through the interceptors again (fresh headers) and is sent. A request still held
/// when its `timeoutInterval` is about to pass (or after ``Policy/maximumHold``) fails with the
/// original `URLError`, as a plain session would have failed it at once (its user info names
/// `OfflineHold` under `URLTaskError.componentUserInfoKey`). A caller that cancels leaves at
/// once.
///
/// Probing works everywhere (Linux included). On Apple platforms an `NWPathMonitor` also probes
/// every held host at once when the network path becomes usable (compiled only where the
/// `Network` framework exists).
///
/// ```swift
/// let manager = URLTaskManager(reactors: [OAuth2RefreshReactor(authenticator: auth), OfflineHold(), RetryReactor()])
/// ```
/// It is placed `URLTaskPlacement.late` (the manager checks it): before a ``RetryReactor``, which
/// would otherwise retry these failures itself. A ``CircuitBreaker`` in the same stack counts a
/// held request by how it ends (a request the hold waits out and sends is no failure of its
/// host; one that expires is), and a probe of the hold that reaches a host closes that host's
/// circuit (``HostHealth``), so the requests the hold then sends are not refused.
public final class OfflineHold: URLTaskReactor {
    /// Which failures are held, and how hosts are probed.
    public struct Policy: Sendable {
        /// The transport errors that mean "the host cannot be reached".
        public var codes: Set<URLError.Code>
        /// The wait before the first probe, doubled after each failed probe. Below 10 ms counts
        /// as 10 ms (a zero interval would probe in a tight loop), beyond 100 years as 100 years.
        public var probeInterval: Duration
        /// The longest wait between probes, clamped as ``probeInterval`` is.
        public var maximumProbeInterval: Duration
        /// How long a probe may take, clamped as ``probeInterval`` is (corelibs traps on a
        /// `timeoutInterval` beyond about 9.2e15 s).
        public var probeTimeout: Duration
        /// The URL probed for a held request's URL; by default the root of its host. `nil` holds
        /// nothing for that URL.
        public var probeURL: @Sendable (URL) -> URL?
        /// The longest a request is held; `nil` holds it until just before its `timeoutInterval`
        /// passes. Negative counts as zero, and anything beyond 100 years (as a `timeoutInterval`
        /// of 1e300 s or infinity) as 100 years.
        public var maximumHold: Duration?
        /// How many times one request may be held; below 1 counts as 1.
        public var maximumHoldsPerTask: Int
        /// Requests never held.
        public var exempts: @Sendable (URLRequest) -> Bool

        /// Holds the three "unreachable" errors, probes after 0.5 s and then at most every 10 s.
        public init(
            codes: Set<URLError.Code> = [.notConnectedToInternet, .cannotConnectToHost, .networkConnectionLost],
            probeInterval: Duration = .milliseconds(500), maximumProbeInterval: Duration = .seconds(10),
            probeTimeout: Duration = .seconds(5),
            probeURL: @escaping @Sendable (URL) -> URL? = OfflineHold.hostRoot, maximumHold: Duration? = nil, maximumHoldsPerTask: Int = 10,
            exempts: @escaping @Sendable (URLRequest) -> Bool = { _ in false }
        ) {
            self.codes = codes
            self.probeInterval = probeInterval
            self.maximumProbeInterval = maximumProbeInterval
            self.probeTimeout = probeTimeout
            self.probeURL = probeURL
            self.maximumHold = maximumHold
            self.maximumHoldsPerTask = maximumHoldsPerTask
            self.exempts = exempts
        }

        /// A probe's wait or timeout as the properties say: 10 ms to 100 years.
        static func probeWait(_ duration: Duration) -> Duration { max(duration.clampedWait, .milliseconds(10)) }

        /// ``probeTimeout`` as a `timeoutInterval`.
        var probeTimeoutInterval: TimeInterval { Self.probeWait(probeTimeout) / .seconds(1) }
    }

    /// What the hold decided, for logs and tests (``events(bufferingNewest:)``).
    public enum Event: Sendable {
        /// `task` could not reach `host` (`code`) and is held.
        case held(task: URLTask.ID, host: String, code: URLError.Code)
        /// A probe of `host` failed; `failures` in a row.
        case probeFailed(host: String, failures: Int)
        /// `host` answered a probe: `tasks` are sent again.
        case reachable(host: String, tasks: [URLTask.ID])
        /// `task` was held until its time ran out and fails with its original error.
        case expired(task: URLTask.ID, host: String)
    }

    /// The default ``Policy/probeURL``: the root of the request's host.
    public static let hostRoot: @Sendable (URL) -> URL? = { url in
        guard var parts = URLComponents(url: url, resolvingAgainstBaseURL: false), parts.host != nil else { return nil }
        parts.path = "/"
        parts.query = nil
        parts.fragment = nil
        parts.user = nil
        parts.password = nil
        return parts.url
    }

    /// Which failures are held, and how hosts are probed.
    public let policy: Policy
    /// Where the hold tells the other parts that a host answered its probe.
    public let health: HostHealth
    /// Per task, held requests may be held again up to ``Policy/maximumHoldsPerTask`` times.
    public let configuration: URLTaskReactorConfiguration
    private let storage: OfflineHoldStorage

    /// A hold for the failures `policy` names, telling `health` (``HostHealth/shared`` unless you
    /// isolate it) when a host answers a probe.
    public init(policy: Policy = Policy(), health: HostHealth = .shared) {
        self.policy = policy
        self.health = health
        self.configuration = URLTaskReactorConfiguration(
            mode: .perTask(afterwards: .sendAgain), timeout: nil, maximumReactionsPerTask: max(1, policy.maximumHoldsPerTask),
            exempts: policy.exempts)
        self.storage = OfflineHoldStorage(policy: policy, health: health)
    }

    /// A stream of the hold's decisions; it ends when the hold is released.
    public func events(bufferingNewest limit: Int = 1_000) -> AsyncStream<Event> {
        storage.decisions.subscribe(bufferingNewest: limit)
    }

    /// Takes transport failures with one of ``Policy/codes`` (reported only before any byte of
    /// the answer arrived) for URLs that have a probe URL.
    public func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
        guard let code = outcome.urlErrorCode, policy.codes.contains(code), let url = task.request.url else { return false }
        return policy.probeURL(url) != nil
    }

    /// Waits until the host answers a probe (the task is then sent again), or throws the original
    /// error when the task's time is up.
    public func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
        guard case .failure(let error) = outcome, let url = task.request.url else { return }
        let host = URLOrigin(url)?.description ?? ""
        let limit = policy.maximumHold ?? Self.holdLimit(timeoutInterval: task.request.timeoutInterval)
        let code = (error as? URLError)?.code ?? .unknown
        task.annotate("offline-hold", "held: \(host) cannot be reached (\(code.rawValue))")
        switch await storage.hold(task.id, host: host, url: url, limit: limit, code: code) {
        case .reachable:
            task.annotate("offline-hold", "\(host) answered a probe: sending again")
            return
        case .expired:
            storage.decisions.emit(.expired(task: task.id, host: host))
            task.annotate("offline-hold", "gave up at the request's timeout")
            throw error
        case .cancelled:
            throw CancellationError()
        }
    }

    /// `URLTaskPlacement.late`: before a ``RetryReactor`` (`URLTaskPlacement.last`), after the
    /// observers (`URLTaskPlacement.first`).
    public var reactorPlacement: URLTaskPlacement { .late }

    /// Just before the manager's own timer for the request would fail it with `timedOut`.
    static func holdLimit(timeoutInterval: TimeInterval) -> Duration? {
        guard timeoutInterval > 0 else { return nil }
        let margin = min(0.25, timeoutInterval / 10)
        // 0.2.0 trapped converting 1e300 s to milliseconds; infinity is the longest wait.
        return Duration(clampingSeconds: timeoutInterval - margin)
    }
}

/// The held requests' continuations, one probing loop per host and the probe session. Nothing is
/// resumed, started or cancelled while the lock is held.
final class OfflineHoldStorage: Sendable {
    enum Resolution: Sendable {
        case reachable
        case expired
        case cancelled
    }

    private struct Held {
        let task: URLTask.ID
        let continuation: CheckedContinuation<Resolution, Never>
        var deadline: Task<Void, Never>?
    }

    private struct State {
        var machine = OfflineHoldStateMachine()
        var held: [OfflineHoldStateMachine.Waiter: Held] = [:]
        /// Waiters made and not yet held; `true` once their caller cancelled (they are not held).
        /// Before, a set of the waiters cancelled before being held also took every waiter
        /// cancelled after its hold ended (released by an answer or its limit), and kept it.
        var unheld: [OfflineHoldStateMachine.Waiter: Bool] = [:]
        var probers: [String: Task<Void, Never>] = [:]
        /// A held request's URL per probed host, from which ``OfflineHold/Policy/probeURL`` makes
        /// each probe's URL.
        var targets: [String: URL] = [:]
        var lastWaiter: UInt64 = 0
        /// This storage's listener in `health`, removed as it goes.
        var listener: UInt64 = 0
    }

    let decisions = DecisionEvents<OfflineHold.Event>()
    private let policy: OfflineHold.Policy
    private let state = LockedState(State())
    private let probeSession: URLSession
    #if canImport(Network)
    private let monitor = NWPathMonitor()
    #endif

    /// Told when a host answers a probe, and tells of the answers other parts saw.
    private let health: HostHealth

    init(policy: OfflineHold.Policy, health: HostHealth) {
        self.policy = policy
        self.health = health
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = policy.probeTimeoutInterval
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        // No cache at all, not only none read: on swift-corelibs-foundation (6.3.1) a session
        // with a `URLCache` makes a task's protocol after a cache lookup on a background thread,
        // and a probe cancelled during that lookup whose connection is refused before the cancel
        // is queued is completed twice, a trap in the session's task registry (LinuxNotes;
        // `CancelDuringCacheLookupStressTests`). A probe must reach the host anyway.
        configuration.urlCache = nil
        self.probeSession = URLSession(configuration: configuration)
        #if canImport(Network)
        monitor.pathUpdateHandler = { [weak self] path in
            if path.status == .satisfied { self?.probeEveryHostNow() }
        }
        monitor.start(queue: DispatchQueue.global())
        #endif
        let id = health.addListener { [weak self] host in self?.hostIsReachable(host) }
        state.withLock { $0.listener = id }
    }

    deinit {
        health.removeListener(state.withLock { $0.listener })
        #if canImport(Network)
        monitor.cancel()
        #endif
        probeSession.finishTasksAndInvalidate()
    }

    /// Holds `task` until `host` answers a probe (or `limit` passes, or it is cancelled); its
    /// ``OfflineHold/Event/held(task:host:code:)`` is told once it is held, so an answer from then
    /// on releases it.
    func hold(_ task: URLTask.ID, host: String, url: URL, limit: Duration?, code: URLError.Code) async -> Resolution {
        let waiter: OfflineHoldStateMachine.Waiter = state.withLock { state in
            state.lastWaiter += 1
            let waiter = OfflineHoldStateMachine.Waiter(rawValue: state.lastWaiter)
            state.unheld[waiter] = false
            return waiter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let start: Bool? = state.withLock { state in
                    if state.unheld.removeValueShrinking(forKey: waiter) == true { return nil }
                    state.held[waiter] = Held(task: task, continuation: continuation)
                    state.targets[host] = url
                    return state.machine.held(waiter, host: host) == .startProbing
                }
                guard let start else { return continuation.resume(returning: .cancelled) }
                decisions.emit(.held(task: task, host: host, code: code))
                if let limit {
                    let deadline = Task { [weak self] in
                        try? await Task.sleep(for: limit.clampedWait)
                        guard !Task.isCancelled else { return }
                        self?.release(waiter, with: .expired)
                    }
                    let resolved = state.withLock { state in
                        guard state.held[waiter] != nil else { return true }
                        state.held[waiter]?.deadline = deadline
                        return false
                    }
                    if resolved { deadline.cancel() }
                }
                if start { startProbing(host) }
            }
        } onCancel: {
            release(waiter, with: .cancelled)
        }
    }

    /// Ends one request's hold (cancelled, or its time ran out).
    private func release(_ waiter: OfflineHoldStateMachine.Waiter, with resolution: Resolution) {
        let (entry, stop): (Held?, Task<Void, Never>?) = state.withLock { state in
            guard let entry = state.held.removeValueShrinking(forKey: waiter) else {
                // Not held yet: it is not held when it arrives. Held and released: nothing to do.
                if resolution == .cancelled, state.unheld[waiter] != nil { state.unheld[waiter] = true }
                return (nil, nil)
            }
            var stop: Task<Void, Never>?
            if case .stopProbing(let host) = state.machine.left(waiter) {
                stop = state.probers.removeValueShrinking(forKey: host)
                state.targets.removeValueShrinking(forKey: host)
            }
            return (entry, stop)
        }
        guard let entry else { return }
        entry.deadline?.cancel()
        stop?.cancel()
        entry.continuation.resume(returning: resolution)
    }

    private func startProbing(_ host: String) {
        let prober = Task { [weak self, policy] in
            var interval = OfflineHold.Policy.probeWait(policy.probeInterval)
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard !Task.isCancelled, let self else { return }
                if await self.probe(host) { return }
                interval = OfflineHold.Policy.probeWait(min(interval * 2, OfflineHold.Policy.probeWait(policy.maximumProbeInterval)))
            }
        }
        let stale: Task<Void, Never>? = state.withLock { state in
            guard state.machine.probedHosts.contains(host) else { return prober }
            let old = state.probers[host]
            state.probers[host] = prober
            return old
        }
        stale?.cancel()
    }

    /// Probes `host` once; on an answer, releases every request held for it. Returns whether it
    /// answered.
    private func probe(_ host: String) async -> Bool {
        guard let target = state.withLock({ $0.targets[host] }), let url = policy.probeURL(target) else { return false }
        var request = URLRequest(
            url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: policy.probeTimeoutInterval)
        request.httpMethod = "HEAD"
        let answered = await ProbeRequest.answered(request, session: probeSession)
        if answered {
            // Told to every part first (so that a breaker asked about the released requests knows
            // the host is back); this storage hears it too, and releases them.
            health.hostAnswered(host)
            hostIsReachable(host)
            return true
        }
        guard let failures = state.withLock({ $0.machine.probeFailed(host: host) }) else { return true }
        decisions.emit(.probeFailed(host: host, failures: failures))
        return false
    }

    /// `host` answered a probe, this hold's or another part's (a breaker's half-open probe, see
    /// ``HostHealth``): every request held for it is sent again, and its probing stops. Nothing
    /// when none is held (an answer told twice).
    private func hostIsReachable(_ host: String) {
        let (released, prober): ([Held], Task<Void, Never>?) = state.withLock { state in
            guard state.machine.probedHosts.contains(host) else { return ([], nil) }
            state.targets.removeValueShrinking(forKey: host)
            let prober = state.probers.removeValueShrinking(forKey: host)
            return (state.machine.probeSucceeded(host: host).compactMap { state.held.removeValueShrinking(forKey: $0) }, prober)
        }
        prober?.cancel()
        guard !released.isEmpty else { return }
        decisions.emit(.reachable(host: host, tasks: released.map(\.task)))
        for entry in released {
            entry.deadline?.cancel()
            entry.continuation.resume(returning: .reachable)
        }
    }

    /// The network path became usable (Apple platforms): probe every held host now.
    private func probeEveryHostNow() {
        let hosts = state.withLock { $0.machine.probedHosts }
        for host in hosts {
            Task { [weak self] in _ = await self?.probe(host) }
        }
    }
}
