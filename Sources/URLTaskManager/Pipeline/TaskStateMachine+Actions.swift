import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// What the events of ``TaskStateMachine`` return: one action type per event (events that
// lead to the same next steps share one), and what they are told.
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

    /// What the task does next on its way to the network: the action of every event after which
    /// it moves on (its start, the gates opening, an interceptor returning, its batch released,
    /// a reactor's work ending, stale headers, a restart).
    enum ProceedAction {
        /// Nothing: the event came late (see the event).
        case none
        /// Check the gates of the reactors that hold new tasks (``EngineStorage/headersWillBeDecided(_:)``).
        case checkGates
        /// Run interceptor `index` on `task`.
        case runInterceptor(index: Int, task: URLTask)
        /// Put the task in interceptor `index`'s batch; a hold timer names `generation`.
        /// `flushesSeen` is the flush count the interceptor decided under.
        case hold(index: Int, maximumWait: Duration?, generation: Int, flushesSeen: Int)
        /// Release interceptor `index`'s batch; this task then continues at `index + 1`.
        case releaseBatch(index: Int)
        /// Ask admission to let the task go; `request` names its host's slot, `restamp` says its
        /// headers were not decided by the interceptors (a requeue without them).
        case acquireConnection(request: URLRequest, restamp: Bool)
        /// The task ended.
        case complete(Completion)
    }

    /// What happens when admission lets the task go (``connectionGranted()``).
    enum SendAction {
        /// Start the transfer of `request` with `body` (attempt `attempt`).
        case send(request: URLRequest, body: URLTaskBody, attempt: Int)
        /// The request cannot be sent (an invalid header, a stream already read): give the slot
        /// back and fail.
        case refuse(any Error)
        /// The task ended meanwhile (a cancel): the slot goes to the next task.
        case giveSlotBack
    }

    /// What happens when the transfer's inner task exists (``transferStarted(_:attempt:)``).
    enum TransferStartedAction {
        case none
        /// The task ended while the transfer was being created: stop it.
        case cancel(any TransferHandle)
    }

    /// What happens when an interceptor's or a reaction's Swift task exists (``workStarted(_:)``).
    enum WorkStartedAction {
        case none
        /// The task ended before the work could be recorded: cancel it.
        case cancel(Task<Void, Never>)
    }

    /// What happens with a response head (``transportReceived(response:reactor:challenge:)``).
    enum HeadAction {
        case none
        /// Give the caller this response; its body follows.
        case forward(URLResponse)
    }

    /// What happens with a chunk of the body (``transportReceived(data:)``).
    enum DataAction {
        case none
        /// Give the caller this chunk.
        case forward(Data)
    }

    /// What happens with a redirect the transfer met (``redirectReceived(tooMany:)``).
    enum RedirectAction {
        /// Ask the caller's side, proposing the redirect as followed from `current`.
        case consult(current: URLRequest)
        /// Tell the inner session not to follow, and ask nobody (one too many, or the task ended).
        case decline
    }

    /// What happens when the transfer ends (``transportCompleted(error:reactor:now:)``). Every
    /// case but `react` gives the task's connection slot back first; `react` hands it over in
    /// the same transition that starts or joins the reactor's run.
    enum TransferEndAction {
        /// The transfer of a task that had already ended: only the slot goes back.
        case none
        /// The task ended with the transfer.
        case complete(Completion)
        /// Hand the task to reactor `reactor`. `requeued` says it was already sent again after
        /// one of that reactor's runs; `task` is the attempt as sent.
        case react(reactor: Int, outcome: URLTaskOutcome, body: Data, task: URLTask, requeued: Bool)
        /// Ask the caller's side about the authentication challenge of `response`: the challenge
        /// failed `previousFailures` times before, and a credential resends `request`.
        case consultChallenge(response: HTTPURLResponse, previousFailures: Int, request: URLRequest)
        /// A followed redirect: start again from the gates with the new request.
        case restart
    }

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

    /// What happens when the manager fails a task (``fail(_:)``, ``holdExpired(index:generation:error:)``,
    /// ``waitExpired(generation:error:)``, ``abort(_:)``).
    enum FailAction {
        /// The task had already ended, or is past the point this failure concerns.
        case none
        /// Complete with `error`: take it out of batch `heldIn` if it is held, cancel `work` (an
        /// interceptor or a reaction running for it), and stop `transfer` if it is on the network.
        case fail(any Error, heldIn: Int?, work: Task<Void, Never>?, transfer: (any TransferHandle)?)
    }

    /// The timer to set for the current stretch of waits (``waitBegins()``).
    struct WaitTimer {
        /// The stretch it belongs to (``waitExpired(generation:error:)``).
        var generation: Int
        /// When the request's `timeoutInterval` runs out, counted from the stretch's start.
        var deadline: DispatchTime
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

    /// What the task state machine needs to know of one reactor.
    struct ReactorTraits {
        /// Who it is, for errors.
        var component: URLTaskError.Component
        /// How often one task may trigger it.
        var maximumReactions: Int
        /// Whether it gives the caller the response it reacted to (it does not requeue).
        var delivers: Bool

        init(component: URLTaskError.Component, maximumReactions: Int, delivers: Bool = false) {
            self.component = component
            self.maximumReactions = maximumReactions
            self.delivers = delivers
        }
    }
}
