import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The whole life of one task through the pipeline, without I/O: where it is, and everything it
/// carries from attempt to attempt (the request the interceptors start from, its body, the
/// transfer and the work running for it, its hold, its wait against the request's timeout).
///
/// ```
///  created ─start─> [gated] ─> intercepting(0) ─execute─> ... intercepting(n-1) ─> awaitingConnection
///                                   │ hold                                           │ slot
///                                   v                                              sending
///                                   │                                                │ head
///                                   v                                   ┌────────────┴─────────────┐
///                                held(k) ─release─> intercepting(k+1)   v                          v
///                                                                   receiving ─end─> completed   collecting(reactor r)
///                                                                                                  │ end
///                                                                                                  v
///                        intercepting(0) or awaitingConnection  <─requeue─  reacting(r) ─fail─> completed
/// ```
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
/// Each event returns an action type of its own, holding only what that event can lead to; the
/// storage (``TaskStorage``) performs it once its lock is released. Events that other threads
/// send (a transport callback, a batch released, a run finished, a timer) may find the task
/// already ended, or moved on by a race that each method names: those are ignored. An event
/// that no interleaving can bring in a state is a bug in the storage, and stops the program.
struct TaskStateMachine {
    // MARK: State

    private enum State {
        case created
        /// Checking the gates, or waiting at reactor `gate`'s.
        case gated(gate: Int?)
        case intercepting(index: Int)
        /// In interceptor `index`'s batch; a hold timer set for `generation` may fail it.
        case held(index: Int, generation: Int)
        case awaitingConnection
        case sending
        case receiving
        /// `whole`: the body may be delivered to the caller, so none of it is dropped.
        case collecting(reactor: Int, response: HTTPURLResponse, body: Data, whole: Bool)
        case reacting(reactor: Int, outcome: URLTaskOutcome, body: Data)
        /// The transfer met a redirect the pipeline follows itself (`to`), or one it refuses
        /// (`to == nil`, failing with `failure`); the rest of the transfer is dropped.
        case redirecting(to: URLRequest?, failure: (any Error)?)
        /// A 401 with an authentication challenge: its body is collected, then the caller's
        /// side is asked.
        case challenged(response: HTTPURLResponse, body: Data)
        case consultingChallenge(response: HTTPURLResponse, body: Data)
        /// The final answer is not one the caller accepts (``ResponseValidation``): the start of
        /// its body is kept for the error, which the caller gets when the transfer ends.
        case rejecting(response: HTTPURLResponse, reason: String, body: Data)
        case completed
    }

    /// One stretch of the task's life inside the pipeline: from its start, the end of a transfer
    /// it reacts to, or a restart, until it is sent. `armed` once its first wait set the timer.
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

    // MARK: Configuration

    private let interceptorCount: Int
    /// The answers the caller accepts; `nil` accepts every one.
    private let validation: ResponseValidation?
    /// Interceptors this task skips.
    private let skippedInterceptors: Set<Int>
    private let reactors: [ReactorTraits]

    // MARK: The task's context

    private var state: State = .created
    /// The current attempt as the interceptors shaped it so far.
    private(set) var task: URLTask
    /// Where the interceptors start on each attempt: the caller's request, or what a followed
    /// redirect or an answered challenge sends instead (without a body: see `body`).
    private var base: URLRequest
    /// The body each attempt's interceptors start from: the caller's (a replayable copy of a
    /// stream, see ``start(now:replayableBody:)``), or what a restart carries.
    private(set) var body: URLTaskBody
    /// Whether a body was sent once: a stream cannot be sent again.
    private var bodySent = false
    private(set) var attempt = 1
    /// Per reactor: how often this task triggered it.
    private var reactions: [Int]
    /// Per reactor: whether this task was already sent again after one of its runs succeeded.
    private var requeuedBy: [Bool]
    /// Redirects met so far; past ``maximumRedirects`` the task fails, as URLSession's do.
    private var redirects = 0
    /// Challenges of this task the caller's side answered with a credential that failed.
    private var challengeFailures = 0
    /// Holds so far: each names its timer.
    private var holds = 0
    /// Whether the current attempt's headers were not decided by the interceptors (a requeue
    /// without them): admission stamps them when the task is about to leave.
    private var needsRestamp = false
    /// The inner task of the current transfer, once created.
    private var transfer: (any TransferHandle)?
    /// The attempt whose transfer ended last: a transfer that ended on its own is not stopped
    /// when its inner task is recorded late (``transferStarted(_:attempt:)``).
    private var lastEndedTransfer = 0
    /// The interceptor or per-task reaction running for the task, once started.
    private var work: Task<Void, Never>?
    private var waiting: WaitPhase

    /// - Parameters:
    ///   - task: The first attempt, as the interceptors will see it.
    ///   - interceptorCount: The length of the interceptor chain.
    ///   - skipping: Interceptors this task skips (its ``URLTaskPolicy``).
    ///   - reactors: What the machine needs to know of each reactor.
    ///   - validation: The answers the caller accepts (``ResponseValidation``); `nil`, any.
    ///   - now: When the task was created: its first wait counts from here.
    init(
        task: URLTask, interceptorCount: Int, skipping: Set<Int> = [], reactors: [ReactorTraits] = [],
        validation: ResponseValidation? = nil, now: DispatchTime = .now()
    ) {
        self.task = task
        self.base = task.request
        self.body = task.body
        self.interceptorCount = interceptorCount
        self.skippedInterceptors = skipping
        self.validation = validation
        self.reactors = reactors
        self.reactions = Array(repeating: 0, count: reactors.count)
        self.requeuedBy = Array(repeating: false, count: reactors.count)
        self.waiting = WaitPhase(started: now)
    }

    // MARK: Queries

    /// Whether a transport error now would be the task's outcome (no head has arrived).
    var isAwaitingResponseHead: Bool {
        if case .sending = state { return true }
        return false
    }

    /// Whether the final response head went to the caller as is: no reactor needed it, and it
    /// was neither a challenge nor rejected. Read as the transfer ends, for the loop guards.
    var isForwardingResponse: Bool {
        if case .receiving = state { return true }
        return false
    }

    var isCompleted: Bool {
        if case .completed = state { return true }
        return false
    }

    // MARK: Events: on the way to the network

    /// The pipeline starts the task. `replayableBody` replaces a stream body that a reactor may
    /// need to send again (read once, before this event).
    /// Ignored if the caller cancelled first (the cancel and the start race from the session's
    /// work queue to another thread).
    mutating func start(replayableBody: URLTaskBody? = nil) -> ProceedAction {
        switch state {
        case .created:
            if let replayableBody {
                body = replayableBody
                task.body = replayableBody
            }
            state = .gated(gate: nil)
            return .checkGates
        case .completed:
            return .none
        default:
            preconditionFailure("a task starts once")
        }
    }

    /// The gates were checked and the task waits at reactor `reactor`'s gate.
    /// Ignored unless the task is still at the gates: the run may have ended and its
    /// ``gateOpened()`` moved the task on between the check and this event.
    mutating func waitingAtGate(reactor: Int) {
        guard case .gated = state else { return }
        state = .gated(gate: reactor)
    }

    /// No gate holds the task (any more).
    /// Ignored unless the task is at the gates: two checks may both find them open (a run's end
    /// and the task's own check after ``admissionGated(reactor:)``), and the first moved it on;
    /// or the run's end found the task still awaiting admission.
    mutating func gateOpened() -> ProceedAction {
        guard case .gated = state else { return .none }
        return advance(to: 0)
    }

    /// Interceptor `index` returned `command` for `snapshot` (the task as it changed it), having
    /// decided under its batch's flush count `flushes`.
    /// Ignored if the task ended while the interceptor ran (a cancel, a timeout, an abort).
    mutating func interceptorReturned(
        index: Int, command: InterceptCommand, snapshot: URLTask, flushes: Int, interceptor: URLTaskError.Component
    ) -> ProceedAction {
        guard expectInterceptor(index) else { return .none }
        task = snapshot
        work = nil
        switch command {
        case .execute:
            return advance(to: index + 1)
        case .hold(let maximumWait):
            holds += 1
            state = .held(index: index, generation: holds)
            return .hold(index: index, maximumWait: maximumWait, generation: holds, flushesSeen: flushes)
        case .release:
            // The batch and this task continue together, at `index + 1`.
            holds += 1
            state = .held(index: index, generation: holds)
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
        work = nil
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

    /// Admission lets the task go (it holds a connection slot if it needs one).
    mutating func connectionGranted() -> SendAction {
        switch state {
        case .awaitingConnection:
            if let problem = HeaderValidation.firstProblem(in: task.request) {
                state = .completed
                return .refuse(annotated(problem))
            }
            if bodySent, case .stream = task.body {
                state = .completed
                return .refuse(
                    annotated(
                        URLTaskError.bodyNotReplayable(reason: "a stream body larger than maximumReplayableBodySize was already sent once"))
                )
            }
            state = .sending
            needsRestamp = false
            bodySent = true
            task.attempt = attempt
            // Sent: nothing it waited for can time it out any more.
            waiting.generation += 1
            waiting.armed = true
            return .send(request: task.request, body: task.body, attempt: attempt)
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
        case .sending:
            state = .completed
            return failing(error)
        case .completed:
            return nil
        default:
            preconditionFailure("a transfer that never started reported that it could not")
        }
    }

    /// The inner task of attempt `attempt`'s transfer exists (its first callbacks may have come
    /// already). A task that ended while it was created has it stopped, unless the transfer
    /// ended on its own (stopping a finished inner task races with corelibs' own end of it); a
    /// task that has already moved on (the transfer ended at once) or an older attempt's has
    /// nothing to keep.
    mutating func transferStarted(_ handle: any TransferHandle, attempt: Int) -> TransferStartedAction {
        switch state {
        case .completed:
            return lastEndedTransfer == attempt ? .none : .cancel(handle)
        case .sending, .receiving, .collecting, .redirecting, .challenged, .rejecting:
            if attempt == self.attempt { transfer = handle }
            return .none
        default:
            return .none
        }
    }

    /// The interceptor or per-task reaction running for the task exists as a Swift task. One
    /// that decided before this event is over already; one for a task that ended meanwhile is
    /// cancelled.
    mutating func workStarted(_ started: Task<Void, Never>) -> WorkStartedAction {
        switch state {
        case .completed: return .cancel(started)
        case .intercepting, .reacting: work = started
        default: break
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
            task = task.startingOver(attempt: attempt, request: base, body: body)
            state = .gated(gate: nil)
            return .checkGates
        case .completed:
            return .none
        default:
            preconditionFailure("admission sent back a task that was not waiting for it")
        }
    }

    /// Admission found a holding reactor's run going: the task waits at its gate, then runs the
    /// interceptors again. Ignored if the task ended meanwhile.
    mutating func admissionGated(reactor: Int) {
        switch state {
        case .awaitingConnection:
            task = task.startingOver(attempt: attempt, request: base, body: body)
            state = .gated(gate: reactor)
        case .completed:
            return
        default:
            preconditionFailure("admission gated a task that was not waiting for it")
        }
    }

    // MARK: Events: the transfer

    /// The response head arrived. `reactor` is the first reactor that wants it, if any;
    /// `challenge` says it is a 401 whose authentication challenge the caller's side answers.
    /// An interim (1xx) head leaves the task `sending`: only the final head counts.
    /// Ignored after the task ended (the transfer still runs until it is stopped) and while a
    /// followed redirect drops the rest of its transfer.
    mutating func transportReceived(response: URLResponse, reactor: Int?, challenge: Bool = false) -> HeadAction {
        switch state {
        case .sending:
            break
        case .completed, .redirecting:
            return .none
        case .receiving, .collecting, .challenged, .rejecting:
            assertionFailure("a second final response head")
            return .none
        default:
            preconditionFailure("a response head for a task with no transfer")
        }
        if Self.isInterim(response) { return .none }
        if let reactor, let http = response as? HTTPURLResponse {
            // Kept whole when it may reach the caller: never a truncated body without an error.
            let whole = reactors[reactor].delivers || requeuedBy[reactor]
            state = .collecting(reactor: reactor, response: http, body: Data(), whole: whole)
            return .none
        }
        if challenge, let http = response as? HTTPURLResponse {
            state = .challenged(response: http, body: Data())
            return .none
        }
        if let http = response as? HTTPURLResponse, let reason = validation?.rejection(of: http) {
            state = .rejecting(response: http, reason: reason, body: Data())
            return .none
        }
        state = .receiving
        return .forward(response)
    }

    /// A chunk of the body arrived. Ignored after the task ended and while a followed redirect
    /// drops the rest of its transfer.
    mutating func transportReceived(data: Data) -> DataAction {
        switch state {
        case .receiving:
            return .forward(data)
        case .collecting(let reactor, let response, var body, let whole):
            state = .completed  // keep `body` uniquely referenced while appending
            if whole {
                body.append(data)
            } else if body.count < Self.reactionBodyLimit {
                body.append(data.prefix(Self.reactionBodyLimit - body.count))
            }
            state = .collecting(reactor: reactor, response: response, body: body, whole: whole)
        case .challenged(let response, var body):
            state = .completed  // keep `body` uniquely referenced while appending
            body.append(data)
            state = .challenged(response: response, body: body)
        case .rejecting(let response, let reason, var body):
            guard body.count < ResponseValidation.bodyPrefixLimit else { return .none }
            state = .completed  // keep `body` uniquely referenced while appending
            body.append(data.prefix(ResponseValidation.bodyPrefixLimit - body.count))
            state = .rejecting(response: response, reason: reason, body: body)
        case .completed, .redirecting:
            break
        case .sending:
            assertionFailure("body bytes before the response head")
        default:
            preconditionFailure("body bytes for a task with no transfer")
        }
        return .none
    }

    /// The transfer met a redirect. Past the limit the task will fail (`tooMany`) when the
    /// transfer ends; otherwise the caller's side is asked (``redirectAnswered(_:refused:)``).
    /// Declined after the task ended.
    mutating func redirectReceived(tooMany: @autoclosure () -> any Error) -> RedirectAction {
        switch state {
        case .sending:
            break
        case .completed:
            return .decline
        default:
            assertionFailure("a redirect after the response head")
            return .decline
        }
        redirects += 1
        if redirects > Self.maximumRedirects {
            state = .redirecting(to: nil, failure: tooMany())
            return .decline
        }
        return .consult(current: base)
    }

    /// The caller's side answered a redirect: follow it with `request` (through the pipeline,
    /// once the transfer has ended) or, with `nil`, deliver the redirect response itself.
    /// `refused` is the error for a request the pipeline will not send (a scheme other than http
    /// or https): the task fails with it when the transfer ends.
    /// Ignored once the transfer has ended (its timeout may fire while the caller decides) or
    /// the task ended.
    mutating func redirectAnswered(_ request: URLRequest?, refused: (any Error)? = nil) {
        guard case .sending = state, let request else { return }
        state = refused.map { .redirecting(to: nil, failure: $0) } ?? .redirecting(to: request, failure: nil)
    }

    /// The transfer finished. `reactor` is the first reactor that wants a transport error;
    /// `now` starts the wait for a reaction or a restart.
    /// For a task that ended before its transfer did, only the slot goes back.
    mutating func transportCompleted(error: (any Error)?, reactor: Int?, now: DispatchTime = .now()) -> TransferEndAction {
        transfer = nil
        lastEndedTransfer = attempt
        switch state {
        case .sending:
            if let error, let reactor {
                return beginReaction(reactor: reactor, outcome: .failure(error), body: Data(), now: now)
            }
            state = .completed
            return .complete(error.map(failing) ?? .finish)
        case .receiving:
            state = .completed
            return .complete(error.map(failing) ?? .finish)
        case .collecting(let reactor, let response, let body, _):
            if let error {
                // The body of the response to react to was cut: react to the failure.
                return beginReaction(reactor: reactor, outcome: .failure(error), body: Data(), now: now)
            }
            return beginReaction(reactor: reactor, outcome: .response(response), body: body, now: now)
        case .redirecting(let request?, _):
            // Whatever became of the rest of the redirect response, the redirect is followed.
            restart(from: request, now: now)
            return .restart
        case .redirecting(nil, let failure):
            state = .completed
            return .complete(failing(failure ?? URLError(.httpTooManyRedirects)))
        case .challenged(let response, let body):
            if let error {
                state = .completed
                return .complete(failing(error))
            }
            state = .consultingChallenge(response: response, body: body)
            return .consultChallenge(response: response, previousFailures: challengeFailures, request: base)
        case .rejecting(let response, let reason, let body):
            // Whatever became of the rest of the body, the answer was not acceptable.
            state = .completed
            return .complete(failing(URLTaskError.responseRejected(response, body: body, reason: reason)))
        case .completed:
            return .none
        case .created, .gated, .intercepting, .held, .awaitingConnection, .reacting, .consultingChallenge:
            preconditionFailure("a transfer ended for a task that had none")
        }
    }

    // MARK: Events: reactions and challenges

    /// Reactor `reactor` decided about the task (its shared run ended, or it decided at once).
    /// Ignored if the task ended while it waited (a cancel, a timeout, an abort). A requeue
    /// returns `.checkGates` or `.acquireConnection`.
    mutating func reactionFinished(reactor: Int, result: ReactionResult) -> ProceedAction {
        switch state {
        case .reacting(let current, let outcome, let received):
            precondition(current == reactor, "a reaction ended for a reactor the task does not wait on")
            work = nil
            switch result {
            case .requeue(let reintercept):
                attempt += 1
                requeuedBy[reactor] = true
                if reintercept {
                    task = task.startingOver(attempt: attempt, request: base, body: body)
                    state = .gated(gate: nil)
                    return .checkGates
                }
                needsRestamp = true
                state = .awaitingConnection
                return .acquireConnection(request: task.request, restamp: true)
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

    /// The caller's side answered an authentication challenge; `now` starts the wait of a resend.
    /// Ignored if the task ended while the caller's side decided.
    mutating func challengeAnswered(_ answer: ChallengeAnswer, now: DispatchTime = .now()) -> ProceedAction {
        switch state {
        case .consultingChallenge(_, let body):
            switch answer {
            case .resend(let request):
                challengeFailures += 1
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

    // MARK: Events: the end, decided from outside

    /// The caller cancelled (`stopLoading`). The session reports the error itself.
    mutating func cancel() -> CancelAction {
        let previous = state
        state = .completed
        switch previous {
        case .completed:
            return .none
        case .created, .gated, .intercepting, .consultingChallenge, .reacting:
            return .abandon(work)
        case .held(let index, _):
            return .leaveBatch(index: index)
        case .awaitingConnection:
            return .leaveSlotQueue
        case .sending, .receiving, .collecting, .redirecting, .challenged, .rejecting:
            return .stopTransfer(transfer)
        }
    }

    /// The manager fails the task before it was sent (invalidation, a failed run it was gated
    /// on, a slot wait past the request's timeout). Ignored for a task that ended or went on
    /// to the network meanwhile: it finishes on its own.
    mutating func fail(_ error: any Error) -> FailAction {
        switch state {
        case .created, .gated, .intercepting, .held, .awaitingConnection:
            return failEnding(error)
        case .sending, .receiving, .collecting, .reacting, .redirecting, .challenged, .consultingChallenge, .rejecting, .completed:
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

    /// The task starts to wait inside the pipeline (a gate, an interceptor that suspends, a
    /// batch, the slot queue, a reaction). The first wait of a stretch sets one timer for the
    /// request's `timeoutInterval` from the stretch's start: every wait of the stretch counts,
    /// as a plain session counts every second without progress.
    mutating func waitBegins() -> WaitTimer? {
        guard !waiting.armed, !isCompleted else { return nil }
        waiting.armed = true
        let interval = task.request.timeoutInterval
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
        case .sending, .receiving, .collecting, .redirecting, .challenged, .consultingChallenge, .rejecting, .completed:
            return .none
        }
    }

    // MARK: Helpers

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
        case .intercepting(let current):
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
        (error as? URLTaskError)?.about(task.request, attempt: task.attempt) ?? error
    }

    private mutating func complete(_ completion: Completion) -> ProceedAction {
        state = .completed
        if case .fail(let error) = completion { return .complete(failing(error)) }
        return .complete(completion)
    }

    /// Ends the task with `error` from wherever it is: what it must leave or stop.
    private mutating func failEnding(_ error: any Error) -> FailAction {
        var held: Int?
        if case .held(let index, _) = state { held = index }
        let running = work
        let onNetwork = transfer
        state = .completed
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

    /// Starts the task again from `request` (a followed redirect, a challenge answered with a
    /// credential): a body on the request replaces the one held; a request with the same method
    /// (a 307, a challenge answered) sends the held body again; a new method, none.
    private mutating func restart(from request: URLRequest, now: DispatchTime) {
        let carried = URLTaskBody(request: request)
        if !carried.isNone {
            body = carried
            bodySent = false
        } else if request.httpMethod != base.httpMethod {
            body = .none
            bodySent = false
        }
        base = request
        base.httpBody = nil
        base.httpBodyStream = nil
        attempt += 1
        beginStretch(now)
        task = task.startingOver(attempt: attempt, request: base, body: body)
        state = .gated(gate: nil)
    }

    /// A new stretch of waits starts now; a timer set for the previous one no longer fires.
    private mutating func beginStretch(_ now: DispatchTime) {
        waiting = WaitPhase(generation: waiting.generation + 1, started: now)
    }

    private mutating func beginReaction(reactor: Int, outcome: URLTaskOutcome, body: Data, now: DispatchTime) -> TransferEndAction {
        reactions[reactor] += 1
        if reactions[reactor] > reactors[reactor].maximumReactions {
            state = .completed
            return .complete(failing(URLTaskError.tooManyAttempts(reactors[reactor].component, attempts: attempt)))
        }
        // The transfer has ended: waiting for the reaction starts a new stretch without progress.
        beginStretch(now)
        state = .reacting(reactor: reactor, outcome: outcome, body: body)
        return .react(reactor: reactor, outcome: outcome, body: body, task: task, requeued: requeuedBy[reactor])
    }

    private mutating func advance(to index: Int) -> ProceedAction {
        var index = index
        while skippedInterceptors.contains(index) { index += 1 }
        if index < interceptorCount {
            state = .intercepting(index: index)
            return .runInterceptor(index: index, task: task)
        }
        state = .awaitingConnection
        return .acquireConnection(request: task.request, restamp: needsRestamp)
    }
}
