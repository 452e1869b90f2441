import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The whole life of one task through the pipeline, without I/O: where it is, and what each
/// stretch of that life carries (the interceptor or reaction running for it, its batch, the
/// transfer on the network and what its answer is becoming), beside what outlives every state
/// (the request the interceptors start from, its body, the budgets, the wait against the
/// request's timeout).
///
/// ```
///  created ─start─> [gated] ─> intercepting(0) ─execute─> ... intercepting(n-1) ─> awaitingConnection
///                                   │ hold                                           │ slot
///                                   v                                          transferring: sending
///                                   │                                                │ head
///                                   v                                   ┌────────────┴─────────────┐
///                                held(k) ─release─> intercepting(k+1)   v                          v
///                                                                   receiving ─end─> completed   collecting(reactor r)
///                                                                                                  │ end
///                                                                                                  v
///                        intercepting(0) or awaitingConnection  <─requeue─  reacting(r) ─fail─> completed
/// ```
/// `sending`, `receiving` and `collecting` (and `redirecting`, `challenged`, `rejecting`) are the
/// phases of one `transferring` state, which holds the transfer's inner task once recorded.
/// In `awaitingConnection` the task waits for admission (``AdmissionStateMachine``): a slot, and
/// the check that its headers are still current. A task whose headers were decided before a
/// holding reactor's run that has ended since goes back to the gates (``headersStale()``)
/// instead of out with a stale token; one that meets a run going waits at its gate
/// (``admissionGated(reactor:)``).
/// A redirect met while sending is the pipeline's to follow: after the caller's delegate
/// answers (``redirectAnswered(_:refused:)``) the rest of that transfer is dropped (`redirecting`)
/// and the task starts again from the gates with the new request. A 401 with an authentication
/// challenge is collected (`challenged`), then the caller's side is asked (`consultingChallenge`):
/// a credential restarts the task the same way.
///
/// Each event returns an action type of its own, declared beside it and holding only what that
/// event can lead to. The ``Engine``, which holds every task's machine beside admission, turns
/// it into the task's action in the same section; ``TaskRun`` performs that once the lock is
/// released.
/// Events that other threads send (a transport callback, a batch released, a run finished, a
/// timer) may find the task already ended, or moved on by a race that each method names: those
/// are ignored. An event that no interleaving can bring in a state is a bug in the storage, and
/// stops the program.
///
/// The events are grouped by phase, one extension each, in this one file (the state stays
/// private to it): on the way to the network, the transfer, reactions and challenges, the end.
struct TaskStateMachine {
    // MARK: State

    private enum State {
        case created
        /// Checking the gates, or waiting at reactor `gate`'s.
        case gated(gate: Int?)
        /// Interceptor `index` runs; `work` is its Swift task once recorded (``workStarted(_:)``).
        case intercepting(index: Int, work: Task<Void, Never>?)
        /// In interceptor `index`'s batch; a hold timer set for `generation` may fail it.
        case held(index: Int, generation: Int)
        case awaitingConnection
        /// Attempt `budgets.attempt` is on the network.
        case transferring(Transfer)
        /// Reactor `reactor` decides about `outcome` (and the `body` that came with it); `work`
        /// is a per-task reaction's Swift task once recorded (``workStarted(_:)``).
        case reacting(reactor: Int, outcome: URLTaskOutcome, body: Data, work: Task<Void, Never>?)
        /// A 401's challenge, its body collected, is with the caller's side.
        case consultingChallenge(response: HTTPURLResponse, body: Data)
        /// Ended. `pendingTransfer` is the attempt whose transfer was still being created as the
        /// task ended (a cancel, an abort): its inner task is stopped once recorded
        /// (``transferStarted(_:attempt:)``). `nil` when no transfer is left to stop: none was
        /// running, it was known and stopped, or it ended on its own.
        case completed(pendingTransfer: Int?)
    }

    /// One attempt on the network: its inner task, and what its answer is becoming.
    private struct Transfer {
        enum Phase {
            /// Sent; no final response head yet.
            case sending
            /// The final head went to the caller; its body follows it.
            case receiving
            /// A reactor wants the answer: its body is collected. `whole`: the body may be
            /// delivered to the caller, so none of it is dropped.
            case collecting(reactor: Int, response: HTTPURLResponse, body: Data, whole: Bool)
            /// The transfer met a redirect the pipeline follows itself (`to`), or one it refuses
            /// (`to == nil`, failing with `failure`); the rest of the transfer is dropped.
            case redirecting(to: URLRequest?, failure: (any Error)?)
            /// A 401 with an authentication challenge: its body is collected, then the caller's
            /// side is asked.
            case challenged(response: HTTPURLResponse, body: Data)
            /// The final answer is not one the caller accepts (``ResponseValidation``): the start
            /// of its body is kept for the error, which the caller gets when the transfer ends.
            case rejecting(response: HTTPURLResponse, reason: String, body: Data)

            /// What became of a chunk the phase collects (``collect(_:heldBodyLimit:)``).
            enum Collected {
                /// Kept (or dropped, for a phase that needs nothing more).
                case kept
                /// The phase has all it needs: the rest of the transfer is not wanted.
                case enough
                /// A body held whole grew past its limit: the task cannot deliver it.
                case tooLarge
            }

            /// Adds a chunk to the body this phase collects, within its limit: a body that may
            /// reach the caller is held whole up to `heldBodyLimit`; a reactor's answer that never
            /// reaches the caller keeps its first ``TaskStateMachine/reactionBodyLimit`` bytes, and
            /// a rejected answer its first ``ResponseValidation/bodyPrefixLimit`` bytes.
            mutating func collect(_ data: Data, heldBodyLimit: Int) -> Collected {
                switch self {
                case .collecting(let reactor, let response, var body, let whole):
                    self = .sending  // keep `body` uniquely referenced while appending
                    defer { self = .collecting(reactor: reactor, response: response, body: body, whole: whole) }
                    if whole {
                        guard body.count + data.count <= heldBodyLimit else { return .tooLarge }
                        body.append(data)
                        return .kept
                    }
                    body.append(data.prefix(TaskStateMachine.reactionBodyLimit - body.count))
                    return body.count < TaskStateMachine.reactionBodyLimit ? .kept : .enough
                case .challenged(let response, var body):
                    guard body.count + data.count <= heldBodyLimit else { return .tooLarge }
                    self = .sending  // keep `body` uniquely referenced while appending
                    body.append(data)
                    self = .challenged(response: response, body: body)
                    return .kept
                case .rejecting(let response, let reason, var body):
                    self = .sending  // keep `body` uniquely referenced while appending
                    body.append(data.prefix(ResponseValidation.bodyPrefixLimit - body.count))
                    self = .rejecting(response: response, reason: reason, body: body)
                    return body.count < ResponseValidation.bodyPrefixLimit ? .kept : .enough
                case .sending, .receiving, .redirecting:
                    return .kept
                }
            }
        }

        /// The inner task, once recorded (its first callbacks may come before).
        var handle: (any TransferHandle)?
        var phase: Phase
        /// The transfer was stopped because its phase had collected all it needs: the error its
        /// end then reports (the stop's `cancelled`) is not the outcome.
        var stoppedEarly = false

        var isSending: Bool {
            if case .sending = phase { return true }
            return false
        }
    }

    /// What every attempt of the task starts from, and the attempt as shaped so far.
    private struct Context {
        /// The current attempt as the interceptors shaped it so far.
        var task: URLTask
        /// Where the interceptors start on each attempt: the caller's request, or what a followed
        /// redirect or an answered challenge sends instead (without a body: see `body`).
        var base: URLRequest
        /// The body each attempt's interceptors start from: the caller's (a replayable copy of a
        /// stream, see ``start(replayableBody:)``), or what a restart carries.
        var body: URLTaskBody
        /// Whether a body was sent once: a stream cannot be sent again.
        var bodySent = false
        /// Whether the attempt began as a requeue without the interceptors: admission stamps its
        /// headers when it is about to leave. Set until the attempt is sent, even if admission
        /// sends it back through the interceptors meanwhile.
        var restamp = false
    }

    /// What the task may spend over its whole life, whatever state it is in.
    private struct Budgets {
        /// The attempt being prepared or sent; each requeue and restart starts a new one.
        var attempt = 1
        /// Per reactor: how often this task triggered it.
        var reactions: [Int]
        /// Per reactor: whether this task was already sent again after one of its runs succeeded.
        var requeuedBy: [Bool]
        /// Redirects met so far; past ``maximumRedirects`` the task fails, as URLSession's do.
        var redirects = 0
        /// Challenges of this task the caller's side answered with a credential that failed.
        var challengeFailures = 0
        /// Holds so far: each names its timer.
        var holds = 0

        init(reactors: Int) {
            reactions = Array(repeating: 0, count: reactors)
            requeuedBy = Array(repeating: false, count: reactors)
        }
    }

    /// One stretch of the task's life inside the pipeline: from its start, the end of a transfer
    /// it reacts to, or a restart, until it is sent. `armed` once its first wait set the timer.
    /// It spans states (a gate, the interceptors, a batch, the slot queue), so it is kept beside them.
    private struct WaitPhase {
        var generation = 0
        var started: DispatchTime
        var armed = false
    }

    /// Bodies collected for reactors that will not deliver them are kept up to this size (the
    /// reactor sees the first MiB; the caller never sees them).
    static let reactionBodyLimit = 1 << 20
    /// URLSession's own limit (20, as on Darwin).
    static let maximumRedirects = 20

    /// What the task state machine needs to know of one reactor.
    struct ReactorTraits {
        /// Who it is, for errors.
        var component: URLTaskError.Component
        /// How often one task may trigger it.
        var maximumReactions: Int
        /// Whether it gives the caller the response it reacted to (it does not requeue).
        var delivers: Bool
        /// Whether it keeps a credential version of its own: what it reports of the task is read
        /// before the transfer's end hands the task to it (``transferEnded(error:choice:readingKnown:now:)``).
        var reportsVersions: Bool

        init(component: URLTaskError.Component, maximumReactions: Int, delivers: Bool = false, reportsVersions: Bool = false) {
            self.component = component
            self.maximumReactions = maximumReactions
            self.delivers = delivers
            self.reportsVersions = reportsVersions
        }
    }

    /// How the caller hears that the task ended (the caller's own cancel is reported by the
    /// session, not here).
    enum Completion {
        /// The response and its body were forwarded as they came: finish.
        case finish
        /// Answer with a whole response: response, body, then finish.
        case respond(URLResponse, Data)
        /// Complete with this error.
        case fail(any Error)
    }

    // MARK: Configuration

    private let interceptorCount: Int
    /// The answers the caller accepts; `nil` accepts every one.
    private let validation: ResponseValidation?
    /// Interceptors this task skips.
    private let skippedInterceptors: Set<Int>
    /// The largest body held whole for the caller (``URLTaskManager/Options/maximumHeldBodySize``).
    private let heldBodyLimit: Int
    private let reactors: [ReactorTraits]
    /// Whether its covering reactors report credential versions of their own, read as it is
    /// about to leave: ``ProceedAction/acquireConnection(request:restamp:task:)`` then carries
    /// the task as it is.
    private let readsVersionsBeforeSending: Bool
    /// Whether whoever sends it needs the task as it leaves (its `sent` event, sharing, the
    /// reactors and observers asked about its outcomes): ``SendAction/send(request:body:attempt:whole:task:)``
    /// then carries it.
    private let snapshotsWhenSent: Bool
    /// Whether a transport error before the head is an outcome the reactors (or the observers)
    /// are asked about: the manager has reactors or observers.
    private let asksAboutTransportErrors: Bool

    // MARK: The task

    private var state: State = .created
    private var context: Context
    private var budgets: Budgets
    private var waiting: WaitPhase

    /// - Parameters:
    ///   - task: The first attempt, as the interceptors will see it.
    ///   - interceptorCount: The length of the interceptor chain.
    ///   - skipping: Interceptors this task skips (its ``URLTaskPolicy``).
    ///   - reactors: What the machine needs to know of each reactor.
    ///   - validation: The answers the caller accepts (``ResponseValidation``); `nil`, any.
    ///   - heldBodyLimit: The largest body held whole for the caller (a challenge's, a
    ///     delivering reactor's answer); past it the task fails with `responseTooLarge`.
    ///   - now: When the task was created: its first wait counts from here.
    ///   - readsVersionsBeforeSending: Its reactors' reported versions are read before it leaves.
    ///   - snapshotsWhenSent: Its sender needs the task as it leaves.
    ///   - asksAboutTransportErrors: A transport error before the head is an outcome to ask about.
    init(
        task: URLTask, interceptorCount: Int, skipping: Set<Int> = [], reactors: [ReactorTraits] = [],
        validation: ResponseValidation? = nil, heldBodyLimit: Int = URLTaskManager.Options.defaultMaximumHeldBodySize,
        now: DispatchTime = .now(), readsVersionsBeforeSending: Bool = false, snapshotsWhenSent: Bool = false,
        asksAboutTransportErrors: Bool = false
    ) {
        self.asksAboutTransportErrors = asksAboutTransportErrors
        self.readsVersionsBeforeSending = readsVersionsBeforeSending
        self.snapshotsWhenSent = snapshotsWhenSent
        self.heldBodyLimit = heldBodyLimit
        self.context = Context(task: task, base: task.request, body: task.body)
        self.budgets = Budgets(reactors: reactors.count)
        self.interceptorCount = interceptorCount
        self.skippedInterceptors = skipping
        self.validation = validation
        self.reactors = reactors
        self.waiting = WaitPhase(started: now)
    }

    // MARK: Queries

    /// The current attempt as the interceptors shaped it so far.
    var task: URLTask { context.task }

    /// The body each attempt's interceptors start from.
    var body: URLTaskBody { context.body }

    /// The attempt being prepared or sent.
    var attempt: Int { budgets.attempt }

    /// Whether no reactor sent the task again and no credential of the caller's failed yet: its
    /// transfer may be a ``WholeTransfer`` (one whose challenge was refused is sent again,
    /// streamed, and what follows such trouble streams too, rather than being sent twice again).
    var mayTakeWholeTransfer: Bool { budgets.attempt == 1 && budgets.challengeFailures == 0 }

    /// Whether a transport error now would be the task's outcome (no head has arrived); the
    /// transfer's end asks this itself (``transferEnded(error:choice:readingKnown:now:)``).
    var isAwaitingResponseHead: Bool {
        if case .transferring(let transfer) = state { return transfer.isSending }
        return false
    }

    var isCompleted: Bool {
        if case .completed = state { return true }
        return false
    }
}

// MARK: - Events: on the way to the network

extension TaskStateMachine {
    /// What the task does next on its way to the network: the action of every event after which
    /// it moves on (its start, the gates opening, an interceptor returning, its batch released,
    /// a reactor's work ending, stale headers, a restart).
    enum ProceedAction {
        /// Nothing: the event came late (see the event).
        case none
        /// Check the gates of the reactors that hold new tasks (the ``Engine``, through
        /// ``AdmissionStateMachine/headersWillBeDecided(_:)``, in the same section).
        case checkGates
        /// Run interceptor `index` on `task`.
        case runInterceptor(index: Int, task: URLTask)
        /// Put the task in interceptor `index`'s batch; a hold timer names `generation`.
        /// `flushesSeen` is the flush count the interceptor decided under.
        case hold(index: Int, maximumWait: Duration?, generation: Int, flushesSeen: Int)
        /// Release interceptor `index`'s batch; this task then continues at `index + 1`.
        case releaseBatch(index: Int)
        /// Ask admission to let the task go; `request` names its host's slot, `restamp` says its
        /// headers were not decided by the interceptors (a requeue without them); `task`: the
        /// task as it is, when its reactors' reported versions are read first.
        case acquireConnection(request: URLRequest, restamp: Bool, task: URLTask?)
        /// The task ended.
        case complete(Completion)
        /// The task waits at reactor `reactor`'s gate (admission recorded it in the same section).
        case waitAtGate(reactor: Int)
    }

    /// The pipeline starts the task. `replayableBody` replaces a stream body that a reactor may
    /// need to send again (read once, before this event).
    /// Ignored if the caller cancelled first (the cancel and the start race from the session's
    /// work queue to another thread).
    mutating func start(replayableBody: URLTaskBody? = nil) -> ProceedAction {
        switch state {
        case .created:
            if let replayableBody {
                context.body = replayableBody
                context.task.body = replayableBody
            }
            state = .gated(gate: nil)
            return .checkGates
        case .completed:
            return .none
        default:
            preconditionFailure("a task starts once")
        }
    }

    /// The gates were checked and the task waits at reactor `reactor`'s gate. Admission records
    /// the wait in the same lock section (the ``Engine``), so the task is at the gates; ignored
    /// only once it ended.
    mutating func waitingAtGate(reactor: Int) -> ProceedAction {
        switch state {
        case .gated:
            state = .gated(gate: reactor)
            return .waitAtGate(reactor: reactor)
        case .completed: return .none
        default: preconditionFailure("a task waits at a gate it is not at")
        }
    }

    /// No gate holds the task (any more). Checked in the same lock section as the gates
    /// themselves, so the task is at them; ignored only once it ended.
    mutating func gateOpened() -> ProceedAction {
        switch state {
        case .gated: return advance(to: 0)
        case .completed: return .none
        default: preconditionFailure("the gates opened for a task that is not at them")
        }
    }

    /// Interceptor `index` returned `command` for `snapshot` (the task as it changed it), having
    /// decided under its batch's flush count `flushes`.
    /// Ignored if the task ended while the interceptor ran (a cancel, a timeout, an abort).
    mutating func interceptorReturned(
        index: Int, command: InterceptCommand, snapshot: URLTask, flushes: Int, interceptor: URLTaskError.Component
    ) -> ProceedAction {
        guard expectInterceptor(index) else { return .none }
        context.task = snapshot
        switch command {
        case .execute:
            return advance(to: index + 1)
        case .hold(let maximumWait):
            budgets.holds += 1
            state = .held(index: index, generation: budgets.holds)
            return .hold(index: index, maximumWait: maximumWait, generation: budgets.holds, flushesSeen: flushes)
        case .release:
            // The batch and this task continue together, at `index + 1`.
            budgets.holds += 1
            state = .held(index: index, generation: budgets.holds)
            return .releaseBatch(index: index)
        case .fail(let error):
            return complete(.fail(URLTaskError.delivered(error, from: interceptor, code: .interceptorFailed)))
        case .respond(let response, let body):
            return complete(.respond(response, body))
        }
    }

    /// Interceptor `index` threw `error`. Ignored as ``interceptorReturned(index:command:snapshot:flushes:interceptor:)`` is.
    mutating func interceptorThrew(index: Int, error: any Error, interceptor: URLTaskError.Component) -> ProceedAction {
        guard expectInterceptor(index) else { return .none }
        return complete(.fail(URLTaskError.delivered(error, from: interceptor, code: .interceptorFailed)))
    }

    /// The batch of interceptor `index` was released.
    /// Ignored if the task ended meanwhile (released by the batch just before it was taken out).
    mutating func released(index: Int) -> ProceedAction {
        switch state {
        case .held(let current, _):
            precondition(current == index, "released by a batch the task is not held in")
            return advance(to: index + 1)
        case .completed:
            return .none
        default:
            preconditionFailure("a batch released a task it does not hold")
        }
    }

    /// What happens when an interceptor's or a reaction's Swift task exists (``workStarted(_:)``).
    enum WorkStartedAction {
        case none
        /// The task ended before the work could be recorded: cancel it.
        case cancel(Task<Void, Never>)
    }

    /// The interceptor or per-task reaction running for the task exists as a Swift task. One
    /// that decided before this event is over already; one for a task that ended meanwhile is
    /// cancelled.
    mutating func workStarted(_ started: Task<Void, Never>) -> WorkStartedAction {
        switch state {
        case .completed:
            return .cancel(started)
        case .intercepting(let index, _):
            state = .intercepting(index: index, work: started)
        case .reacting(let reactor, let outcome, let body, _):
            state = .reacting(reactor: reactor, outcome: outcome, body: body, work: started)
        default:
            break
        }
        return .none
    }

    /// Admission found its headers decided before a holding reactor's run that has ended since
    /// (it waited in a batch or for a connection meanwhile): run the interceptors again instead
    /// of sending a request known to be stale.
    /// Ignored if the task ended meanwhile.
    mutating func headersStale() -> ProceedAction {
        switch state {
        case .awaitingConnection:
            interceptAgain(gate: nil)
            return .checkGates
        case .completed:
            return .none
        default:
            preconditionFailure("admission sent back a task that was not waiting for it")
        }
    }

    /// Admission found a holding reactor's run going: the task waits at its gate, then runs the
    /// interceptors again. Ignored if the task ended meanwhile.
    mutating func admissionGated(reactor: Int) -> ProceedAction {
        switch state {
        case .awaitingConnection:
            interceptAgain(gate: reactor)
            return .waitAtGate(reactor: reactor)
        case .completed:
            return .none
        default:
            preconditionFailure("admission gated a task that was not waiting for it")
        }
    }

    /// Admission sends a task that waited for it back to the gates, at `gate` if a run holds it:
    /// its interceptors run again on the attempt's starting request, and decide its headers, which
    /// are then stamped as they begin and judged at send (never restamped, even after a requeue
    /// that skipped the interceptors). It is the same attempt, not sent yet: it keeps its
    /// attempt values, so a part that spent something for it (a rate limiter's turn) does not
    /// spend it again.
    private mutating func interceptAgain(gate: Int?) {
        context.task = context.task.startingOver(
            attempt: budgets.attempt, request: context.base, body: context.body, sameAttempt: true)
        context.restamp = false
        state = .gated(gate: gate)
    }

    /// What happens when admission lets the task go (``connectionGranted()``).
    enum SendAction {
        /// Start the transfer of `request` with `body` (attempt `attempt`); `whole`: it may be a
        /// ``WholeTransfer`` (``mayTakeWholeTransfer``); `task`: the task as it leaves, when its
        /// sender needs it.
        case send(request: URLRequest, body: URLTaskBody, attempt: Int, whole: Bool, task: URLTask?)
        /// The request cannot be sent (an invalid header, a stream already read): give the slot
        /// back and fail.
        case refuse(any Error)
        /// The task ended meanwhile (a cancel): the slot goes to the next task.
        case giveSlotBack
    }

    /// Admission lets the task go (it holds a connection slot if it needs one).
    mutating func connectionGranted() -> SendAction {
        switch state {
        case .awaitingConnection:
            if let problem = HeaderValidation.firstProblem(in: context.task.request) {
                state = .completed(pendingTransfer: nil)
                return .refuse(annotated(problem))
            }
            if context.bodySent, case .stream = context.task.body {
                state = .completed(pendingTransfer: nil)
                return .refuse(
                    annotated(
                        URLTaskError.bodyNotReplayable(reason: "a stream body larger than maximumReplayableBodySize was already sent once"))
                )
            }
            let whole = mayTakeWholeTransfer
            state = .transferring(Transfer(phase: .sending))
            context.restamp = false
            context.bodySent = true
            context.task.attempt = budgets.attempt
            // Sent: nothing it waited for can time it out any more.
            waiting.generation += 1
            waiting.armed = true
            return .send(
                request: context.task.request, body: context.task.body, attempt: budgets.attempt, whole: whole,
                task: snapshotsWhenSent ? context.task : nil)
        case .completed:
            return .giveSlotBack
        default:
            preconditionFailure("admission let go a task that was not waiting for it")
        }
    }

    /// The transfer could not be started (the session was invalidated meanwhile).
    /// Ignored if the task ended meanwhile (a cancel).
    mutating func failSending(_ error: any Error) -> Completion? {
        switch state {
        case .transferring(let transfer) where transfer.isSending:
            state = .completed(pendingTransfer: nil)
            return failing(error)
        case .completed:
            return nil
        default:
            preconditionFailure("a transfer that never started reported that it could not")
        }
    }
}

// MARK: - Events: the transfer

extension TaskStateMachine {
    /// What happens when the transfer's inner task exists (``transferStarted(_:attempt:)``).
    enum TransferStartedAction {
        case none
        /// The task ended while the transfer was being created: stop it.
        case cancel(any TransferHandle)
    }

    /// The inner task of attempt `attempt`'s transfer exists (its first callbacks may have come
    /// already). A task that ended while it was created has it stopped, unless the transfer
    /// ended on its own (stopping a finished inner task races with corelibs' own end of it); a
    /// task that has already moved on (the transfer ended at once) or an older attempt's has
    /// nothing to keep.
    mutating func transferStarted(_ handle: any TransferHandle, attempt: Int) -> TransferStartedAction {
        switch state {
        case .completed(let pending):
            return pending == attempt ? .cancel(handle) : .none
        case .transferring(var transfer) where attempt == budgets.attempt:
            transfer.handle = handle
            state = .transferring(transfer)
            return .none
        default:
            return .none
        }
    }

    /// What happens with a response head (``transportReceived(response:reactor:challenge:)``).
    enum HeadAction {
        case none
        /// Give the caller this response; its body follows.
        case forward(URLResponse)
    }

    /// The response head arrived. `reactor` is the first reactor that wants it, if any;
    /// `challenge` says it is a 401 whose authentication challenge the caller's side answers.
    /// An interim (1xx) head leaves the task `sending`: only the final head counts.
    /// Ignored after the task ended (the transfer still runs until it is stopped) and while a
    /// followed redirect drops the rest of its transfer.
    mutating func transportReceived(response: URLResponse, reactor: Int?, challenge: Bool = false) -> HeadAction {
        switch state {
        case .transferring(let transfer):
            switch transfer.phase {
            case .sending:
                break
            case .redirecting:
                return .none
            case .receiving, .collecting, .challenged, .rejecting:
                assertionFailure("a second final response head")
                return .none
            }
        case .completed:
            return .none
        default:
            preconditionFailure("a response head for a task with no transfer")
        }
        if Self.isInterim(response) { return .none }
        if let reactor, let http = response as? HTTPURLResponse {
            // Kept whole when it may reach the caller: never a truncated body without an error.
            let whole = reactors[reactor].delivers || budgets.requeuedBy[reactor]
            moveTransfer(to: .collecting(reactor: reactor, response: http, body: Data(), whole: whole))
            return .none
        }
        if challenge, let http = response as? HTTPURLResponse {
            moveTransfer(to: .challenged(response: http, body: Data()))
            return .none
        }
        if let http = response as? HTTPURLResponse, let reason = validation?.rejection(of: http) {
            moveTransfer(to: .rejecting(response: http, reason: reason, body: Data()))
            return .none
        }
        moveTransfer(to: .receiving)
        return .forward(response)
    }

    /// What happens with a chunk of the body (``transportReceived(data:)``).
    enum DataAction {
        case none
        /// Give the caller this chunk.
        case forward(Data)
        /// What the phase collects is complete (a reactor's first MiB, a rejected answer's
        /// prefix): stop the transfer; its end moves the task on as the whole body's would.
        case stopTransfer(any TransferHandle)
        /// The task ended here (a body held whole for the caller passed its limit, a rejected
        /// answer's prefix is complete): what it leaves, and its error.
        case fail(FailAction)
    }

    /// A chunk of the body arrived. Ignored after the task ended and while a followed redirect
    /// drops the rest of its transfer. No body is held without a bound: a server that sends an
    /// endless one ends the task with a typed error, or, where the caller never sees the body,
    /// has its transfer stopped once enough of it arrived.
    mutating func transportReceived(data: Data) -> DataAction {
        switch state {
        case .transferring(var transfer):
            switch transfer.phase {
            case .receiving:
                return .forward(data)
            case .collecting, .challenged, .rejecting:
                state = .completed(pendingTransfer: nil)  // keep the body uniquely referenced while appending
                let collected = transfer.phase.collect(data, heldBodyLimit: heldBodyLimit)
                state = .transferring(transfer)
                switch collected {
                case .kept:
                    break
                case .tooLarge:
                    return .fail(failEnding(heldBodyTooLarge(transfer.phase)))
                case .enough:
                    if case .rejecting(let response, let reason, let body) = transfer.phase {
                        // Whatever the rest of the body holds, the answer is not acceptable.
                        return .fail(failEnding(URLTaskError.responseRejected(response, body: body, reason: reason)))
                    }
                    guard let handle = transfer.handle, !transfer.stoppedEarly else { break }
                    transfer.stoppedEarly = true
                    state = .transferring(transfer)
                    return .stopTransfer(handle)
                }
            case .redirecting:
                break
            case .sending:
                assertionFailure("body bytes before the response head")
            }
        case .completed:
            break
        default:
            preconditionFailure("body bytes for a task with no transfer")
        }
        return .none
    }

    /// What happens with a redirect the transfer met (``redirectReceived(tooMany:)``).
    enum RedirectAction {
        /// Ask the caller's side, proposing the redirect as followed from `current`.
        case consult(current: URLRequest)
        /// Tell the inner session not to follow, and ask nobody (one too many, or the task ended).
        case decline
    }

    /// The transfer met a redirect. Past the limit the task will fail (`tooMany`) when the
    /// transfer ends; otherwise the caller's side is asked (``redirectAnswered(_:refused:)``).
    /// Declined after the task ended.
    mutating func redirectReceived(tooMany: @autoclosure () -> any Error) -> RedirectAction {
        switch state {
        case .transferring(let transfer) where transfer.isSending:
            break
        case .completed:
            return .decline
        default:
            assertionFailure("a redirect after the response head")
            return .decline
        }
        budgets.redirects += 1
        if budgets.redirects > Self.maximumRedirects {
            moveTransfer(to: .redirecting(to: nil, failure: tooMany()))
            return .decline
        }
        return .consult(current: context.base)
    }

    /// The caller's side answered a redirect: follow it with `request` (through the pipeline,
    /// once the transfer has ended) or, with `nil`, deliver the redirect response itself.
    /// `refused` is the error for a request the pipeline will not send (a scheme other than http
    /// or https): the task fails with it when the transfer ends.
    /// Ignored once the transfer has ended (its timeout may fire while the caller decides) or
    /// the task ended.
    mutating func redirectAnswered(_ request: URLRequest?, refused: (any Error)? = nil) {
        guard case .transferring(let transfer) = state, transfer.isSending, let request else { return }
        moveTransfer(to: refused.map { .redirecting(to: nil, failure: $0) } ?? .redirecting(to: request, failure: nil))
    }

    /// What happens when the transfer ends (``transportCompleted(error:reactor:now:)``). Every
    /// case but `react` gives the task's connection slot back first; `react` hands it over in
    /// the same transition that starts or joins the reactor's run.
    enum TransferEndAction {
        /// The transfer of a task that had already ended: only the slot goes back.
        case none
        /// The task ended with the transfer; `forwarded`: its final head went to the caller as is
        /// (no reactor needed it, it was neither a challenge nor rejected), which tells the loop
        /// guards the credential works.
        case complete(Completion, forwarded: Bool)
        /// Hand the task to reactor `reactor`. `requeued` says it was already sent again after
        /// one of that reactor's runs; `task` is the attempt as sent; `timer`: the one to arm
        /// for the wait for the reaction (``waitBegins()``).
        case react(reactor: Int, outcome: URLTaskOutcome, body: Data, task: URLTask, requeued: Bool, timer: WaitTimer?)
        /// Ask the caller's side about the authentication challenge of `response`: the challenge
        /// failed `previousFailures` times before, and a credential resends `request`.
        case consultChallenge(response: HTTPURLResponse, previousFailures: Int, request: URLRequest)
        /// A followed redirect: start again from the gates with the new request.
        case restart
    }

    /// What the end of a transfer needs read first, outside the lock, or the end itself
    /// (``transferEnded(error:choice:readingKnown:now:)``).
    enum TransferEnding {
        /// A transport error before the head is an outcome: ask the reactors which takes it (their
        /// code), then end the transfer again with the choice.
        case chooseReactor(task: URLTask)
        /// The reactor taking the outcome keeps versions of its own: read what it reports of the
        /// task as sent, then end the transfer again with the reading.
        case needsReading(reactor: Int)
        case ended(TransferEndAction)
    }

    /// The transfer finished, as the engine's section sees it: first what must be read outside
    /// the lock (which reactor takes a transport error, once asked: `choice`; what the reactor
    /// taking the outcome reports, once read: `readingKnown`), then
    /// ``transportCompleted(error:reactor:now:)``. Nothing changes until the end itself.
    mutating func transferEnded(error: (any Error)?, choice: Int??, readingKnown: Bool, now: DispatchTime) -> TransferEnding {
        var reactor: Int?
        var taking: Int?
        if case .transferring(let transfer) = state {
            switch transfer.phase {
            case .sending where error != nil && asksAboutTransportErrors:
                guard let choice else { return .chooseReactor(task: context.task) }
                reactor = choice
                taking = choice
            case .collecting(let collecting, _, _, _):
                taking = collecting
            default:
                break
            }
        }
        if !readingKnown, let taking, reactors[taking].reportsVersions { return .needsReading(reactor: taking) }
        return .ended(transportCompleted(error: error, reactor: reactor, now: now))
    }

    /// The transfer finished. `reactor` is the first reactor that wants a transport error;
    /// `now` starts the wait for a reaction or a restart.
    /// For a task that ended before its transfer did, only the slot goes back.
    mutating func transportCompleted(error: (any Error)?, reactor: Int?, now: DispatchTime = .now()) -> TransferEndAction {
        let transfer: Transfer
        switch state {
        case .transferring(let current):
            transfer = current
        case .completed:
            // It ended on its own: an inner task recorded late is not stopped.
            state = .completed(pendingTransfer: nil)
            return .none
        case .created, .gated, .intercepting, .held, .awaitingConnection, .reacting, .consultingChallenge:
            preconditionFailure("a transfer ended for a task that had none")
        }
        switch transfer.phase {
        case .sending:
            // The transport reports a head it never got as an error (``Transport``): a transfer
            // with neither is the server's fault, never a finish with nothing to deliver.
            let error = error ?? URLError.noResponse(url: context.base.url)
            if let reactor {
                return beginReaction(reactor: reactor, outcome: .failure(error), body: Data(), now: now)
            }
            state = .completed(pendingTransfer: nil)
            return .complete(failing(error), forwarded: false)
        case .receiving:
            state = .completed(pendingTransfer: nil)
            return .complete(error.map(failing) ?? .finish, forwarded: true)
        case .collecting(let reactor, let response, let body, _):
            if let error, !transfer.stoppedEarly {
                // The body of the response to react to was cut: react to the failure.
                return beginReaction(reactor: reactor, outcome: .failure(error), body: Data(), now: now)
            }
            return beginReaction(reactor: reactor, outcome: .response(response), body: body, now: now)
        case .redirecting(let request?, _):
            // Whatever became of the rest of the redirect response, the redirect is followed.
            restart(from: request, now: now)
            return .restart
        case .redirecting(nil, let failure):
            state = .completed(pendingTransfer: nil)
            return .complete(failing(failure ?? URLError(.httpTooManyRedirects)), forwarded: false)
        case .challenged(let response, let body):
            if let error {
                state = .completed(pendingTransfer: nil)
                return .complete(failing(error), forwarded: false)
            }
            state = .consultingChallenge(response: response, body: body)
            return .consultChallenge(response: response, previousFailures: budgets.challengeFailures, request: context.base)
        case .rejecting(let response, let reason, let body):
            // Whatever became of the rest of the body, the answer was not acceptable.
            state = .completed(pendingTransfer: nil)
            return .complete(failing(URLTaskError.responseRejected(response, body: body, reason: reason)), forwarded: false)
        }
    }
}

// MARK: - Events: reactions and challenges

extension TaskStateMachine {
    /// What a reactor decided about a task whose outcome it took.
    enum ReactionResult {
        /// The work succeeded (or had already been done): send the task again.
        case requeue(reintercept: Bool)
        /// Give the caller what arrived, whole: the response and its body, or the transport's
        /// own error. For a reactor that does not requeue, and for a task that already went
        /// out again with headers decided after the reactor's latest run and met the same
        /// reaction (a resource that refuses every token: sending it again cannot help).
        case deliver
        /// The work failed: fail the task with this error.
        case fail(any Error)
    }

    /// Reactor `reactor` decided about the task (its shared run ended, or it decided at once).
    /// Ignored if the task ended while it waited (a cancel, a timeout, an abort). A requeue
    /// returns `.checkGates` or `.acquireConnection`.
    mutating func reactionFinished(reactor: Int, result: ReactionResult) -> ProceedAction {
        switch state {
        case .reacting(let current, let outcome, let received, _):
            precondition(current == reactor, "a reaction ended for a reactor the task does not wait on")
            switch result {
            case .requeue(let reintercept):
                budgets.attempt += 1
                budgets.requeuedBy[reactor] = true
                if reintercept {
                    context.task = context.task.startingOver(attempt: budgets.attempt, request: context.base, body: context.body)
                    state = .gated(gate: nil)
                    return .checkGates
                }
                context.restamp = true
                state = .awaitingConnection
                return .acquireConnection(
                    request: context.task.request, restamp: true, task: readsVersionsBeforeSending ? context.task : nil)
            case .deliver:
                switch outcome {
                case .response(let response): return complete(judged(response, received))
                case .failure(let error): return complete(failing(error))
                }
            case .fail(let error):
                return complete(failing(error))
            }
        case .completed:
            return .none
        default:
            preconditionFailure("a reaction ended for a task that was not waiting for one")
        }
    }

    /// ``reactionFinished(reactor:result:)``, with the attempt the task is sent again as when the
    /// reaction requeued it (for its `requeued` event): one call for the engine's section.
    mutating func reactionEnded(reactor: Int, result: ReactionResult) -> (action: ProceedAction, requeuedAs: Int?) {
        let action = reactionFinished(reactor: reactor, result: result)
        switch action {
        case .checkGates, .acquireConnection: return (action, budgets.attempt)
        default: return (action, nil)
        }
    }

    /// What the caller's side answered to an HTTP authentication challenge.
    enum ChallengeAnswer {
        /// Send this request (the credential applied) through the pipeline again.
        case resend(URLRequest)
        /// Give the caller this response (the 401) and the body that came with it.
        case deliver(URLResponse)
        /// Complete with this error (the delegate cancelled the challenge).
        case fail(any Error)
    }

    /// The caller's side answered an authentication challenge; `now` starts the wait of a resend.
    /// Ignored if the task ended while the caller's side decided.
    mutating func challengeAnswered(_ answer: ChallengeAnswer, now: DispatchTime = .now()) -> ProceedAction {
        switch state {
        case .consultingChallenge(_, let body):
            switch answer {
            case .resend(let request):
                budgets.challengeFailures += 1
                restart(from: request, now: now)
                return .checkGates
            case .deliver(let response):
                return complete(judged(response, body))
            case .fail(let error):
                return complete(.fail(error))
            }
        case .completed:
            return .none
        default:
            preconditionFailure("a challenge answered for a task that asked none")
        }
    }
}

// MARK: - Events: the end, decided from outside

extension TaskStateMachine {
    /// What happens when the caller cancels (``cancel()``). The session reports the error itself.
    enum CancelAction {
        /// The task had already ended.
        case none
        /// Stop the transfer, if it exists yet.
        case stopTransfer((any TransferHandle)?)
        /// Leave the queue for a connection slot.
        case leaveSlotQueue
        /// Leave interceptor `index`'s batch.
        case leaveBatch(index: Int)
        /// Stop the work running for the task, if any (an interceptor, a per-task reaction); a
        /// task waiting at a gate or on a run leaves it as it ends (``EngineStorage/finished(_:)``).
        case abandon(Task<Void, Never>?)
    }

    /// The caller cancelled (`stopLoading`). The session reports the error itself.
    mutating func cancel() -> CancelAction {
        if case .completed = state { return .none }
        switch end() {
        case .completed:
            preconditionFailure("a task ends once")
        case .created, .gated, .consultingChallenge:
            return .abandon(nil)
        case .intercepting(_, let work), .reacting(_, _, _, let work):
            return .abandon(work)
        case .held(let index, _):
            return .leaveBatch(index: index)
        case .awaitingConnection:
            return .leaveSlotQueue
        case .transferring(let transfer):
            return .stopTransfer(transfer.handle)
        }
    }

    /// What happens when the manager fails a task (``fail(_:)``, ``holdExpired(index:generation:error:)``,
    /// ``waitExpired(generation:error:)``, ``abort(_:)``).
    enum FailAction {
        /// The task had already ended, or is past the point this failure concerns.
        case none
        /// Complete with `error`: take it out of batch `heldIn` if it is held, cancel `work` (an
        /// interceptor or a reaction running for it), and stop `transfer` if it is on the network.
        case fail(any Error, heldIn: Int?, work: Task<Void, Never>?, transfer: (any TransferHandle)?)
    }

    /// The manager fails the task before it was sent (invalidation, a failed run it was gated
    /// on, a slot wait past the request's timeout). Ignored for a task that ended or went on
    /// to the network meanwhile: it finishes on its own.
    mutating func fail(_ error: any Error) -> FailAction {
        switch state {
        case .created, .gated, .intercepting, .held, .awaitingConnection:
            return failEnding(error)
        case .transferring, .reacting, .consultingChallenge, .completed:
            return .none
        }
    }

    /// The hold timer of generation `generation` in interceptor `index`'s batch fired: a task
    /// still held there fails with `error`. Ignored if it was released meanwhile.
    mutating func holdExpired(index: Int, generation: Int, error: any Error) -> FailAction {
        guard case .held(let current, let held) = state, current == index, held == generation else { return .none }
        return failEnding(error)
    }

    /// The manager ends the task whatever it is doing (``URLTaskManager/failTasks(with:where:)``,
    /// a sign-out): one not sent yet fails as with ``fail(_:)``, one on the network has its
    /// transfer stopped, one waiting for a reactor or the caller's side fails at once.
    mutating func abort(_ error: any Error) -> FailAction {
        if case .completed = state { return .none }
        return failEnding(error)
    }

    /// The timer to set for the current stretch of waits (``waitBegins()``).
    struct WaitTimer {
        /// The stretch it belongs to (``waitExpired(generation:error:)``).
        var generation: Int
        /// When the request's `timeoutInterval` runs out, counted from the stretch's start.
        var deadline: DispatchTime
    }

    /// The task starts to wait inside the pipeline (a gate, an interceptor that suspends, a
    /// batch, the slot queue, a reaction). The first wait of a stretch sets one timer for the
    /// request's `timeoutInterval` from the stretch's start: every wait of the stretch counts,
    /// as a plain session counts every second without progress.
    mutating func waitBegins() -> WaitTimer? {
        guard !waiting.armed, !isCompleted else { return nil }
        waiting.armed = true
        let interval = context.task.request.timeoutInterval
        guard interval > 0, interval.isFinite else { return nil }
        return WaitTimer(generation: waiting.generation, deadline: waiting.started + interval)
    }

    /// The request's timeout passed while the task still waited in stretch `generation` (at a
    /// gate, in an interceptor, a batch, the slot queue, or for a reactor's work): it fails with
    /// `error` (`URLError.timedOut`), as a plain session's request that went that long without
    /// progress does. Ignored for a task sent meanwhile, one that began another stretch, and
    /// one whose challenge the caller's side is deciding (not a wait on the pipeline).
    mutating func waitExpired(generation: Int, error: any Error) -> FailAction {
        guard waiting.generation == generation else { return .none }
        switch state {
        case .created, .gated, .intercepting, .held, .awaitingConnection, .reacting:
            return failEnding(error)
        case .transferring, .consultingChallenge, .completed:
            return .none
        }
    }
}

// MARK: - Helpers

extension TaskStateMachine {
    /// Whether `response` is an interim head (`100 Continue`, `103 Early Hints`): the inner
    /// session reports each one, a plain session's caller sees only the final response. `101`
    /// is final (the connection changes protocol).
    static func isInterim(_ response: URLResponse) -> Bool {
        guard let status = (response as? HTTPURLResponse)?.statusCode else { return false }
        return (100..<200).contains(status) && status != 101
    }

    /// Whether interceptor `index`'s answer is expected now; `false` if the task ended meanwhile.
    private func expectInterceptor(_ index: Int) -> Bool {
        switch state {
        case .intercepting(let current, _):
            precondition(current == index, "interceptor \(index) answered while \(current) runs")
            return true
        case .completed:
            return false
        default:
            preconditionFailure("an interceptor answered for a task it was not running on")
        }
    }

    /// The manager's own errors name the request they happened to (without its query).
    private func failing(_ error: any Error) -> Completion {
        .fail(annotated(error))
    }

    private func annotated(_ error: any Error) -> any Error {
        (error as? URLTaskError)?.about(context.task.request, attempt: context.task.attempt) ?? error
    }

    /// Ends the task, not from the network (an interceptor, a reaction, the caller's side).
    private mutating func complete(_ completion: Completion) -> ProceedAction {
        state = .completed(pendingTransfer: nil)
        if case .fail(let error) = completion { return .complete(failing(error)) }
        return .complete(completion)
    }

    /// Ends the task from outside wherever it is (a cancel, a failure), and returns where it was.
    /// A transfer whose inner task is not recorded yet is stopped once it is.
    private mutating func end() -> State {
        let previous = state
        if case .transferring(let transfer) = previous, transfer.handle == nil {
            state = .completed(pendingTransfer: budgets.attempt)
        } else {
            state = .completed(pendingTransfer: nil)
        }
        return previous
    }

    /// Ends the task with `error` from wherever it is: what it must leave or stop.
    private mutating func failEnding(_ error: any Error) -> FailAction {
        var held: Int?
        var running: Task<Void, Never>?
        var onNetwork: (any TransferHandle)?
        switch end() {
        case .held(let index, _): held = index
        case .intercepting(_, let work), .reacting(_, _, _, let work): running = work
        case .transferring(let transfer): onNetwork = transfer.handle
        case .created, .gated, .awaitingConnection, .consultingChallenge, .completed: break
        }
        return .fail(annotated(error), heldIn: held, work: running, transfer: onNetwork)
    }

    /// A whole answer about to reach the caller (a reactor or the caller's side delivers it),
    /// as the caller accepts it (``ResponseValidation``): given, or failed.
    private func judged(_ response: URLResponse, _ body: Data) -> Completion {
        if let http = response as? HTTPURLResponse, let reason = validation?.rejection(of: http) {
            return .fail(URLTaskError.responseRejected(http, body: body, reason: reason))
        }
        return .respond(response, body)
    }

    /// The error of a body held whole for the caller that grew past ``heldBodyLimit``.
    private func heldBodyTooLarge(_ phase: Transfer.Phase) -> URLTaskError {
        switch phase {
        case .collecting(let reactor, let response, _, _):
            return .responseTooLarge(
                response, limit: heldBodyLimit, heldFor: "for reactor \(reactors[reactor].component.name)", by: reactors[reactor].component)
        case .challenged(let response, _):
            return .responseTooLarge(response, limit: heldBodyLimit, heldFor: "with its authentication challenge", by: nil)
        case .sending, .receiving, .redirecting, .rejecting:
            preconditionFailure("only a body held whole can be too large")
        }
    }

    /// Moves the transfer on to `phase`, keeping its inner task.
    private mutating func moveTransfer(to phase: Transfer.Phase) {
        guard case .transferring(var transfer) = state else { preconditionFailure("no transfer to move on") }
        transfer.phase = phase
        state = .transferring(transfer)
    }

    /// Starts the task again from `request` (a followed redirect, a challenge answered with a
    /// credential): a body on the request replaces the one held; a request with the same method
    /// (a 307, a challenge answered) sends the held body again; a new method, none.
    private mutating func restart(from request: URLRequest, now: DispatchTime) {
        let carried = URLTaskBody(request: request)
        if !carried.isNone {
            context.body = carried
            context.bodySent = false
        } else if request.httpMethod != context.base.httpMethod {
            context.body = .none
            context.bodySent = false
        }
        context.base = request
        context.base.httpBody = nil
        context.base.httpBodyStream = nil
        budgets.attempt += 1
        beginStretch(now)
        context.task = context.task.startingOver(attempt: budgets.attempt, request: context.base, body: context.body)
        state = .gated(gate: nil)
    }

    /// A new stretch of waits starts now; a timer set for the previous one no longer fires.
    private mutating func beginStretch(_ now: DispatchTime) {
        waiting = WaitPhase(generation: waiting.generation + 1, started: now)
    }

    private mutating func beginReaction(reactor: Int, outcome: URLTaskOutcome, body: Data, now: DispatchTime) -> TransferEndAction {
        budgets.reactions[reactor] += 1
        if budgets.reactions[reactor] > reactors[reactor].maximumReactions {
            state = .completed(pendingTransfer: nil)
            return .complete(
                failing(URLTaskError.tooManyAttempts(reactors[reactor].component, attempts: budgets.attempt)), forwarded: false)
        }
        // The transfer has ended: waiting for the reaction starts a new stretch without progress.
        beginStretch(now)
        state = .reacting(reactor: reactor, outcome: outcome, body: body, work: nil)
        return .react(
            reactor: reactor, outcome: outcome, body: body, task: context.task, requeued: budgets.requeuedBy[reactor],
            timer: waitBegins())
    }

    private mutating func advance(to index: Int) -> ProceedAction {
        var index = index
        while skippedInterceptors.contains(index) { index += 1 }
        if index < interceptorCount {
            state = .intercepting(index: index, work: nil)
            return .runInterceptor(index: index, task: context.task)
        }
        state = .awaitingConnection
        return .acquireConnection(
            request: context.task.request, restamp: context.restamp, task: readsVersionsBeforeSending ? context.task : nil)
    }
}
