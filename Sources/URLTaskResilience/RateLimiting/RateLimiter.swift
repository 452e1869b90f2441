import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Holds requests so that no host gets more than a set rate, in arrival order, and pauses a host
/// that answers `429` or `503` with `Retry-After`.
///
/// Each host (scheme, host, port) has a token bucket: ``Policy/rate`` requests a second, up to
/// ``Policy/burst`` at once after a quiet spell. A request that finds no token waits in this
/// interceptor, in line, until its turn. The wait counts toward the request's `timeoutInterval`
/// (the manager fails it with `URLError.timedOut` when that passes, as for any interceptor that
/// waits); a caller that cancels leaves the line at once.
///
/// It is also an outcome observer (`URLTaskOutcomeObserver`): it reads `Retry-After` on a `429`
/// or `503` and pauses that host's bucket for that long (at most ``Policy/maximumPause``);
/// requests to other hosts go on. It sees every attempt's outcome, the `429` a ``RetryReactor``
/// retries included, so the retried request waits for the pause too. The manager finds the
/// observer in the interceptor: it goes in the interceptors only.
///
/// Only what goes on the wire is charged, once per attempt. A request that got its turn and then
/// waits for a token refresh (its headers went stale in the line) runs the interceptors again
/// for the new token as the same attempt: it keeps the turn it had, and its place, instead of
/// taking another at the back of the line. So a token expiring while the line is long costs
/// the 401 that revealed it, not a second trip through the line for everyone in it (measured in
/// the Resilience article, under the recommended stack). A request that joins an identical request's transfer
/// (``CoalescingInterceptor``) sends nothing: whether it does is decided after every interceptor,
/// at the send, so it takes its token here and the limiter gives it back as it joins
/// (`URLTaskOutcomeObserver/observeJoinedTransfer(of:)`), releasing the next request in line.
/// So identical concurrent GETs that share one transfer reach the server once and end with
/// that one answer, not one bucket refill after another, and the bucket is as full afterwards as
/// if one request had gone (measured: URLTaskManager's Performance article, "The resilience
/// parts").
///
/// ```swift
/// let limiter = RateLimiter(policy: .init(rate: 10, burst: 5))
/// let manager = URLTaskManager(interceptors: [limiter], reactors: [RetryReactor()])
/// ```
///
/// It is placed `URLTaskPlacement.last` among the interceptors (the manager checks it): a
/// request takes a token only once no other interceptor will hold, answer or refuse it. An
/// interceptor of yours that answers without the network (a cache) belongs before it: give yours
/// a placement other than `URLTaskPlacement.last` to have the manager check that.
public final class RateLimiter: URLTaskInterceptor, URLTaskOutcomeObserver {
    /// How fast requests may go.
    public struct Policy: Sendable {
        /// Requests per second, per host. Any value is safe: one that is not positive (zero,
        /// negative, NaN) lets no request through, so each waits until its `timeoutInterval`;
        /// infinity limits nothing; a tiny rate waits at most 100 years for a token (0.2.0
        /// trapped on zero, NaN and rates below about 1e-10).
        public var rate: Double
        /// How many requests may go at once after a quiet spell. Below 1 counts as 1.
        public var burst: Int
        /// The most requests that may wait for one host; more fail at once with a `URLTaskError`
        /// coded `URLTaskError.Code.rateLimitQueueFull` carrying a
        /// ``RateLimitQueueFullError``. `nil` for no limit; zero or less refuses every request
        /// that would wait.
        public var maximumQueueLength: Int?
        /// Statuses whose `Retry-After` pauses the host.
        public var pausingStatuses: Set<Int>
        /// The longest pause a `Retry-After` may impose. Negative counts as zero, and anything
        /// beyond 100 years as 100 years. The header is read by ``RetryAfter``, as
        /// ``RetryReactor`` reads it: an integer too large for any type pauses this long.
        public var maximumPause: Duration
        /// Requests that are not limited.
        public var exempts: @Sendable (URLRequest) -> Bool
        /// The most hosts whose bucket is remembered (default 4,096; at least 1). A host whose
        /// bucket has refilled, with nobody waiting and no pause in force, is forgotten (a new
        /// bucket starts full, so nothing changes); past this many, the least recently used
        /// bucket nobody waits on is forgotten too, and that host starts with a full bucket when
        /// it is seen again. Hosts with waiting requests or a server's pause are always kept. So
        /// a client that talks to any number of hosts keeps a bounded state.
        public var maximumHosts: Int

        /// `rate` requests a second and bursts of `burst` per host; `429` and `503` pause for
        /// their `Retry-After`, at most a minute.
        public init(
            rate: Double, burst: Int = 1, maximumQueueLength: Int? = nil, pausingStatuses: Set<Int> = [429, 503],
            maximumPause: Duration = .seconds(60), exempts: @escaping @Sendable (URLRequest) -> Bool = { _ in false },
            maximumHosts: Int = 4_096
        ) {
            self.rate = rate
            self.burst = burst
            self.maximumQueueLength = maximumQueueLength
            self.pausingStatuses = pausingStatuses
            self.maximumPause = maximumPause
            self.exempts = exempts
            self.maximumHosts = max(1, maximumHosts)
        }
    }

    /// What the limiter decided, for logs and tests (``events(bufferingNewest:)``).
    public enum Event: Sendable {
        /// `task` waits for a token; it is `position`th in line.
        case delayed(task: URLTask.ID, host: String, position: Int)
        /// `task` got its token after waiting `waited`.
        case released(task: URLTask.ID, host: String, waited: Duration)
        /// `host` answered `status` with `Retry-After`: nothing goes to it for `duration`.
        case paused(host: String, duration: Duration, status: Int)
        /// `task` failed with ``RateLimitQueueFullError``.
        case refused(task: URLTask.ID, host: String)
    }

    /// How fast requests may go.
    public let policy: Policy
    private let storage: RateLimiterStorage
    private let decisions = DecisionEvents<Event>()

    /// A limiter with one bucket per host, as `policy` says.
    public init(policy: Policy) {
        self.policy = policy
        self.storage = RateLimiterStorage(policy: policy)
    }

    /// How many hosts the limiter keeps a bucket for (at most about ``Policy/maximumHosts``).
    var rememberedHostCount: Int { storage.hostCount }
    /// ``RateLimiterStorage/passes``, for tests.
    var passes: (charged: Int, refunded: Int) { storage.passes }

    /// A stream of the limiter's decisions; it ends when the limiter is released.
    public func events(bufferingNewest limit: Int = 1_000) -> AsyncStream<Event> {
        decisions.subscribe(bufferingNewest: limit)
    }

    /// Lets the task go when its host's bucket has a token and nobody is ahead of it; until then
    /// it waits here, in line.
    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        guard !policy.exempts(task.originalRequest) else { return .execute }
        let host = URLOrigin(task.request.url)?.description ?? ""
        switch pass(of: task, host: host) {
        case .keepsTurn(let waited):
            task.annotateWhenSent("rate-limit", Self.sentNote(waited: waited, kept: true))
            return .execute
        case .takesTurn(let givingBack):
            if let givingBack {
                task.attemptValues[TokenTaken.self] = nil
                storage.refund(host: givingBack)
            }
        }
        let waiter = storage.makeWaiter()
        let id = task.id
        let started = ContinuousClock.now
        let storage = storage
        let decisions = decisions
        let annotated = task
        let turn: RateLimiterStorage.Turn = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                switch storage.arrive(waiter, host: host, continuation: continuation) {
                case .wait(let position, _):
                    decisions.emit(.delayed(task: id, host: host, position: position))
                    annotated.annotate("rate-limit", "waits for \(host), \(position) in line")
                case .go, .refuse: break
                }
            }
        } onCancel: {
            storage.leave(waiter, host: host)
        }
        switch turn {
        case .go(let waited):
            let waitedFor = waited ? started.duration(to: .now) : nil
            recordTurn(on: &task, host: host, waited: waitedFor)
            if let waitedFor {
                decisions.emit(.released(task: id, host: host, waited: waitedFor))
                task.annotateWhenSent("rate-limit", Self.sentNote(waited: waitedFor, kept: false))
            }
            return .execute
        case .refused(let queued):
            decisions.emit(.refused(task: id, host: host))
            task.annotate("rate-limit", "refused: \(queued) requests wait for \(host)")
            return .fail(URLTaskError(code: .rateLimitQueueFull, underlying: RateLimitQueueFullError(host: host, queued: queued)))
        case .cancelled:
            throw CancellationError()
        }
    }

    /// What one pass of an attempt through the limiter spends (``pass(of:host:)``).
    enum Pass: Equatable {
        /// The attempt holds a turn of this limiter's for this host already (it came back through
        /// the interceptors before it was sent: a token refresh made its headers stale while it
        /// waited, `URLTask.attemptValues` kept): it goes on without another, after `waited`.
        case keepsTurn(waited: Duration?)
        /// It takes a turn, in line; first a turn it holds for another host, `givingBack`, goes
        /// back (an interceptor sent it elsewhere this time).
        case takesTurn(givingBack: String?)
    }

    /// The rule that charges an attempt once however often it passes: decided from what the
    /// attempt carries (``recordTurn(on:host:waited:)``), before it queues. Apart from
    /// ``intercept(_:context:)`` so that the stack's simulation (`StackSimulationTests`) runs
    /// this rule itself, not a copy of it.
    func pass(of task: URLTask, host: String) -> Pass {
        guard let taken = task.attemptValues[TokenTaken.self], taken.limiter == ObjectIdentifier(storage) else {
            return .takesTurn(givingBack: nil)
        }
        return taken.host == host ? .keepsTurn(waited: taken.waited) : .takesTurn(givingBack: taken.host)
    }

    /// Records on the attempt the turn it took for `host` after `waited` (`nil`: at once): kept
    /// if the attempt comes back before it is sent (``pass(of:host:)``), given back if it turns
    /// out to send nothing (``observeJoinedTransfer(of:)``).
    func recordTurn(on task: inout URLTask, host: String, waited: Duration?) {
        task.attemptValues[TokenTaken.self] = TokenTaken.Value(limiter: ObjectIdentifier(storage), host: host, waited: waited)
    }

    /// What the task's events say once the attempt is sent (never before: it may yet wait at a
    /// refresh, be failed or share another's transfer). `FleetRateLimiter` says the same.
    package static func sentNote(waited: Duration?, kept: Bool) -> String {
        let wait = waited.map { "sent after waiting \($0.formatted(.units(allowed: [.milliseconds], width: .narrow)))" } ?? "sent"
        return kept ? wait + ", its turn kept across a token refresh" : wait
    }

    /// Pauses the host on a `429` or `503` with `Retry-After`.
    public func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
        guard case .response(let response) = outcome, policy.pausingStatuses.contains(response.statusCode),
            !policy.exempts(task.originalRequest), let retryAfter = RetryAfter(response: response)
        else { return }
        let duration = min(retryAfter.delay, policy.maximumPause.clampedWait)
        let host = URLOrigin(task.request.url)?.description ?? ""
        storage.pause(host: host, for: duration)
        decisions.emit(.paused(host: host, duration: duration, status: response.statusCode))
        task.annotate("rate-limit", "paused \(host) for \(duration) after \(response.statusCode)")
    }

    /// The attempt joined an identical request's transfer and sends nothing: its token goes back.
    public func observeJoinedTransfer(of task: URLTask) {
        guard let taken = task.attemptValues[TokenTaken.self], taken.limiter == ObjectIdentifier(storage) else { return }
        storage.refund(host: taken.host)
        task.annotate("rate-limit", "token given back: joined an identical request's transfer")
    }

    /// `URLTaskPlacement.last`: a request takes a token once no other interceptor will hold,
    /// answer or refuse it.
    public var interceptorPlacement: URLTaskPlacement { .last }
}

/// The token an attempt took, and from which limiter and host: given back if it sends nothing.
private enum TokenTaken: URLTaskValueKey {
    struct Value: Sendable {
        let limiter: ObjectIdentifier
        let host: String
        /// How long the attempt waited for the token (`nil`: it had one at once).
        let waited: Duration?
    }
}

/// Why a request was failed without being sent: too many requests already wait for its host.
/// The caller finds it as the `URLTaskError.underlying` error of a `URLTaskError` coded
/// `URLTaskError.Code.rateLimitQueueFull`.
public struct RateLimitQueueFullError: Error, Sendable, CustomStringConvertible, LocalizedError {
    /// The host (`scheme://host:port`).
    public let host: String
    /// How many requests were waiting.
    public let queued: Int

    /// An error for `host`, where `queued` requests wait.
    public init(host: String, queued: Int) {
        self.host = host
        self.queued = queued
    }

    /// The host and the length of the line: nothing secret.
    public var description: String { "\(queued) requests already wait for \(host) under its rate limit; not sent" }
    /// The same as ``description``, for `localizedDescription`.
    public var errorDescription: String? { description }
}

/// One ``TokenBucketStateMachine`` per host in a ``HostTable`` (refilled buckets forgotten, at
/// most ``RateLimiter/Policy/maximumHosts`` kept), the waiting requests' continuations and one
/// timer per host. Nothing is resumed while the lock is held.
final class RateLimiterStorage: Sendable {
    enum Turn: Sendable {
        case go(waited: Bool)
        case refused(queued: Int)
        case cancelled
    }

    private struct State {
        var buckets: HostTable<TokenBucketStateMachine>
        var waiting: [TokenBucketStateMachine.Waiter: CheckedContinuation<Turn, Never>] = [:]
        /// Waiters made and not yet arrived; `true` once their caller cancelled (they arrive
        /// cancelled). Before, a set of the waiters that left before arriving also took every
        /// waiter that left after it had gone (a cancel just after its turn), and kept it forever.
        var unarrived: [TokenBucketStateMachine.Waiter: Bool] = [:]
        /// The earliest wake-up armed per host.
        var armed: [String: ContinuousClock.Instant] = [:]
        var lastWaiter: UInt64 = 0
        /// Tokens handed out and given back, for tests (``passes``).
        var charged = 0
        var refunded = 0

        /// Records a wake-up for `host` at `instant` unless an earlier one is armed; returns it if
        /// a timer must be started.
        mutating func arm(_ host: String, at instant: ContinuousClock.Instant) -> ContinuousClock.Instant? {
            if let current = armed[host], current <= instant { return nil }
            armed[host] = instant
            return instant
        }
    }

    private let policy: RateLimiter.Policy
    private let state: LockedState<State>

    init(policy: RateLimiter.Policy) {
        self.policy = policy
        self.state = LockedState(State(buckets: HostTable(capacity: policy.maximumHosts)))
    }

    /// How many hosts have a bucket on record (for tests and the `hosts` benchmark).
    var hostCount: Int {
        state.withLock { $0.buckets.count }
    }

    /// How many requests the limiter keeps a record of besides its buckets (waiting, not yet
    /// arrived, armed timers), and the room of those tables (for tests: nothing stays once every
    /// request went, and a burst's room goes back after it).
    var requestRecords: (count: Int, room: Int) {
        state.withLock {
            ($0.waiting.count + $0.unarrived.count + $0.armed.count, $0.waiting.capacity + $0.unarrived.capacity + $0.armed.capacity)
        }
    }

    /// Tokens handed out (a turn each) and given back since the limiter was made: for tests that
    /// check the limiter charged what went to the wire and nothing more.
    var passes: (charged: Int, refunded: Int) {
        state.withLock { ($0.charged, $0.refunded) }
    }

    func makeWaiter() -> TokenBucketStateMachine.Waiter {
        state.withLock { state in
            state.lastWaiter += 1
            let waiter = TokenBucketStateMachine.Waiter(rawValue: state.lastWaiter)
            state.unarrived[waiter] = false
            return waiter
        }
    }

    private func freshBucket(now: ContinuousClock.Instant) -> TokenBucketStateMachine {
        TokenBucketStateMachine(rate: policy.rate, burst: policy.burst, maximumQueueLength: policy.maximumQueueLength, now: now)
    }

    func arrive(
        _ waiter: TokenBucketStateMachine.Waiter, host: String, continuation: CheckedContinuation<Turn, Never>
    )
        -> TokenBucketStateMachine.ArrivalAction
    {
        let now = ContinuousClock.now
        let (action, wake): (TokenBucketStateMachine.ArrivalAction, ContinuousClock.Instant?) = state.withLock { state in
            if state.unarrived.removeValueShrinking(forKey: waiter) == true { return (.refuse(queued: -1), nil) }
            let action = state.buckets.update(host, now: now, make: { freshBucket(now: now) }) { bucket in
                let action = bucket.arrive(waiter, now: now)
                return (!bucket.isIdle(at: now), action)
            }
            guard case .wait(_, let wakeAt) = action else {
                if case .go = action { state.charged += 1 }
                return (action, nil)
            }
            state.waiting[waiter] = continuation
            return (action, state.arm(host, at: wakeAt))
        }
        switch action {
        case .go: continuation.resume(returning: .go(waited: false))
        case .refuse(let queued): continuation.resume(returning: queued < 0 ? .cancelled : .refused(queued: queued))
        case .wait: break
        }
        if let wake { schedule(host, at: wake) }
        return action
    }

    func leave(_ waiter: TokenBucketStateMachine.Waiter, host: String) {
        let continuation: CheckedContinuation<Turn, Never>? = state.withLock { state in
            guard let continuation = state.waiting.removeValueShrinking(forKey: waiter) else {
                // Not arrived yet: it arrives cancelled. Arrived and gone: nothing to do.
                if state.unarrived[waiter] != nil { state.unarrived[waiter] = true }
                return nil
            }
            _ = state.buckets.updateIfPresent(host) { $0.leave(waiter) }
            return continuation
        }
        continuation?.resume(returning: .cancelled)
    }

    func pause(host: String, for duration: Duration) {
        let now = ContinuousClock.now
        let wake: ContinuousClock.Instant? = state.withLock { state in
            let wakeAt = state.buckets.update(host, now: now, make: { freshBucket(now: now) }) { bucket in
                (true, bucket.pause(for: duration, now: now))
            }
            return wakeAt.flatMap { state.arm(host, at: $0) }
        }
        if let wake { schedule(host, at: wake) }
    }

    private func schedule(_ host: String, at instant: ContinuousClock.Instant) {
        Task { [weak self] in
            try? await Task.sleep(until: instant, clock: .continuous)
            self?.tick(host, armedAt: instant)
        }
    }

    /// A token of `host`'s goes back (``TokenBucketStateMachine/refund(now:)``). A bucket already
    /// forgotten had refilled: a new one starts full.
    func refund(host: String) {
        let now = ContinuousClock.now
        let (released, wake): ([CheckedContinuation<Turn, Never>], ContinuousClock.Instant?) = state.withLock { state in
            state.refunded += 1
            guard let action = state.buckets.updateIfPresent(host, { $0.refund(now: now) }) else { return ([], nil) }
            let released = action.released.compactMap { state.waiting.removeValueShrinking(forKey: $0) }
            state.charged += released.count
            return (released, action.wakeAt.flatMap { state.arm(host, at: $0) })
        }
        for continuation in released { continuation.resume(returning: .go(waited: true)) }
        if let wake { schedule(host, at: wake) }
    }

    private func tick(_ host: String, armedAt instant: ContinuousClock.Instant) {
        let now = ContinuousClock.now
        let (released, wake): ([CheckedContinuation<Turn, Never>], ContinuousClock.Instant?) = state.withLock { state in
            if state.armed[host] == instant { state.armed.removeValueShrinking(forKey: host) }
            guard let action = state.buckets.updateIfPresent(host, { $0.tick(now: now) }) else { return ([], nil) }
            let released = action.released.compactMap { state.waiting.removeValueShrinking(forKey: $0) }
            state.charged += released.count
            return (released, action.wakeAt.flatMap { state.arm(host, at: $0) })
        }
        for continuation in released { continuation.resume(returning: .go(waited: true)) }
        if let wake { schedule(host, at: wake) }
    }
}
