import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Looks at how a task ended and may run shared work before the task is sent again.
///
/// A reactor is the "after" half of the pipeline. When a task's response head arrives (or
/// its transport fails), the manager asks each reactor in order ``shouldReact(to:of:)``; the
/// first that says yes takes the task, so a reactor placed after it never sees that outcome (a
/// reactor whose place matters says so with ``reactorPlacement``, and the manager checks it).
/// The task's response is then not shown to the caller: the body is collected, and
/// ``react(to:body:of:)`` runs. In a shared mode (``URLTaskReactorConfiguration/Mode``: the
/// default, and what a token refresh wants) the work runs ONCE for every task that needs
/// it while it runs: a hundred 401s wait on one refresh. When it succeeds the waiting tasks
/// are requeued through the interceptors (which now apply the fresh token); when it throws,
/// every one of them fails with what it threw, by ``URLTaskError``'s rule: a `URLError` as
/// itself, a ``URLTaskError`` as it is, anything else wrapped in
/// ``URLTaskError/Code-swift.struct/reactorFailed``.
///
/// ```swift
/// struct RefreshOn401: URLTaskReactor {
///     let tokens: TokenStore
///     var configuration: URLTaskReactorConfiguration { .authentication }
///     func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
///         outcome.statusCode == 401
///     }
///     func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
///         try await tokens.refresh()
///     }
/// }
/// ```
///
/// **Late failures.** A task sent with the old token may fail after a refresh already
/// succeeded. The manager remembers which run of each reactor a task's headers were decided
/// under (what Alamofire calls the credential version; recorded when its interceptors begin);
/// such a task is requeued at once, without running the work again. Likewise, when the only
/// runs that ended since then failed, the task fails at once with the last run's error: the
/// responses already on their way when a refresh failed do not each start another refresh.
///
/// **The reactor's own requests.** ``react(to:body:of:)`` may use any session. A plain
/// `URLSession` is simplest for a token endpoint. If the work uses the manager's own session,
/// list its requests in ``URLTaskReactorConfiguration/exempts``: in
/// ``URLTaskReactorConfiguration/Mode/refresh(loopGuard:)`` mode they would otherwise wait for the very work
/// that sent them (the run would end in ``URLTaskError/Code-swift.struct/reactorTimedOut``), and
/// a 401 from the token endpoint would join the run it belongs to.
///
/// A part that only needs to know how tasks went (a breaker, metrics) is an
/// ``URLTaskOutcomeObserver`` instead: it sees every outcome, the ones a reactor takes included,
/// off URLSession's queue.
public protocol URLTaskReactor: Sendable {
    /// How the manager runs this reactor. Defaults to ``URLTaskReactorConfiguration/default``.
    var configuration: URLTaskReactorConfiguration { get }

    /// Whether this outcome needs this reactor. Called for every response head and transport
    /// error, so keep it cheap and synchronous. On Linux it runs on the queue URLSession uses for
    /// every session's bookkeeping: create, resume or cancel no URLSession task from here (a
    /// `sync` onto that queue), and never block.
    func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool

    /// The work: refresh a token, wait out a back-off, reset a connection. Throwing fails
    /// every task waiting on this run.
    ///
    /// - Parameters:
    ///   - outcome: What the task that started this run received.
    ///   - body: That response's body (up to 1 MiB), empty for transport errors.
    ///   - task: The task that started this run.
    func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws

    /// The version of the state this reactor's work renews (the credential version) that
    /// `task`'s headers carry, for a reactor whose state also changes outside its runs: a sign-in,
    /// a token renewed before it expired. `nil`, the default, lets the engine count the reactor's
    /// successful runs instead.
    ///
    /// Whatever the source, the engine uses this one version for every decision: a response
    /// to headers older than ``currentCredentialVersion()`` is late (the task is sent again
    /// without running the work), a task about to leave with older headers is intercepted
    /// again, and a task sent again with the current version that meets the same reaction gets
    /// the server's answer. Called without any lock held; keep it cheap and synchronous, and, as
    /// for ``shouldReact(to:of:)``, create or cancel no URLSession task from here.
    func credentialVersion(of task: URLTask) -> Int?

    /// The current version of the state this reactor's work renews; `nil`, the default, when the
    /// reactor keeps none (see ``credentialVersion(of:)``).
    ///
    /// Read just before a task leaves and when an outcome needs the reactor; the engine keeps the
    /// highest version it was told, so a task judged later without a reading of its own (one
    /// handed a connection slot by another task's end) is judged against it.
    func currentCredentialVersion() -> Int?

    /// Where this reactor belongs among the others, when the order decides whether it works:
    /// `OfflineHold` is ``URLTaskPlacement/late``, `RetryReactor`, the fallback,
    /// ``URLTaskPlacement/last``. The
    /// manager checks the order it is given against every reactor's placement and stops at init
    /// when it is wrong. Defaults to ``URLTaskPlacement/anywhere``: not checked, it is asked
    /// wherever you put it.
    var reactorPlacement: URLTaskPlacement { get }
}

extension URLTaskReactor {
    public var configuration: URLTaskReactorConfiguration { .default }
    public var reactorPlacement: URLTaskPlacement { .anywhere }
    public func credentialVersion(of task: URLTask) -> Int? { nil }
    public func currentCredentialVersion() -> Int? { nil }
}

/// How one send of a task ended, as reactors see it.
public enum URLTaskOutcome: Sendable {
    /// The server answered; the body follows.
    case response(HTTPURLResponse)
    /// The transport failed (connection refused, timed out, ...).
    case failure(any Error)

    /// The response's status code, or `nil` for a transport failure.
    public var statusCode: Int? {
        if case .response(let response) = self { return response.statusCode }
        return nil
    }

    /// The `URLError` code of a transport failure, or `nil`.
    public var urlErrorCode: URLError.Code? {
        if case .failure(let error) = self { return (error as? URLError)?.code }
        return nil
    }
}

/// How the manager runs one reactor: a ``Mode`` (who shares the work, whether new tasks wait for
/// it, what happens to the tasks afterwards), and limits that hold in every mode.
///
/// The mode is one choice among a few named ones, so a combination the engine cannot honour
/// (work per task that holds new tasks, a gate whose waiting tasks go out with the headers the
/// work replaced) cannot be written.
public struct URLTaskReactorConfiguration: Sendable {
    /// Who runs the reactor's work, and which tasks wait for it.
    public enum Mode: Sendable {
        /// Shared single-flight work that renews what the interceptors put on requests (a token
        /// refresh): one run at a time for every task that needs it, tasks not sent yet wait
        /// for it (so none goes out with the state it is about to replace), and every waiting
        /// task is then intercepted again and sent. `loopGuard` stops a run that keeps being
        /// needed without helping (see ``LoopGuard``); `nil` for none.
        case refresh(loopGuard: LoopGuard?)
        /// Shared single-flight work that holds no other task (a connection reset, a wait for
        /// the network): one run at a time for every task that needs it; `afterwards` says what
        /// happens to those tasks when it succeeds.
        case singleFlight(loopGuard: LoopGuard?, afterwards: Afterwards)
        /// Work each task runs on its own (a retry's back-off delay): no run is shared, nothing
        /// waits for it but the task itself, so there is no gate and no loop to guard.
        case perTask(afterwards: Afterwards)

        /// The loop guard of a shared mode; `nil` for ``perTask(afterwards:)``.
        public var loopGuard: LoopGuard? {
            switch self {
            case .refresh(let loopGuard), .singleFlight(let loopGuard, _): loopGuard
            case .perTask: nil
            }
        }

        /// What happens to a task after the work it waited on succeeded.
        public var afterwards: Afterwards {
            switch self {
            case .refresh: .sendAgain
            case .singleFlight(_, let afterwards), .perTask(let afterwards): afterwards
            }
        }

        /// Whether tasks share one run of the work.
        var isShared: Bool {
            if case .perTask = self { return false }
            return true
        }

        /// Whether tasks not sent yet wait while a run is in flight.
        var holdsNewTasks: Bool {
            if case .refresh = self { return true }
            return false
        }
    }

    /// What happens to a task after the work it waited on succeeded (when the work throws, the
    /// task fails with what it threw, in every mode).
    public enum Afterwards: Sendable, Equatable {
        /// Through the interceptors again, then sent (so it carries what the work renewed).
        case sendAgain
        /// Sent again with the request it had, without running the interceptors.
        case sendAgainUnchanged
        /// Not sent again: the caller receives the response that needed the work.
        case deliverResponse
    }

    /// Guards against a reactor that keeps running without helping (a refresh whose token is
    /// always refused).
    ///
    /// It counts refusals, not runs: a run counts only when what the successful run before it
    /// produced was never accepted, that is, no task whose headers were decided after that run
    /// got an answer that needed no reactor. A token that works until it is revoked (or expires
    /// early) is refreshed every time it is refused, however often; a token endpoint whose tokens
    /// the API always refuses trips the guard after `maximumRuns` such runs within `window`
    /// (`maximumRuns + 1` runs in all), and each task that would start another run then fails
    /// with ``URLTaskError/Code-swift.struct/reactionLoop``, until the oldest counted run leaves
    /// the window or an answer is accepted. Runs that follow a failed run are not counted.
    public struct LoopGuard: Sendable {
        /// Runs whose predecessor's product was refused allowed within `window`. Zero or less
        /// refuses every such run.
        public var maximumRuns: Int
        /// The sliding window. Zero or less counts no run; any length is safe (it is only
        /// compared, never added to a clock).
        public var window: Duration

        /// Allows `maximumRuns` counted runs within `window`.
        public init(maximumRuns: Int, window: Duration) {
            self.maximumRuns = maximumRuns
            self.window = window
        }
    }

    /// Who runs the work, which tasks wait for it, and what happens to them afterwards.
    public var mode: Mode
    /// The longest the work may run; then every waiting task fails with
    /// ``URLTaskError/Code-swift.struct/reactorTimedOut``, even if the work ignores its
    /// cancellation (it is cancelled, left to finish, and its result dropped). `nil` for no limit.
    /// Negative counts as zero and a limit beyond 100 years as 100 years (`Task.sleep` traps
    /// beyond `Int64` seconds from now).
    public var timeout: Duration?
    /// How many times one task may trigger this reactor before it fails with
    /// ``URLTaskError/Code-swift.struct/tooManyAttempts`` (only a task sent again can trigger it
    /// twice). Zero or less fails every task this reactor would take.
    public var maximumReactionsPerTask: Int
    /// Requests this reactor neither holds nor reacts to: the requests its own work sends
    /// through the manager's session (a token endpoint).
    ///
    /// Asked once per task, as the task starts, of the caller's request (with the session's
    /// additional headers, before any interceptor), and the answer holds for the task's whole
    /// life, resends included.
    public var exempts: @Sendable (URLRequest) -> Bool

    /// Creates a configuration; the defaults are those of ``default``.
    public init(
        mode: Mode = .singleFlight(loopGuard: LoopGuard(maximumRuns: 10, window: .seconds(10)), afterwards: .sendAgain),
        timeout: Duration? = .seconds(60),
        maximumReactionsPerTask: Int = 3,
        exempts: @escaping @Sendable (URLRequest) -> Bool = { _ in false }
    ) {
        self.mode = mode
        self.timeout = timeout
        self.maximumReactionsPerTask = maximumReactionsPerTask
        self.exempts = exempts
    }

    /// The mode's loop guard (see ``Mode/loopGuard``); `nil` for work per task.
    ///
    /// Read-only: the loop guard is the mode's. Its setter is 0.2's spelling, kept unavailable so
    /// that `configuration.loopGuard = g` says what to write instead (Migration/ZeroTwo.swift).
    public var loopGuard: LoopGuard? {
        get { mode.loopGuard }
        @available(
            *, unavailable,
            message:
                "the loop guard is the mode's: use mode = .refresh(loopGuard: g) or .singleFlight(loopGuard: g, afterwards: .sendAgain)"
        )
        set { fatalError("unavailable") }
    }

    /// Single flight with a loop guard of 10 in 10 seconds, sent again through the interceptors,
    /// no gate.
    public static var `default`: Self { Self() }

    /// For credential refresh (``Mode/refresh(loopGuard:)``): holds new tasks while refreshing,
    /// at most two reactions per task (a token refused twice in a row is not a stale token), and
    /// a loop guard of 3 in 10 seconds that counts refreshed tokens the server refused, not
    /// refreshes: a token revoked every few seconds is refreshed every time, while a token
    /// endpoint whose tokens the API always refuses stops after 4 refreshes, the last 3 within
    /// 10 seconds (see ``LoopGuard``).
    public static var authentication: Self {
        Self(mode: .refresh(loopGuard: LoopGuard(maximumRuns: 3, window: .seconds(10))), timeout: .seconds(30), maximumReactionsPerTask: 2)
    }

    /// For retries (``Mode/perTask(afterwards:)``, sent again through the interceptors): each
    /// task waits on its own, no limit on the work's time (the policy limits attempts itself).
    public static var retry: Self {
        Self(mode: .perTask(afterwards: .sendAgain), timeout: nil, maximumReactionsPerTask: .max)
    }
}
