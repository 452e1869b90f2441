import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// 0.2.0's spellings that no longer compile, kept so that the compiler says what to write instead
// (the "Migrating from 0.2" article lists every change with before/after code). Each is
// `unavailable` where its meaning is gone, and a deprecated forwarder where it is unchanged.

extension URLTaskReactorConfiguration {
    /// 0.2's choice between shared and per-task work, replaced by ``Mode``.
    @available(
        *, unavailable,
        message:
            "a reactor runs in one Mode now: .singleFlight is mode: .singleFlight(loopGuard:afterwards:) or .refresh(loopGuard:), .perTask is mode: .perTask(afterwards:)"
    )
    public enum Sharing: Sendable {
        /// One run at a time for every task that needs it.
        case singleFlight
        /// Each task runs the work on its own.
        case perTask
    }

    /// 0.2's `sharing` field, replaced by ``mode``.
    @available(*, unavailable, message: "use mode: .singleFlight(loopGuard:afterwards:), .refresh(loopGuard:) or .perTask(afterwards:)")
    public var sharing: Sharing {
        get { fatalError("unavailable") }
        set { fatalError("unavailable") }
    }

    /// 0.2's memberwise initializer: five settings combined freely, some combinations the engine
    /// never honoured. Write ``init(mode:timeout:maximumReactionsPerTask:exempts:)`` instead.
    @available(
        *, unavailable,
        message:
            "use init(mode:timeout:maximumReactionsPerTask:exempts:): sharing: .perTask is mode: .perTask(afterwards: .sendAgain); holdsNewTasks: true is mode: .refresh(loopGuard:); requeue: false is afterwards: .deliverResponse; reintercept: false is afterwards: .sendAgainUnchanged; loopGuard: is the mode's loopGuard:"
    )
    public init(
        sharing: Sharing = .singleFlight,
        requeue: Bool = true,
        reintercept: Bool = true,
        holdsNewTasks: Bool = false,
        timeout: Duration? = .seconds(60),
        maximumReactionsPerTask: Int = 3,
        loopGuard: LoopGuard? = LoopGuard(maximumRuns: 10, window: .seconds(10)),
        exempts: @escaping @Sendable (URLRequest) -> Bool = { _ in false }
    ) {
        fatalError("unavailable")
    }

    /// Whether tasks not sent yet wait while the work runs: only ``Mode/refresh(loopGuard:)``.
    /// Read-only (0.2 let you set it: set the ``mode`` instead).
    @available(*, deprecated, message: "Read `mode`: only `.refresh(loopGuard:)` holds new tasks.")
    public var holdsNewTasks: Bool {
        get { mode.holdsNewTasks }
        @available(*, unavailable, message: "use mode = .refresh(loopGuard:) to hold new tasks while the work runs")
        set { fatalError("unavailable") }
    }

    /// Whether a task is sent again after the work succeeds. Read-only (0.2 let you set it: set
    /// the mode's ``Afterwards`` instead).
    @available(*, deprecated, message: "Read `mode.afterwards`: every case but `.deliverResponse` sends again.")
    public var requeue: Bool {
        get { mode.afterwards != .deliverResponse }
        @available(*, unavailable, message: "use the mode's afterwards: requeue = false is afterwards: .deliverResponse")
        set { fatalError("unavailable") }
    }

    /// Whether a task sent again goes through the interceptors first. Read-only (0.2 let you set
    /// it: set the mode's ``Afterwards`` instead).
    @available(*, deprecated, message: "Read `mode.afterwards`: `.sendAgain` runs the interceptors again.")
    public var reintercept: Bool {
        get { mode.afterwards == .sendAgain }
        @available(*, unavailable, message: "use the mode's afterwards: reintercept = false is afterwards: .sendAgainUnchanged")
        set { fatalError("unavailable") }
    }
}

extension TransferSharing.Configuration {
    /// 0.2's coalescing configuration (`CoalescingInterceptor.Configuration`): requests told
    /// apart by a few headers, answers shared up to a size. Now every header tells requests apart
    /// (but ``headersThatNeverIdentifyACaller``) and an answer of any size is shared.
    @available(
        *, unavailable,
        message:
            "use init(methods:headersThatNeverIdentifyACaller:lateJoinLimit:): every header tells requests apart now (drop answerChangingHeaders:), and answers of any size are shared (drop maximumSharedBodySize:; lateJoinLimit: bounds a late join)"
    )
    public init(methods: Set<String> = ["GET", "HEAD"], answerChangingHeaders: Set<String>, maximumSharedBodySize: Int = 4 << 20) {
        fatalError("unavailable")
    }

    /// 0.2's coalescing configuration without `answerChangingHeaders`.
    @available(
        *, unavailable,
        message:
            "use init(methods:headersThatNeverIdentifyACaller:lateJoinLimit:): answers of any size are shared now (drop maximumSharedBodySize:; lateJoinLimit: bounds a late join)"
    )
    public init(methods: Set<String> = ["GET", "HEAD"], maximumSharedBodySize: Int) {
        fatalError("unavailable")
    }

    /// 0.2's headers that told requests apart.
    @available(*, unavailable, message: "every header tells requests apart now: use headersThatNeverIdentifyACaller for those that do not")
    public var answerChangingHeaders: Set<String> { fatalError("unavailable") }

    /// 0.2's largest shared answer.
    @available(*, unavailable, message: "answers of any size are shared now: use lateJoinLimit to bound a late join")
    public var maximumSharedBodySize: Int { fatalError("unavailable") }
}

extension Set where Element == URLTaskPolicy.ComponentType {
    /// 0.2 named a policy's parts by their type's name.
    @available(
        *, unavailable,
        message: "a policy names parts by type now: use policy.skipsInterceptor(X.self), skipsReactor(X.self) or adds(X.self)"
    )
    public func contains(_ name: String) -> Bool { fatalError("unavailable") }
}

/// A part that was a reactor in 0.2 and no longer is (`CircuitBreaker`, `RateLimiter`): its
/// library keeps an unavailable conformance to ``URLTaskReactor`` so that 0.2's `reactors: [breaker]`
/// is a diagnostic naming the fix. A dynamic cast still finds that conformance, so the manager's
/// assembly check asks this marker before it calls such a part "both an interceptor and a
/// reactor".
package protocol NoLongerAReactor: AnyObject {}
