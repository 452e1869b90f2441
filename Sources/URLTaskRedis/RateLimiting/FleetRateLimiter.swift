import Foundation
import URLTaskManager
import URLTaskResilience
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A `RateLimiter` whose buckets every process of a fleet shares: no host gets more than a set
/// rate from all of them together, and a server's `Retry-After` pause reaches them all.
///
/// N processes each with its own `RateLimiter(policy: .init(rate: 50))` send 50 × N requests a
/// second to a host that allows 50. This limiter keeps each host's bucket in Redis instead, so
/// the fleet sends `rate` a second, in bursts of at most `burst`, whatever N is.
///
/// - **The bucket** is GCRA in one Lua script, atomic in Redis and timed by the Redis server's
///   own clock (`TIME` inside the script), so the processes' clocks never matter. Rate and burst
///   mean what they mean for `RateLimiter`: `rate` requests a second, up to `burst` at once
///   after a quiet spell. One round trip per request that goes at once; while requests wait,
///   about one per waiting process per turn, since only the first request in line in each
///   process asks (measured: URLTaskManager's Performance article, "A fleet on Redis").
/// - **A request that must wait** sleeps for as long as the script says, then asks again. Inside
///   one process only the first request in line for a host asks; the others wait behind it in
///   arrival order. The wait counts toward the request's `timeoutInterval` (the manager fails
///   it with `URLError.timedOut`); a caller that cancels leaves at once.
/// - **A turn per attempt on the wire.** A request that had its turn and then waits for a token
///   refresh runs the interceptors again for the new token as the same attempt, and keeps the
///   turn: the fleet's bucket is not charged twice, and the request does not queue again (two
///   processes, 100 GETs at 20 a second with the token expiring mid-line: 102 turns for the
///   102 requests sent; `RateLimiter` does the same).
/// - **A `429` or `503` with `Retry-After`** (this limiter is also an outcome observer) sets the
///   host's pause in Redis (`<prefix>:pause:<host>`, at most ``Policy/maximumPause``, a longer
///   pause already set is kept): every process's requests to that host wait it out, since the
///   script answers with the pause's remaining time before anything else. The process that saw
///   it also pauses at once, without waiting for the round trip.
/// - **When Redis does not answer** (a closed connection, a refused connection, a timeout, a
///   "not yet" reply such as `LOADING` from a Redis that is loading its data, `BUSY`,
///   `MASTERDOWN` or `TRYAGAIN`, or any other ``RedisError``), the limiter falls back to a local
///   `RateLimiter` (``fallback``) at `rate / processCount` and `burst / processCount` (at
///   least 1), emits ``Event/fellBack(reason:localRate:probeIn:)``, and asks Redis again on the
///   first request after ``Policy/probeDelay`` (doubled after each failed probe, up to
///   ``Policy/maximumProbeDelay``); when Redis answers it emits ``Event/rejoined`` and the
///   shared bucket is back. No request fails because Redis is away; if ``Policy/processCount``
///   is right, the fleet still stays within the rate, across the fall back and the rejoin too:
///   - the first local turn comes no sooner than an empty local bucket would give it, at a
///     random phase within one local interval (every process falls back at the same moment: the
///     shared bucket may have just given its burst, and buckets started full together would add
///     theirs and then release in lockstep);
///   - the requests waiting while Redis is away wait in this limiter's line, one at a time in
///     ``fallback``, so when Redis returns they ask the shared bucket instead of draining from a
///     local queue beside it;
///   - for ``Policy/maximumProbeDelay`` (and one local burst) after it rejoins, a process takes
///     a local turn before each shared one: the other processes keep to their local share until
///     their own next probe, and this one keeps to its share meanwhile.
///
/// Keys: `<prefix>:tat:<host>` (the bucket) and `<prefix>:pause:<host>` (the pause), both with
/// an expiry, `<host>` being `scheme://host:port` (`URLOrigin`). Nothing the limiter logs or
/// emits holds a secret: hosts, durations and ``RedisError``s (which carry none).
///
/// ```swift
/// let redis = RedisClient(configuration: .init(endpoint: .tcp(host: "redis.internal", port: 6379)))
/// let limiter = FleetRateLimiter(redis: redis, policy: .init(rate: 50, burst: 10, processCount: 8))
/// let manager = URLTaskManager(interceptors: [limiter], reactors: [RetryReactor()])
/// ```
///
/// It is placed `URLTaskPlacement.last` among the interceptors, as `RateLimiter` is: a request
/// takes a turn only once no other interceptor will hold, answer or refuse it.
public final class FleetRateLimiter: URLTaskInterceptor, URLTaskOutcomeObserver {
    /// How fast the fleet's requests may go, and how the limiter talks to Redis.
    public struct Policy: Sendable {
        /// Requests per second, per host, for the whole fleet. Not positive (zero, negative,
        /// NaN) lets no request through, so each waits until its `timeoutInterval`, as
        /// `RateLimiter` does; infinity limits nothing (and asks Redis nothing).
        public var rate: Double
        /// How many requests may go at once after a quiet spell, fleet-wide. Below 1 counts as 1.
        public var burst: Int
        /// How many processes share the limit: while Redis is away each process limits itself
        /// to `rate / processCount` (and bursts of `burst / processCount`, at least 1), so that
        /// the fleet stays within the rate without Redis. Below 1 counts as 1.
        public var processCount: Int
        /// What every key begins with (`<keyPrefix>:tat:<host>`, `<keyPrefix>:pause:<host>`):
        /// to keep two limits apart on one Redis, or to match an ACL's key pattern. The limiter
        /// needs `EVALSHA` and `SCRIPT LOAD` on those keys and nothing else
        /// (`ACL SETUSER limiter on >… ~<keyPrefix>:* +evalsha +script|load`).
        public var keyPrefix: String
        /// Statuses whose `Retry-After` pauses the host for the fleet.
        public var pausingStatuses: Set<Int>
        /// The longest pause a `Retry-After` may impose (read by `RetryAfter`, as
        /// `RateLimiter` and `RetryReactor` read it). Negative counts as zero.
        public var maximumPause: Duration
        /// The first wait, after Redis stopped answering, before a request asks it again.
        public var probeDelay: Duration
        /// The longest wait between two probes of an absent Redis (the wait doubles up to it).
        public var maximumProbeDelay: Duration
        /// The most requests of this process that may wait for one host while the local bucket
        /// decides (while Redis is away, and while a rejoin keeps to the local share): more fail
        /// at once with a `URLTaskError` coded `URLTaskError.Code.rateLimitQueueFull` carrying a
        /// `RateLimitQueueFullError`, as `RateLimiter.Policy.maximumQueueLength` fails them;
        /// `nil` for no limit.
        public var maximumFallbackQueueLength: Int?
        /// Requests that are not limited.
        public var exempts: @Sendable (URLRequest) -> Bool

        /// `rate` requests a second and bursts of `burst` per host for a fleet of `processCount`
        /// processes; `429` and `503` pause for their `Retry-After`, at most a minute; Redis
        /// asked again 250 ms after it stopped answering, then at most every 5 s.
        public init(
            rate: Double, burst: Int = 1, processCount: Int, keyPrefix: String = "urltask:ratelimit",
            pausingStatuses: Set<Int> = [429, 503], maximumPause: Duration = .seconds(60), probeDelay: Duration = .milliseconds(250),
            maximumProbeDelay: Duration = .seconds(5), maximumFallbackQueueLength: Int? = nil,
            exempts: @escaping @Sendable (URLRequest) -> Bool = { _ in false }
        ) {
            self.rate = rate
            self.burst = burst
            self.processCount = processCount
            self.keyPrefix = keyPrefix
            self.pausingStatuses = pausingStatuses
            self.maximumPause = maximumPause
            self.probeDelay = probeDelay
            self.maximumProbeDelay = maximumProbeDelay
            self.maximumFallbackQueueLength = maximumFallbackQueueLength
            self.exempts = exempts
        }
    }

    /// What the limiter decided, for logs, metrics and tests (``events(bufferingNewest:)``).
    /// The local fallback's own decisions are ``fallback``'s events.
    public enum Event: Sendable {
        /// `task` must wait `wait` before it asks again (`paused`: a server's pause is the
        /// reason; otherwise the shared bucket's next turn, or the first local turn after a fall
        /// back); emitted once per request, at its first wait.
        case delayed(task: URLTask.ID, host: String, wait: Duration, paused: Bool)
        /// `task` got its turn from Redis after waiting `waited` in all.
        case released(task: URLTask.ID, host: String, waited: Duration)
        /// `host` answered `status` with `Retry-After`: this process sends it nothing for
        /// `duration`, and neither does the rest of the fleet when `shared` (Redis stored the
        /// pause; emitted once it answered, or failed to).
        case paused(host: String, duration: Duration, status: Int, shared: Bool)
        /// Redis did not answer (`reason`): this process limits itself to `localRate` requests a
        /// second per host with ``fallback``, and asks Redis again in `probeIn`.
        case fellBack(reason: RedisError, localRate: Double, probeIn: Duration)
        /// Redis answered again: the fleet's shared bucket is back.
        case rejoined
    }

    /// How fast requests may go.
    public let policy: Policy
    /// The local bucket used while Redis is away, at `rate / processCount`: its events
    /// (`RateLimiter.events(bufferingNewest:)`) say what it decided then. The requests waiting
    /// for a host wait in this limiter's line and enter it one at a time, so its events show
    /// each waiting first in line; a request refused because too many wait
    /// (``Policy/maximumFallbackQueueLength``) is refused by this limiter, before it.
    public let fallback: RateLimiter
    private let redis: RedisClient
    private let line = FleetHostLine()
    private let state: FleetRateLimiterState
    private let decisions = DecisionEvents<Event>()
    /// The GCRA interval and tolerance, in µs, as the scripts take them.
    private let interval: Double
    private let tolerance: Double

    /// A limiter whose buckets live in the Redis `redis` talks to, as `policy` says.
    public init(redis: RedisClient, policy: Policy) {
        self.policy = policy
        self.redis = redis
        let processes = max(1, policy.processCount)
        let burst = max(1, policy.burst)
        let localRate = policy.rate / Double(processes)
        let localBurst = max(1, burst / processes)
        self.fallback = RateLimiter(
            policy: .init(
                rate: localRate, burst: localBurst, maximumQueueLength: policy.maximumFallbackQueueLength,
                pausingStatuses: policy.pausingStatuses, maximumPause: policy.maximumPause, exempts: policy.exempts))
        let localInterval = localRate > 0 ? Duration(clampingSeconds: 1 / localRate) : .longestWait
        self.state = FleetRateLimiterState(
            mode: FleetRateLimitMode(
                probeDelay: policy.probeDelay, maximumProbeDelay: policy.maximumProbeDelay, localInterval: localInterval,
                localBurst: localBurst))
        // 100 years at most: a tiny rate waits "forever", and the µs stay exact in Lua's doubles.
        let interval = policy.rate > 0 ? min(1_000_000 / policy.rate, Self.longestWaitMicroseconds) : Self.longestWaitMicroseconds
        self.interval = interval.rounded(.up)
        self.tolerance = (Double(burst - 1) * self.interval).rounded(.up)
    }

    /// `Duration.longestWait` in µs.
    private static let longestWaitMicroseconds = 3_155_760_000.0 * 1_000_000

    /// A stream of the limiter's decisions; it ends when the limiter is released.
    public func events(bufferingNewest limit: Int = 1_000) -> AsyncStream<Event> {
        decisions.subscribe(bufferingNewest: limit)
    }

    /// Whether requests take their turns from Redis now (`false` while the local fallback is
    /// in force; `true` again from the rejoin, while requests also keep to the local share for
    /// a while): for a health check or a dashboard.
    public var isShared: Bool { state.isShared }

    /// Lets the task go when the fleet's bucket for its host has a turn for it; until then it
    /// waits here. While Redis is away, ``fallback`` decides.
    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        guard !policy.exempts(task.originalRequest), !(policy.rate == .infinity) else { return .execute }
        guard policy.rate > 0 else {
            // No request may go: wait until the caller gives up (its timeout, a cancel).
            try await Task.sleep(for: .longestWait)
            throw CancellationError()
        }
        let host = URLOrigin.description(of: task.request.url) ?? ""
        if let taken = task.attemptValues[FleetTurnTaken.self], taken.limiter == ObjectIdentifier(self) {
            // The attempt came back through the interceptors before it was sent (a token refresh
            // made its headers stale while it waited): it keeps the fleet's turn it had.
            if taken.host == host {
                task.annotateWhenSent("fleet-rate-limit", RateLimiter.sentNote(waited: taken.waited, kept: true))
                return .execute
            }
            // An interceptor sent it elsewhere this time: the first host's turn goes back.
            task.attemptValues[FleetTurnTaken.self] = nil
            giveBack(host: taken.host)
        }
        let started = ContinuousClock.now
        // While the local bucket decides, the line holds as many as the fallback's queue may:
        // the head (in the fallback) and those behind it.
        let maximumQueued = state.needsLocalTurn(now: started) ? policy.maximumFallbackQueueLength.map { max($0, 1) - 1 } : nil
        if case .refused(let queued) = try await line.enter(host, refusingPast: maximumQueued) {
            task.annotate("fleet-rate-limit", "refused: \(queued + 1) requests wait for \(host) at the local share")
            return .fail(URLTaskError(code: .rateLimitQueueFull, underlying: RateLimitQueueFullError(host: host, queued: queued + 1)))
        }
        let outcome: TurnOutcome
        do {
            outcome = try await takeTurn(&task, context: context, host: host, started: started)
        } catch {
            line.leave(host)
            throw error
        }
        line.leave(host)
        switch outcome {
        case .went(let waited):
            // Kept if the attempt comes back before it is sent (a refresh), given back if it turns
            // out to send nothing (``observeJoinedTransfer(of:)``).
            task.attemptValues[FleetTurnTaken.self] = FleetTurnTaken.Value(limiter: ObjectIdentifier(self), host: host, waited: waited)
            state.turnTaken()
            if let waited {
                decisions.emit(.released(task: task.id, host: host, waited: waited))
                task.annotateWhenSent("fleet-rate-limit", RateLimiter.sentNote(waited: waited, kept: false))
            }
            return .execute
        case .local(let command):
            return command
        }
    }

    private enum TurnOutcome {
        /// Redis gave the turn (after the local bucket's, during a rejoin), after a wait (`nil`:
        /// at once).
        case went(waited: Duration?)
        /// Redis is away: the local bucket decided (`.execute`, or its refusal).
        case local(InterceptCommand)
    }

    /// Asks Redis, the local bucket or both, as the mode says, until the task may go, sleeping as
    /// told in between. Called at the head of the host's line, which it holds throughout.
    private func takeTurn(
        _ task: inout URLTask, context: InterceptContext, host: String, started: ContinuousClock.Instant
    ) async throws -> TurnOutcome {
        var waited = false
        var hasLocalTurn = false
        let id = task.id
        let annotated = task
        func wait(_ duration: Duration, paused: Bool) async throws {
            if !waited {
                waited = true
                decisions.emit(.delayed(task: id, host: host, wait: duration, paused: paused))
                annotated.annotate("fleet-rate-limit", "waits \(duration) for \(host)\(paused ? " (paused)" : "")")
            }
            try await Task.sleep(for: duration)
        }
        while true {
            try Task.checkCancellation()
            let now = ContinuousClock.now
            if let pause = state.localPause(host, now: now) {
                try await wait(pause, paused: true)
                continue
            }
            let route = state.requestArrived(now: now, hasLocalTurn: hasLocalTurn)
            switch route {
            case .go:
                return .local(.execute)
            case .wait(let until):
                try await wait(now.duration(to: until), paused: false)
                continue
            case .local:
                let command = try await fallback.intercept(&task, context: context)
                guard case .execute = command else { return .local(command) }
                hasLocalTurn = true
                continue
            case .shared, .probe:
                break
            }
            let answer: FleetRateLimitScripts.Answer
            do {
                let reply = try await redis.run(
                    FleetRateLimitScripts.take, keys: [key("tat", host), key("pause", host)],
                    arguments: [Self.integer(interval), Self.integer(tolerance)])
                answer = try FleetRateLimitScripts.answer(from: reply)
            } catch let error as RedisError {
                // A caller that cancelled may see its command fail: that says nothing of Redis.
                if Task.isCancelled {
                    if route == .probe { state.probeAbandoned(now: .now) }
                    throw CancellationError()
                }
                if case .fellBack(let probeIn) = state.redisFailed(now: .now, phase: .random(in: 0..<1)) {
                    decisions.emit(.fellBack(reason: error, localRate: fallback.policy.rate, probeIn: probeIn))
                    task.annotate("fleet-rate-limit", "Redis did not answer (\(error)): the local bucket decides")
                }
                // The mode now says what the local bucket does (a probe that had its turn goes).
                continue
            } catch {
                if route == .probe { state.probeAbandoned(now: .now) }
                throw error
            }
            if state.redisAnswered(now: .now) == .rejoined { decisions.emit(.rejoined) }
            switch answer {
            case .go:
                return .went(waited: waited ? started.duration(to: .now) : nil)
            case .wait(let duration, let paused):
                try await wait(duration, paused: paused)
            }
        }
    }

    /// Pauses the host, for the fleet, on a `429` or `503` with `Retry-After`.
    public func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
        // The fallback pauses its own bucket (it reads the same statuses and header).
        fallback.observe(outcome, of: task)
        guard case .response(let response) = outcome, policy.pausingStatuses.contains(response.statusCode),
            !policy.exempts(task.originalRequest), let retryAfter = RetryAfter(response: response)
        else { return }
        let duration = min(retryAfter.delay, policy.maximumPause.clampedWait)
        // A Retry-After of 0 s asks for no wait.
        guard duration > .zero else { return }
        let host = URLOrigin.description(of: task.request.url) ?? ""
        state.pause(host, until: .now + duration)
        task.annotate("fleet-rate-limit", "paused \(host) for the fleet for \(duration) after \(response.statusCode)")
        let keys = [key("pause", host), key("tat", host)]
        let arguments = [String(Self.milliseconds(duration)), Self.integer(tolerance)]
        let redis = redis
        let decisions = decisions
        let status = response.statusCode
        // Off the observers' queue: an observer waits for nothing. A pause Redis does not get
        // still holds this process (above); the others learn it from the server.
        Task {
            let shared = (try? await redis.run(FleetRateLimitScripts.pause, keys: keys, arguments: arguments)) != nil
            decisions.emit(.paused(host: host, duration: duration, status: status, shared: shared))
        }
    }

    /// The attempt joined an identical request's transfer and sends nothing: its turn goes back
    /// (to Redis, or to the fallback's bucket if that is where it came from).
    public func observeJoinedTransfer(of task: URLTask) {
        fallback.observeJoinedTransfer(of: task)
        guard let taken = task.attemptValues[FleetTurnTaken.self], taken.limiter == ObjectIdentifier(self) else { return }
        giveBack(host: taken.host)
        task.annotate("fleet-rate-limit", "turn given back: joined an identical request's transfer")
    }

    /// Gives a turn of `host`'s back to the fleet's bucket, off the caller's task.
    private func giveBack(host: String) {
        state.turnGivenBack()
        let keys = [key("tat", host)]
        let arguments = [Self.integer(interval)]
        let redis = redis
        Task { _ = try? await redis.run(FleetRateLimitScripts.refund, keys: keys, arguments: arguments) }
    }

    /// Turns this process took from Redis and gave back since the limiter was made: for tests
    /// that check it charged what went to the wire.
    var passes: (taken: Int, givenBack: Int) { state.turns }

    /// `URLTaskPlacement.last`: a request takes a turn once no other interceptor will hold,
    /// answer or refuse it.
    public var interceptorPlacement: URLTaskPlacement { .last }

    /// One script run for `host`'s turn, as ``intercept(_:context:)`` makes it (for tests of
    /// the script against a real server).
    func take(host: String) async throws -> FleetRateLimitScripts.Answer {
        let reply = try await redis.run(
            FleetRateLimitScripts.take, keys: [key("tat", host), key("pause", host)],
            arguments: [Self.integer(interval), Self.integer(tolerance)])
        return try FleetRateLimitScripts.answer(from: reply)
    }

    func key(_ kind: String, _ host: String) -> String { "\(policy.keyPrefix):\(kind):\(host)" }

    private static func integer(_ value: Double) -> String { String(Int64(value)) }

    /// At least 1 ms: Redis's `PX` takes whole, positive milliseconds.
    private static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        let milliseconds = seconds * 1_000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return max(1, milliseconds)
    }
}

/// The turn an attempt took from Redis, from which limiter and host: given back if it sends
/// nothing.
private enum FleetTurnTaken: URLTaskValueKey {
    struct Value: Sendable {
        let limiter: ObjectIdentifier
        let host: String
        /// How long the attempt waited for the turn (`nil`: it had one at once).
        let waited: Duration?
    }
}

/// The mode machine and the pauses this process saw, under one lock.
final class FleetRateLimiterState: Sendable {
    private struct State {
        var mode: FleetRateLimitMode
        /// Pauses this process set, until Redis has them (and after, while they last).
        var pauses: [String: ContinuousClock.Instant] = [:]
        /// Turns taken from Redis and given back (``FleetRateLimiter/passes``).
        var turnsTaken = 0
        var turnsGivenBack = 0
    }

    private let state: LockedState<State>

    init(mode: FleetRateLimitMode) {
        self.state = LockedState(State(mode: mode))
    }

    var isShared: Bool { state.withLock { $0.mode.isShared } }
    var turns: (taken: Int, givenBack: Int) { state.withLock { ($0.turnsTaken, $0.turnsGivenBack) } }
    func turnTaken() { state.withLock { $0.turnsTaken += 1 } }
    func turnGivenBack() { state.withLock { $0.turnsGivenBack += 1 } }

    func needsLocalTurn(now: ContinuousClock.Instant) -> Bool { state.withLock { $0.mode.needsLocalTurn(now: now) } }
    func requestArrived(now: ContinuousClock.Instant, hasLocalTurn: Bool) -> FleetRateLimitMode.Route {
        state.withLock { $0.mode.requestArrived(now: now, hasLocalTurn: hasLocalTurn) }
    }
    func redisAnswered(now: ContinuousClock.Instant) -> FleetRateLimitMode.Action { state.withLock { $0.mode.redisAnswered(now: now) } }
    func redisFailed(now: ContinuousClock.Instant, phase: Double) -> FleetRateLimitMode.Action {
        state.withLock { $0.mode.redisFailed(now: now, phase: phase) }
    }
    func probeAbandoned(now: ContinuousClock.Instant) { state.withLock { $0.mode.probeAbandoned(now: now) } }

    /// Records a pause of `host` until `until`, unless a longer one is recorded; forgets the
    /// pauses that ended.
    func pause(_ host: String, until: ContinuousClock.Instant) {
        let now = ContinuousClock.now
        state.withLock { state in
            state.pauses = state.pauses.filter { $0.value > now }
            if let current = state.pauses[host], current >= until { return }
            state.pauses[host] = until
        }
    }

    /// What is left of `host`'s pause, if one is in force.
    func localPause(_ host: String, now: ContinuousClock.Instant) -> Duration? {
        state.withLock { state in
            guard let until = state.pauses[host] else { return nil }
            guard until > now else {
                state.pauses[host] = nil
                return nil
            }
            return now.duration(to: until)
        }
    }
}
