import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Sees the outcome of every attempt of every task, takes none and changes nothing: what a
/// circuit breaker, a rate limiter's `Retry-After` pause and a metrics recorder need.
///
/// A reactor is asked whether it wants an outcome, and the first that does takes it; an observer
/// is only told. The manager finds observers among the parts it is given (an interceptor or a
/// reactor that conforms, as `CircuitBreaker` and `RateLimiter` do, wrapped in
/// ``PerRequestInterceptor`` or ``PerRequestReactor`` or not) and takes others on their
/// own (``URLTaskManager/init(interceptors:reactors:observers:configuration:delegate:delegateQueue:options:)``);
/// an instance given more than once is told once.
///
/// The manager guarantees:
/// - **Every outcome, exactly once**: each final response head and each transport failure that
///   ends an attempt before its head, every attempt included (the 503 a `RetryReactor`
///   retries, the 401 a refresh takes): an observer needs no placement among the reactors.
/// - **Each task's end, for the observers that ask** (``observesEnds``): told once, after the
///   task's outcomes, with what its caller receives (``observeEnd(of:error:)``), so a part can
///   judge a host by what callers finally get rather than by attempts another part took over.
/// - **Off URLSession's queue, in order**: observers run one outcome at a time, in the order the
///   outcomes arrived, on a serial queue of the manager's own, never on the queue corelibs runs
///   every session's callbacks on. A slow observer delays the tasks of its own manager only
///   (their ends, see below), never another session. Those ends wait for it past the tasks'
///   `timeoutInterval`: the answer came in time, and a task is not timed out while its outcome
///   waits to be observed. `OutcomeObserverTests` shows it over 127.0.0.1: behind three
///   outcomes an observer holds for 1 s each, a request with a 1 s timeout reaches its caller
///   as a 200 once they are observed, while a request of another manager made at the same moment
///   is not held up (the times: <doc:Performance>, "Figures behind other choices").
/// - **Seen before the caller hears the end**: a task's caller receives its end (its last byte,
///   its error) only after every observer has been told every outcome of that task. A breaker
///   that opens on the fifth failure therefore refuses a sixth request sent after the fifth
///   answer came back: no race. Likewise a task sent again after an outcome (a retry, a followed
///   redirect) goes through the interceptors only once that outcome was observed.
///
/// ```swift
/// final class StatusCounter: URLTaskOutcomeObserver, @unchecked Sendable {  // `counts` is guarded by `lock`.
///     private let lock = NSLock()
///     private var counts: [Int: Int] = [:]
///     func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
///         guard let status = outcome.statusCode else { return }
///         lock.withLock { counts[status, default: 0] += 1 }
///     }
/// }
/// let manager = URLTaskManager(observers: [StatusCounter()])
/// ```
public protocol URLTaskOutcomeObserver: Sendable {
    /// Told of one attempt's outcome. `task` is the task as it was sent (its request with the
    /// interceptors' headers, its ``URLTask/attempt``). Keep it quick: the end of every task
    /// of this manager waits for the observers ahead of it. Create, resume or cancel no task of
    /// this manager's session from here and wait for none (its end would wait for this call).
    func observe(_ outcome: URLTaskOutcome, of task: URLTask)

    /// Whether the observer wants ``observeEnd(of:error:)``. `false` by default, so a manager
    /// whose observers do not want ends spends nothing on them.
    var observesEnds: Bool { get }

    /// Told once when a task ends, after every outcome of it and before its caller hears the end
    /// (on the same queue, in the same order). `error` is what the caller receives, `nil` when it
    /// receives a response.
    ///
    /// An attempt's outcome is not the task's: a 503 that a retry turns into a 200, a connection
    /// refused that an offline hold waits out. A part that judges a host by what its callers
    /// finally get (a circuit breaker) decides here, on the last outcome it was told of for this
    /// task, and ignores the attempts another part took over.
    func observeEnd(of task: URLTask, error: (any Error)?)

    /// Told that `task`'s attempt sends nothing: it joined the transfer of an identical request
    /// (``TransferSharing``) and will receive that transfer's answer as its outcome. On the same
    /// queue as the outcomes, before this attempt's outcome. For a part that counts what goes on
    /// the wire (a rate limiter gives the attempt's token back). Does nothing unless implemented.
    func observeJoinedTransfer(of task: URLTask)
}

extension URLTaskOutcomeObserver {
    /// `false`: ends are not wanted.
    public var observesEnds: Bool { false }

    /// Nothing.
    public func observeEnd(of task: URLTask, error: (any Error)?) {}

    /// Does nothing: most observers count outcomes, and a joined attempt has one as any other.
    public func observeJoinedTransfer(of task: URLTask) {}
}

/// A manager's observers and the serial queue they run on; `nil` in a pipeline without any, so
/// an outcome costs nothing then.
final class OutcomeObservers: Sendable {
    let observers: [any URLTaskOutcomeObserver]
    /// The observers that want each task's end (``URLTaskOutcomeObserver/observesEnds``).
    private let endObservers: [any URLTaskOutcomeObserver]
    /// Whether any observer wants ends: otherwise a task's end costs no hop onto the queue.
    var observesEnds: Bool { !endObservers.isEmpty }
    /// Runs each piece of work after the ones given before, off the caller's thread: the
    /// manager's serial queue (the randomized model's own FIFO).
    private let enqueue: @Sendable (@escaping @Sendable () -> Void) -> Void

    /// The observers among `parts`, each instance once, in the order given, on a serial queue of
    /// their own; `nil` when none is.
    convenience init?(parts: [Any]) {
        let queue = DispatchQueue(label: "URLTaskManager.outcome-observers")
        self.init(parts: parts) { queue.async(execute: $0) }
    }

    /// The observers among `parts`, told on `enqueue`, which must run its work in order.
    init?(parts: [Any], enqueue: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) {
        var seen: Set<ObjectIdentifier> = []
        var observers: [any URLTaskOutcomeObserver] = []
        for part in parts {
            guard let observer = part as? any URLTaskOutcomeObserver else { continue }
            if type(of: observer) is AnyClass, !seen.insert(ObjectIdentifier(observer as AnyObject)).inserted { continue }
            observers.append(observer)
        }
        guard !observers.isEmpty else { return nil }
        self.observers = observers
        self.endObservers = observers.filter(\.observesEnds)
        self.enqueue = enqueue
    }

    /// Tells every observer of `outcome` on the manager's queue, after the outcomes told before,
    /// then calls `observed`.
    /// Tells every observer, on the manager's queue, that `task`'s attempt joined a shared
    /// transfer. Nothing waits for it: the attempt's outcome is queued after it.
    func observeJoinedTransfer(of task: URLTask) {
        enqueue { [observers] in
            for observer in observers { observer.observeJoinedTransfer(of: task) }
        }
    }

    func observe(_ outcome: URLTaskOutcome, of task: URLTask, observed: @escaping @Sendable () -> Void) {
        enqueue { [observers] in
            for observer in observers { observer.observe(outcome, of: task) }
            observed()
        }
    }

    /// Tells every observer that wants ends that `task` ended (`error`, or a response) on the
    /// manager's queue, after its outcomes, then calls `observed`.
    func observeEnd(of task: URLTask, error: (any Error)?, observed: @escaping @Sendable () -> Void) {
        enqueue { [endObservers] in
            for observer in endObservers { observer.observeEnd(of: task, error: error) }
            observed()
        }
    }
}

/// What of a task waits for its outcomes to be observed: its end, so that its caller hears it
/// only once every observer saw its outcomes, and its next attempt, so that a part that observes
/// (a breaker opened by this very outcome) decides about that attempt knowing it.
///
/// The task's storage holds it under its lock (for the transition only) and performs the
/// returned action with the lock released. `Completion` is what the task's end is made of,
/// `Resend` what sends it again.
struct OutcomeObservationStateMachine<Completion, Resend> {
    private enum Waiter {
        case finish(Completion)
        case resend(Resend)
    }

    private enum State {
        /// Every outcome queued so far was observed (or none was).
        case observed
        /// `count` outcomes are on the observers' queue; nothing waits for them.
        case pending(count: Int)
        /// `count` outcomes are on the observers' queue, and the task's end or next attempt waits.
        case waiting(count: Int, Waiter)
        /// The end was handed out; outcomes that still arrive are observed, waited for by nobody.
        case finished
    }

    enum FinishAction {
        /// Tell the caller now.
        case finishNow(Completion)
        /// Tell nobody yet: the last observation hands the completion back.
        case wait
    }

    enum ResendAction {
        /// Send the task again now.
        case resendNow(Resend)
        /// Not yet: the last observation hands it back.
        case wait
        /// Never: the task has ended meanwhile.
        case drop
    }

    enum ObservedAction {
        case none
        /// The last outcome the end waited for was observed: tell the caller now.
        case finish(Completion)
        /// The last outcome the next attempt waited for was observed: send it now.
        case resend(Resend)
    }

    private var state = State.observed

    /// An outcome goes to the observers' queue.
    mutating func outcomeQueued() {
        switch state {
        case .observed: state = .pending(count: 1)
        case .pending(let count): state = .pending(count: count + 1)
        case .waiting(let count, let waiter):
            // A transfer stopped as the task failed (a timeout, an abort) may still answer.
            state = .waiting(count: count + 1, waiter)
        case .finished: break
        }
    }

    /// The observers were told of one outcome.
    mutating func outcomeObserved() -> ObservedAction {
        switch state {
        case .observed:
            assertionFailure("an outcome observed that was never queued")
            return .none
        case .pending(let count):
            state = count == 1 ? .observed : .pending(count: count - 1)
            return .none
        case .waiting(let count, let waiter):
            if count > 1 {
                state = .waiting(count: count - 1, waiter)
                return .none
            }
            switch waiter {
            case .finish(let completion):
                state = .finished
                return .finish(completion)
            case .resend(let resend):
                state = .observed
                return .resend(resend)
            }
        case .finished:
            return .none
        }
    }

    /// The task ended with `completion`. A resend still waiting is dropped: the task is over.
    mutating func finishRequested(_ completion: Completion) -> FinishAction {
        switch state {
        case .observed:
            state = .finished
            return .finishNow(completion)
        case .pending(let count), .waiting(let count, .resend):
            state = .waiting(count: count, .finish(completion))
            return .wait
        case .waiting(_, .finish), .finished:
            // The task's machine completes a task once.
            assertionFailure("a task ended twice")
            return .wait
        }
    }

    /// The task is to be sent again after an outcome (a reactor's work succeeded, a challenge
    /// was answered with a credential).
    mutating func resendRequested(_ resend: Resend) -> ResendAction {
        switch state {
        case .observed:
            return .resendNow(resend)
        case .pending(let count):
            state = .waiting(count: count, .resend(resend))
            return .wait
        case .waiting(_, .resend):
            assertionFailure("a task sent again twice at once")
            return .drop
        case .waiting(_, .finish), .finished:
            return .drop
        }
    }
}
