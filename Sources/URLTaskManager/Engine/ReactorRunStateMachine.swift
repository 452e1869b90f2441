/// The single-flight lifecycle of one reactor, without I/O.
///
/// ```
///  idle(version v) ──task needs it──> running(run r, waiters) ──success──> idle(version v+1)
///        ^                               │  more tasks join; new tasks gate     │
///        └──────────────failure──────────┘  (waiters and gated tasks all fail)  │
/// ```
/// `version` counts successful runs and `failures` failed ones. A task records both when its
/// headers are decided, as its interceptors begin (its ``Stamp``). If it needs the reactor after a newer version exists, the work it
/// needs has already been done and it is requeued at once (the "late 401"). If only failed
/// runs ended since it was sent, the work it needs has already been tried and failed: it
/// fails at once with that run's error (the "late failure") instead of running the failed
/// work again for every response that was already on its way.
///
/// A task that was already sent again after a successful run, with headers decided after the
/// latest one, and that needs the reactor once more is not helped by another run (a resource
/// that refuses every token): its caller gets the response as the server gave it
/// (``NeedAction/deliverNow``), and no run starts for it.
///
/// **The loop guard counts refusals, not refreshes.** A successful run produced something (a
/// token); a task whose headers were decided under it and whose answer needed no reactor shows
/// that it works (``outcomeAccepted(sentUnder:)``). A run that starts after a successful one
/// whose product was accepted is a new need (a revocation, an expiry): it does not count, and
/// the streak starts again. One that starts while that product was never accepted counts; when
/// `maximumRuns` such starts fall within `window`, the next task that needs a run is refused
/// (``NeedAction/refuseLoop(runs:)``) until one leaves the window or a task is accepted. So a
/// token revoked every few seconds is refreshed as often as it needs to be, while a token
/// endpoint whose tokens the API always refuses stops after `maximumRuns + 1` refreshes. A run
/// that follows a failed run is not counted.
struct ReactorRunStateMachine {
    typealias TaskID = URLTask.ID

    /// What a task saw of the reactor when its headers were decided.
    struct Stamp: Equatable {
        var version = 0
        var failures = 0
        /// The credential version the reactor reports the task's headers carry
        /// (``URLTaskReactor/credentialVersion(of:)``), once read; `nil` for a reactor that
        /// keeps no version of its own.
        var reported: Int?
    }

    /// What a reactor that keeps a credential version of its own reported of one task, read
    /// outside the lock (it is the reactor's code) just before the event it informs: the version
    /// the task's headers carry, and the reactor's current one.
    struct ReportedVersion: Equatable {
        var sent: Int
        var current: Int

        /// Whether the headers were decided under an older version than the reactor's current
        /// one: the rule ``lateness(of:)`` applies, asked before a section so that a reading of
        /// current headers (a send's usual case) needs no record.
        var isOutdated: Bool { ReactorRunStateMachine.isLate(sent: sent, current: current) }
    }

    /// The one comparison of credential versions behind every lateness decision: a version
    /// sent is late once a newer one is current.
    static func isLate(sent: Int, current: Int) -> Bool { sent < current }

    /// How headers stamped at some point compare with what the reactor has done since
    /// (``lateness(of:)``).
    enum Lateness: Equatable {
        /// Nothing has changed since: they are current.
        case current
        /// A run succeeded since, or the reactor reports a newer credential version: the work
        /// the task would need has been done, it is sent again with new headers.
        case succeededSince
        /// Only failed runs ended since: the work was tried and failed.
        case failedSince
    }

    enum NeedAction: Equatable {
        /// Start run `run`; this task waits on it.
        case startRun(run: Int)
        /// A run is already going; this task waits on it.
        case wait(run: Int)
        /// A run finished after this task was sent: requeue without running again.
        case requeueNow
        /// Only failed runs finished after this task was sent: fail it with the last one's error.
        case failNow
        /// The task already went out again after a successful run, with headers decided after
        /// the latest one: another run cannot help; give the caller what the server said.
        case deliverNow
        /// The loop guard tripped: fail this task.
        case refuseLoop(runs: Int)
    }

    /// What a finished run means for the tasks it leaves behind.
    struct RunEnd: Equatable {
        /// Tasks that triggered or joined the run.
        var waiters: [TaskID]
        /// Tasks held at the gate (not sent yet).
        var gated: [TaskID]
    }

    private enum State {
        case idle
        case running(run: Int, waiters: [TaskID], gated: [TaskID])
    }

    private var state: State = .idle
    /// The run going on, if any.
    var currentRun: Int? {
        if case .running(let run, _, _) = state { return run }
        return nil
    }
    private(set) var version = 0
    private(set) var failures = 0
    /// The highest current credential version the reactor reported (``ReportedVersion``); `nil`
    /// until one was read, and for reactors that keep none.
    private(set) var reportedVersion: Int?
    private var runCount = 0
    /// When runs that followed a successful run whose product was never accepted started, for
    /// the loop guard: the current streak of refusals.
    private var runStarts: [ContinuousClock.Instant] = []
    /// How the latest run ended: `nil` before the first.
    private var lastRunSucceeded: Bool?
    /// Whether a task whose headers were decided under the current `version` got an answer
    /// that needed no reactor (kept only with a loop guard).
    private(set) var versionAccepted = false
    private let loopGuard: URLTaskReactorConfiguration.LoopGuard?

    init(loopGuard: URLTaskReactorConfiguration.LoopGuard?) {
        self.loopGuard = loopGuard
    }

    var isRunning: Bool { currentRun != nil }

    /// The stamp a task sent now records.
    var stamp: Stamp { Stamp(version: version, failures: failures) }

    /// Records what the reactor reported of a task (read just before the event that brings it):
    /// the engine keeps the highest current version, so a task judged later on another task's
    /// event (a connection slot handed over) is judged against it without calling the reactor.
    /// Returns `stamp` with the version its headers carry.
    mutating func record(_ reading: ReportedVersion?, in stamp: Stamp) -> Stamp {
        guard let reading else { return stamp }
        reportedVersion = max(reportedVersion ?? reading.current, reading.current)
        var stamp = stamp
        stamp.reported = reading.sent
        return stamp
    }

    /// Whether headers stamped `stamp` are older than this reactor's latest run or its latest
    /// reported credential version: the one place the engine decides that an outcome, or a task
    /// about to leave, is late. A successful run or a newer reported version wins over failures
    /// (the work a late task needs has been done).
    func lateness(of stamp: Stamp) -> Lateness {
        if Self.isLate(sent: stamp.version, current: version) { return .succeededSince }
        if let sent = stamp.reported, let current = reportedVersion, Self.isLate(sent: sent, current: current) { return .succeededSince }
        if stamp.failures < failures { return .failedSince }
        return .current
    }

    /// - Parameters:
    ///   - sentUnder: The stamp of the headers the task was sent with.
    ///   - alreadyRequeued: Whether this reactor already sent the task again after a successful run.
    ///   - reported: What the reactor reported of the task as sent, if it keeps a credential
    ///     version of its own (``record(_:in:)``).
    mutating func taskNeedsReaction(
        _ id: TaskID, sentUnder: Stamp, alreadyRequeued: Bool = false, reported: ReportedVersion? = nil,
        now: ContinuousClock.Instant
    ) -> NeedAction {
        let sentUnder = record(reported, in: sentUnder)
        switch state {
        case .running(let run, var waiters, let gated):
            state = .idle  // keeps `waiters` uniquely referenced: appending does not copy it
            waiters.append(id)
            state = .running(run: run, waiters: waiters, gated: gated)
            return .wait(run: run)
        case .idle:
            switch lateness(of: sentUnder) {
            case .succeededSince: return .requeueNow
            case .failedSince: return .failNow
            case .current: break
            }
            if alreadyRequeued { return .deliverNow }
            if let loopGuard, lastRunSucceeded == true {
                if versionAccepted {
                    // What the last run produced worked: this need is new, not a loop.
                    runStarts.removeAll()
                } else {
                    runStarts.removeAll { $0.duration(to: now) > loopGuard.window }
                    if runStarts.count >= loopGuard.maximumRuns { return .refuseLoop(runs: runStarts.count) }
                    runStarts.append(now)
                }
            }
            runCount += 1
            state = .running(run: runCount, waiters: [id], gated: [])
            return .startRun(run: runCount)
        }
    }

    /// A task is about to be intercepted or sent. Returns `true` if it must wait for the
    /// running work (it is then recorded as gated).
    mutating func gate(_ id: TaskID) -> Bool {
        guard case .running(let run, let waiters, var gated) = state else { return false }
        state = .idle  // keeps `gated` uniquely referenced: appending does not copy it
        gated.append(id)
        state = .running(run: run, waiters: waiters, gated: gated)
        return true
    }

    mutating func runFinished(run: Int, succeeded: Bool) -> RunEnd? {
        guard case .running(let current, let waiters, let gated) = state, current == run else { return nil }
        state = .idle
        lastRunSucceeded = succeeded
        if succeeded {
            version += 1
            versionAccepted = false
        } else {
            failures += 1
        }
        return RunEnd(waiters: waiters, gated: gated)
    }

    /// A task whose headers were decided under `sentUnder` got an answer that needed no reactor
    /// (its transfer ended and it was answered as is): if they were decided under the current
    /// version, what the latest successful run produced works, and the loop guard's streak ends
    /// at the next run. Answers to older headers say nothing about the current version. Cheap,
    /// on every answered task; does nothing without a loop guard.
    mutating func outcomeAccepted(sentUnder: Stamp) {
        guard loopGuard != nil, !versionAccepted, sentUnder.version == version else { return }
        versionAccepted = true
    }

    /// Whether ``outcomeAccepted(sentUnder:)`` can change anything: the reactor has a loop guard.
    var guardsLoops: Bool { loopGuard != nil }

    /// A waiting or gated task was cancelled. Returns whether it was found.
    mutating func remove(_ id: TaskID) -> Bool {
        guard case .running(let run, var waiters, var gated) = state else { return false }
        state = .idle  // keeps both lists uniquely referenced while they change
        let before = waiters.count + gated.count
        waiters.removeAll { $0 == id }
        gated.removeAll { $0 == id }
        state = .running(run: run, waiters: waiters, gated: gated)
        return waiters.count + gated.count != before
    }
}
