import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One task's ``TaskStateMachine``, held under its engine's lock, and the I/O its actions name.
///
/// Every event is one lock section of the engine (``EngineStorage/withLock(_:)``): the task's
/// machine and admission move together (a gate checked and waited at, a slot taken and the
/// request let go, a transfer's end and its slot handed over), then the returned action is
/// performed with the lock released. The machine holds everything the task carries; this class
/// keeps only who the task is and whom it talks to (its ``TaskEnvironment``, its sink, its
/// observer). No interceptor, reactor, transport call or client callback ever runs under the
/// lock: where an event needs the answer of such code first (which reactor wants a response,
/// the credential version a reactor reports, whether `failTasks`'s predicate matches), that
/// code runs on a snapshot of the task taken just before, and the event is sent with its answer.
// @unchecked Sendable: `machine`, `observation` and `timers` are guarded by `engine`'s lock.
final class TaskStorage: TransportEvents, PipelineTaskHandle, @unchecked Sendable {
    let id: URLTask.ID
    /// The URL the caller asked for, which the errors a plain session would give name.
    let callerURL: URL?
    /// What the caller changed for this request alone (read from it, and removed, at creation).
    private let policy: URLTaskPolicy?
    /// The engine whose lock guards this task's machine, and which admits it to the network.
    private let engine: EngineStorage
    private var machine: TaskStateMachine
    /// Where the outcome goes (read by the pipeline only to find the manager's own calls).
    let sink: any TaskSink
    private let environment: any TaskEnvironment
    /// Records and emits this task's events; `nil` when nobody listened as it started.
    private let observer: TaskObserver?
    /// Which reactors exempt this task (``URLTaskReactorConfiguration/exempts``), by index:
    /// asked once, of the caller's request, for admission's gates and for every outcome.
    let exemptedBy: [Bool]
    /// The reactors that cover this task (they hold new tasks and do not exempt it) and keep a
    /// credential version of their own: the ones whose reported versions are read before it leaves.
    private let reporters: [Int]
    /// The caller's body when it is a stream a reactor may need to send again (read once, as
    /// the task starts).
    private let streamBody: InputStream?
    /// The manager's outcome observers; `nil` when it has none.
    private let outcomeObservers: OutcomeObservers?
    /// Whether the task's end or next attempt waits for its outcomes to be observed.
    private typealias Observation = OutcomeObservationStateMachine<TaskStateMachine.Completion, TaskStateMachine.ProceedAction>
    private var observation = Observation()
    /// The timers armed for this task's waits, cancelled as it ends so none outlives it (a
    /// request's timeout is 60 s by default). Each checks, when it fires, that the wait it
    /// bounds is still on (the machine's generations), so one that fires anyway changes nothing.
    private var timers: [any PipelineTimer] = []

    init(id: URLTask.ID, request: URLRequest, body: URLTaskBody, sink: any TaskSink, environment: any TaskEnvironment) {
        self.id = id
        self.callerURL = request.url
        let (request, policy) = URLTaskPolicy.take(from: request)
        self.policy = policy
        self.engine = environment.engine
        // The configuration's additional headers belong to the caller's request, not to every
        // request the inner session sends (a cross-origin redirect must not carry them).
        var bare = environment.additionalHeaders.applied(to: request)
        bare.removeBody()
        let exemptedBy = environment.reactors.map { $0.configuration.exempts(bare) }
        self.exemptedBy = exemptedBy
        self.reporters = environment.reactors.indices.filter {
            !exemptedBy[$0] && environment.reactors[$0].configuration.mode.holdsNewTasks
                && environment.reactors[$0].reportsCredentialVersions
        }
        if !environment.reactors.isEmpty, case .stream(let stream) = body { streamBody = stream } else { streamBody = nil }
        var task = URLTask(id: id, originalRequest: bare, attempt: 1, body: body)
        task.policy = policy
        self.sink = sink
        self.environment = environment
        self.outcomeObservers = environment.outcomeObservers
        self.observer = environment.events.isListening ? TaskObserver(id: id, request: request, hub: environment.events) : nil
        let components = environment.interceptorComponents
        let types = environment.interceptorTypes
        self.machine = TaskStateMachine(
            task: task,
            interceptorCount: components.count,
            skipping: Set(components.indices.filter { policy?.skips(components[$0], type: types[$0]) == true }),
            reactors: environment.reactors.map {
                TaskStateMachine.ReactorTraits(
                    component: $0.component, maximumReactions: $0.configuration.maximumReactionsPerTask,
                    delivers: $0.configuration.mode.afterwards == .deliverResponse
                )
            },
            validation: policy?.responseValidation ?? environment.options.responseValidation,
            now: environment.runtime.now
        )
    }

    // MARK: Actions decided in sections

    /// What a section decided for the task on its way to the network: the machine's next step,
    /// with the gates already checked in the same section (a `.checkGates` never leaves one).
    enum Step {
        case proceed(TaskStateMachine.ProceedAction)
        /// The task waits at reactor `reactor`'s gate (recorded by admission and by the machine
        /// in the same section).
        case waitAtGate(reactor: Int)
    }

    /// What admission's decision for the task (``admitted(_:in:)``) leads to.
    enum AdmittedAction {
        case none
        /// Start the transfer; `whole`: it may be a whole one (``TaskStateMachine/mayTakeWholeTransfer``).
        case send(request: URLRequest, body: URLTaskBody, attempt: Int, whole: Bool)
        /// A slot was handed over on another task's event: read what the reactors report, then
        /// be judged again holding it (``confirmSlot()``).
        case confirmSlot
        /// Wait for a slot; a timer for `generation` bounds the wait by the request's timeout.
        case waitForSlot(generation: Int, host: String)
        /// Go on (run the interceptors again) or wait at a gate.
        case step(Step)
        /// The task ended: the request could not be sent, or late for a failed run.
        case fail(TaskStateMachine.FailAction)
        /// The request cannot be sent (an invalid header, a stream already read); its slot went back.
        case refuse(any Error)
    }

    /// What the end of a run it waited on or was gated by leads to.
    enum RunEndAction {
        /// The task waited on the run: its reaction ended; `requeued` is the attempt it is sent
        /// again as, if it is.
        case reacted(Step, requeued: Int?)
        /// The task waited at the run's gate: it goes on.
        case gateOpened(Step)
        /// The task waited at the gate of a run that failed: it fails with the run's error.
        case gateFailed(TaskStateMachine.FailAction)
    }

    // MARK: Events

    func start() {
        var replayable: URLTaskBody?
        if let streamBody {
            // A reactor may send the task again, and a stream can be read only once.
            switch ReplayableBody.prepare(streamBody, limit: environment.options.maximumReplayableBodySize) {
            case .success(let body): replayable = body
            case .failure(let error): return failUnsent(error)
            }
        }
        proceed(engine.withLock { passGates(machine.start(replayableBody: replayable), &$0) })
    }

    /// The caller cancelled (`stopLoading`, on the session's work queue). The transition is made
    /// at once, so nothing that happens next (a connection slot granted, a batch released) can
    /// still send the task; the action is performed elsewhere, because stopping an inner task
    /// syncs onto that very work queue.
    func cancel() {
        let action = engine.withLock { _ in machine.cancel() }
        if case .none = action { return }
        environment.runtime.async { self.perform(action) }
    }

    func batchReleased(index: Int) {
        observer?.released(by: environment.interceptorComponents[index])
        proceed(engine.withLock { passGates(machine.released(index: index), &$0) })
    }

    /// Ends the task with `error`, wherever it is, if `matches` says so of it as it stands
    /// (``URLTaskManager/failTasks(with:where:)``). `matches` is the caller's code: it runs on a
    /// snapshot, outside the lock; a task that moved on since is still ended (an abort concerns
    /// the task wherever it is).
    func abort(with error: any Error, if matches: (URLTask) -> Bool) {
        guard matches(engine.withLock { _ in machine.task }) else { return }
        let action = engine.withLock { _ in machine.abort(error) }
        // Off the caller's thread: stopping a transfer syncs onto URLSession's work queue.
        environment.runtime.async { self.perform(action) }
    }

    /// Fails the task if it has not been sent yet (invalidation, an unreadable stream body).
    func failUnsent(_ error: any Error) {
        perform(engine.withLock { _ in machine.fail(error) })
    }

    // MARK: Events of the engine, with its lock held

    /// With the engine's lock held: a `.checkGates` goes through admission's gates in the same
    /// section. The task waits at a running reactor's gate, or its credential stamps are recorded
    /// and it goes on to the interceptors (stamped before they run, not at send: an interceptor,
    /// or a batch hold, may apply a token, then a run may start and end before the task is sent).
    private func passGates(_ action: TaskStateMachine.ProceedAction, _ state: inout EngineStorage.State) -> Step {
        guard case .checkGates = action else { return .proceed(action) }
        // Ended meanwhile (a cancel between a restart and this section): nothing to decide.
        guard !machine.isCompleted else { return .proceed(.none) }
        switch state.admission.headersWillBeDecided(id) {
        case .waitAtGate(let reactor):
            machine.waitingAtGate(reactor: reactor)
            return .waitAtGate(reactor: reactor)
        case .proceed:
            return .proceed(machine.gateOpened())
        }
    }

    /// With the engine's lock held: admission decided `decision` for the task, on its own event
    /// or on another task's (a slot handed over). Returns what the task does, and the tasks a
    /// slot it gave back was handed to.
    /// - Parameter read: The decision was made with what the task's reactors report read just
    ///   before (its own event). A slot handed over on another task's event was judged by what
    ///   the engine last heard: a task whose reactors keep versions of their own reads them
    ///   first (their state may change outside any run: the app renewing a token).
    func admitted(
        _ decision: AdmissionStateMachine.SendAction, in state: inout EngineStorage.State, read: Bool = false
    ) -> (AdmittedAction, handedOver: [(URLTask.ID, AdmissionStateMachine.SendAction)]) {
        switch decision {
        case .send:
            if !read, !reporters.isEmpty, !machine.isCompleted { return (.confirmSlot, []) }
            switch machine.connectionGranted() {
            case .send(let request, let body, let attempt):
                return (.send(request: request, body: body, attempt: attempt, whole: machine.mayTakeWholeTransfer), [])
            case .refuse(let error):
                return (.refuse(error), state.admission.transferEnded(id))
            case .giveSlotBack:
                // Cancelled meanwhile: the slot goes to the next task.
                return (.none, state.admission.transferEnded(id))
            }
        case .waitForSlot(let generation):
            return (.waitForSlot(generation: generation, host: Self.host(of: machine.task.request)), [])
        case .waitAtGate(let reactor):
            machine.admissionGated(reactor: reactor)
            return (.step(.waitAtGate(reactor: reactor)), [])
        case .reintercept:
            return (.step(passGates(machine.headersStale(), &state)), [])
        case .fail(let reactor):
            return (.fail(machine.fail(EngineStorage.lastRunError(reactor, in: state, reactors: engine.reactors))), [])
        }
    }

    /// With the engine's lock held: the run of reactor `index` this task waited on ended.
    func reactionFinished(
        reactor index: Int, outcome: ReactorRunner.Outcome, in state: inout EngineStorage.State
    ) -> RunEndAction {
        var action = machine.reactionFinished(reactor: index, result: reactionResult(index, outcome))
        var requeued: Int?
        switch action {
        case .checkGates, .acquireConnection:
            requeued = machine.attempt
            if outcomeObservers != nil {
                // Sent again only once the observers saw every outcome (``OutcomeObservationStateMachine``).
                switch observation.resendRequested(action) {
                case .resendNow(let now): action = now
                case .wait, .drop: action = .none
                }
            }
        default:
            break
        }
        return .reacted(passGates(action, &state), requeued: requeued)
    }

    /// With the engine's lock held: a run whose gate held this task ended.
    func gateOpened(by outcome: ReactorRunner.Outcome, in state: inout EngineStorage.State) -> RunEndAction {
        switch outcome {
        case .succeeded, .declined:
            // Another covering reactor's run may be going: the gates are checked again.
            guard !machine.isCompleted else { return .gateOpened(.proceed(.none)) }
            return .gateOpened(passGates(.checkGates, &state))
        case .failed(let error):
            return .gateFailed(machine.fail(error))
        }
    }

    /// What a reactor's outcome means for the task, by the reactor's mode.
    private func reactionResult(_ index: Int, _ outcome: ReactorRunner.Outcome) -> TaskStateMachine.ReactionResult {
        switch outcome {
        case .succeeded:
            switch environment.reactors[index].configuration.mode.afterwards {
            case .sendAgain: return .requeue(reintercept: true)
            case .sendAgainUnchanged: return .requeue(reintercept: false)
            case .deliverResponse: return .deliver
            }
        case .failed(let error):
            return .fail(error)
        case .declined:
            return .deliver
        }
    }

    /// A per-task reaction (no shared run) ended: one section, as a shared run's end is.
    private func perTaskReactionFinished(reactor index: Int, outcome: ReactorRunner.Outcome) {
        perform(engine.withLock { reactionFinished(reactor: index, outcome: outcome, in: &$0) })
    }

    /// Performs what the end of a run decided for this task.
    func perform(_ action: RunEndAction) {
        switch action {
        case .reacted(let step, let requeued):
            if let observer {
                observer.reactionEnded()
                if let requeued { observer.requeued(attempt: requeued) }
            }
            proceed(step)
        case .gateOpened(let step):
            proceed(step)
        case .gateFailed(let action):
            perform(action)
        }
    }

    /// Performs what admission decided for this task.
    func perform(_ action: AdmittedAction) {
        switch action {
        case .none:
            return
        case .send(let request, let body, let attempt, let whole):
            send(request, body: body, attempt: attempt, whole: whole)
        case .confirmSlot:
            confirmSlot()
        case .waitForSlot(let generation, let host):
            observer?.waiting(for: .connectionSlot(host: host))
            armSlotTimeout(generation: generation)
            waitBegins()
        case .step(let step):
            proceed(step)
        case .fail(let action):
            perform(action)
        case .refuse(let error):
            complete(.fail(error))
        }
    }

    func transportDidReceive(response: URLResponse) {
        // An interim head (100, 103) is not the answer: the caller, the redirect decision and
        // the reactors see only the final one.
        if TaskStateMachine.isInterim(response) { return }
        let http = response as? HTTPURLResponse
        if let http, outcomeObservers != nil { observe(.response(http)) }
        let reactor = http.flatMap { chooseReactor(for: .response($0)) }
        let challenge = sink.answersChallenges && http.map(AuthenticationChallenge.isChallenge) == true
        observer?.responseHead(response)
        let action = engine.withLock { _ in machine.transportReceived(response: response, reactor: reactor, challenge: challenge) }
        if case .forward(let response) = action { sink.receive(response: response) }
    }

    /// The transfer met a redirect; the inner session waits for `decide`, which is always told
    /// not to follow: the pipeline follows a redirect itself, through the interceptors.
    func transportWillRedirect(_ response: HTTPURLResponse, to newRequest: URLRequest, decide: @escaping @Sendable (URLRequest?) -> Void) {
        let action = engine.withLock { _ in
            let url = machine.task.request.url
            return machine.redirectReceived(tooMany: URLError.tooManyRedirects(url: url))
        }
        guard case .consult(let current) = action else { return decide(nil) }
        let proposed = Redirect.request(following: response, to: newRequest, from: current)
        sink.redirect(response, to: proposed) { [self] answer in
            // The task keeps the caller's policy; an answer made from `originalRequest` carries
            // it again, and interceptors never see it.
            let answer = answer.map(URLTaskPolicy.removed(from:))
            // Asked first, as a plain session asks it; a request that leaves HTTP then fails.
            let refused = answer.flatMap { Redirect.refusal(of: $0.url, redirectedFrom: response) }
            if let answer, refused == nil { observer?.redirected(response, to: answer.url) }
            engine.withLock { _ in machine.redirectAnswered(answer, refused: refused) }
            decide(nil)
        }
    }

    func transportDidReceive(data: Data) {
        observer?.received(data.count)
        if case .forward(let data) = engine.withLock({ _ in machine.transportReceived(data: data) }) { sink.receive(data: data) }
    }

    func transportDidSendBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        sink.sentBody(totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend)
    }

    func transportDidComplete(error: (any Error)?) {
        // Which reactor wants a transport error, and what a reactor that takes the outcome
        // reports of the task as sent, are the reactors' code: asked outside the lock, just
        // before the section, and only when a reactor may take the outcome.
        var reactor: Int?
        var reading: ReactorRunStateMachine.ReportedVersion?
        // Read only when it can matter: an error that may be the outcome, or an answer collected
        // for a reactor that reports versions (not on every answer of a manager with reactors).
        if error != nil ? !environment.reactors.isEmpty || outcomeObservers != nil : engine.reportsCredentialVersions {
            let (awaitingHead, collecting, snapshot) = engine.withLock { _ in
                let awaitingHead = error != nil && machine.isAwaitingResponseHead
                let collecting = machine.collectingFor.flatMap { environment.reactors[$0].reportsCredentialVersions ? $0 : nil }
                return (awaitingHead, collecting, awaitingHead || collecting != nil ? machine.task : nil)
            }
            if let error, awaitingHead, let snapshot {
                if outcomeObservers != nil { observe(.failure(error)) }
                reactor = chooseReactor(for: .failure(error), of: snapshot)
            }
            if let snapshot, let taking = reactor ?? collecting, environment.reactors[taking].reportsCredentialVersions {
                reading = engine.reportedVersion(of: snapshot, by: taking)
            }
        }
        let now = environment.runtime.now
        // An answer no reactor needed tells the loop guards that the credential works; not when
        // the request skipped a reactor, which never saw the answer.
        let countsAsAnswer = policy?.skippedReactors.isEmpty != false
        // One section: the machine's end of the transfer and the slot handed over (before the
        // caller hears of the end, so it never sees it taken); for a shared reactor, its run
        // started or joined (or the task answered at once) in the same transition, so the task
        // that gets the slot finds the run going.
        let (end, decided) = engine.withLock { state in
            let forwarded = machine.isForwardingResponse
            let action = machine.transportCompleted(error: error, reactor: reactor, now: now)
            guard case .react(let index, let outcome, let body, let task, let requeued) = action else {
                let decided = EngineStorage.admit(state.admission.transferEnded(id, answered: forwarded && countsAsAnswer), in: &state)
                // A followed redirect starts again from the gates; its 3xx was an outcome too.
                if case .restart = action { return (TransferEnd.restart(resend(.checkGates, &state)), decided) }
                return (TransferEnd.ended(action), decided)
            }
            let reaction = Reaction(index: index, outcome: outcome, body: body, task: task, timer: machine.waitBegins())
            guard environment.reactors[index].configuration.mode.isShared else {
                return (.perTask(reaction), EngineStorage.admit(state.admission.transferEnded(id), in: &state))
            }
            let (need, handedOver) = state.admission.transferEndedNeedingReaction(
                id, reactor: index, alreadyRequeued: requeued, reported: reading, now: .now)
            let decided = EngineStorage.admit(handedOver, in: &state)
            var immediate: ReactorRunner.Outcome?
            switch need {
            case .wait, .startRun: break
            case .requeueNow: immediate = .succeeded
            case .failNow: immediate = .failed(EngineStorage.lastRunError(index, in: state, reactors: engine.reactors))
            case .deliverNow: immediate = .declined
            case .refuseLoop(let runs):
                let configuration = environment.reactors[index].configuration
                immediate = .failed(
                    URLTaskError.reactionLoop(
                        environment.reactors[index].component, runs: runs, window: configuration.mode.loopGuard?.window ?? .zero))
            }
            let shared = SharedReaction(
                need: need, run: state.admission.reactors[index].currentRun,
                immediate: immediate.map { reactionFinished(reactor: index, outcome: $0, in: &state) })
            return (.shared(reaction, shared), decided)
        }
        engine.tell(decided)
        observer?.transferEnded()
        switch end {
        case .ended(.complete(let completion)):
            complete(completion)
        case .ended(.consultChallenge(let response, let failures, let request)):
            consultChallenge(response, previousFailures: failures, request: request)
        case .ended:
            break
        case .restart(let step):
            proceed(step)
        case .perTask(let reaction):
            reactAlone(reaction)
        case .shared(let reaction, let shared):
            reactTogether(reaction, shared)
        }
    }

    /// What the end of a transfer decided (``transportDidComplete(error:)``).
    private enum TransferEnd {
        /// The task ended, was answered, or asks the caller's side about a challenge.
        case ended(TaskStateMachine.TransferEndAction)
        /// A followed redirect: the task starts again from the gates.
        case restart(Step)
        /// A reactor that runs its work for each task on its own takes the outcome.
        case perTask(Reaction)
        /// A shared reactor's run was started or joined, or the task was answered at once.
        case shared(Reaction, SharedReaction)
    }

    /// The outcome a reactor takes, and the timer of the wait for it.
    private struct Reaction {
        var index: Int
        var outcome: URLTaskOutcome
        var body: Data
        var task: URLTask
        var timer: TaskStateMachine.WaitTimer?
    }

    /// What a shared reactor decided for the task, in the section that ended its transfer.
    private struct SharedReaction {
        var need: ReactorRunStateMachine.NeedAction
        /// The run the task waits on, if any.
        var run: Int?
        /// The task needed no run: what the reaction's end decided (requeued, failed, answered).
        var immediate: RunEndAction?
    }

    // MARK: Actions

    /// With the engine's lock held: `action` may send the task again after an outcome; with
    /// observers, only once they were told of every outcome of the task
    /// (``OutcomeObservationStateMachine``). The gates are then checked in the same section.
    private func resend(_ action: TaskStateMachine.ProceedAction, _ state: inout EngineStorage.State) -> Step {
        var action = action
        switch action {
        case .checkGates, .acquireConnection:
            guard outcomeObservers != nil else { break }
            switch observation.resendRequested(action) {
            case .resendNow(let now): action = now
            case .wait, .drop: action = .none
            }
        default:
            break
        }
        return passGates(action, &state)
    }

    private func proceed(_ step: Step) {
        switch step {
        case .proceed(let action):
            proceed(action)
        case .waitAtGate(let reactor):
            observer?.waiting(for: .reactorGate(reactor: environment.reactors[reactor].name))
            waitBegins()
        }
    }

    private func proceed(_ action: TaskStateMachine.ProceedAction) {
        switch action {
        case .none:
            return
        case .checkGates:
            preconditionFailure("a .checkGates never leaves the section that returned it (passGates)")
        case .runInterceptor(let index, let task):
            runInterceptor(index, on: task)
        case .hold(let index, let maximumWait, let generation, let flushes):
            observer?.held(by: environment.interceptorComponents[index])
            waitBegins()
            let batch = environment.batches[index]
            batch.hold(self, maximumWait: maximumWait, flushesSeen: flushes)
            // A cancel that raced with the hold found nothing to leave (the batch is a storage of
            // its own: its lock is not the engine's).
            if engine.withLock({ _ in machine.isCompleted }) { batch.remove(self) }
            armHoldTimeout(index: index, generation: generation)
        case .releaseBatch(let index):
            environment.batches[index].release(with: self)
        case .acquireConnection(let request, let restamp):
            wantsToSend(request, restamp: restamp)
        case .complete(let completion):
            complete(completion)
        }
    }

    /// The task is ready to leave: one section asks admission and, if it may go, lets it go.
    private func wantsToSend(_ request: URLRequest, restamp: Bool) {
        // The slot key matters only where slots are kept.
        let host = engine.slotsPerHost == nil ? "" : Self.host(of: request)
        // What the covering reactors report of the task as it is about to leave: their code, read
        // before the section; admission judges it (``ReactorRunStateMachine/lateness(of:)``).
        let readings = reporters.isEmpty ? [:] : engine.outdatedVersions(of: engine.withLock { _ in machine.task }, by: reporters)
        let (action, decided) = engine.withLock { state in
            let decision = state.admission.wantsToSend(id, host: host, restamp: restamp, reported: readings)
            let (action, handedOver) = admitted(decision, in: &state, read: true)
            return (action, EngineStorage.admit(handedOver, in: &state))
        }
        engine.tell(decided)
        perform(action)
    }

    /// The task was handed a slot on another task's event: what its reactors report is read
    /// now, and one section judges it again with the readings, holding the slot, then lets it
    /// go or passes the slot on.
    private func confirmSlot() {
        let readings = engine.outdatedVersions(of: engine.withLock { _ in machine.task }, by: reporters)
        let (action, decided) = engine.withLock { state in
            let (decision, passedOn) = state.admission.slotHandedOver(id, reported: readings)
            let (action, handedOver) = admitted(decision, in: &state, read: true)
            return (action, EngineStorage.admit(passedOn + handedOver, in: &state))
        }
        engine.tell(decided)
        perform(action)
    }

    private func perform(_ action: TaskStateMachine.CancelAction) {
        switch action {
        case .none:
            return
        case .stopTransfer(let transfer):
            // A caller's own cancel stops the transfer; the session's invalidation abandons it
            // (see `Pipeline.abandonsTransfers`). One not created yet is stopped as it is (`transferStarted`).
            if let transfer, !environment.abandonsTransfers { environment.stopTransfer(transfer) }
        case .leaveSlotQueue:
            break  // admission takes it out of the queue as it ends
        case .leaveBatch(let index):
            environment.batches[index].remove(self)
        case .abandon(let work):
            // Admission takes it off a reactor's gate or run as it ends.
            work?.cancel()
        }
        observer?.completed(error: URLError(.cancelled))
        cancelTimers()
        environment.taskEnded(self)
    }

    private func perform(_ action: TaskStateMachine.FailAction) {
        guard case .fail(let error, let heldIn, let work, let transfer) = action else { return }
        if let heldIn { environment.batches[heldIn].remove(self) }
        work?.cancel()
        if let transfer { environment.stopTransfer(transfer) }
        complete(.fail(error))
    }

    /// Tells the caller, then lets the task go; with observers, only once they were told of
    /// every outcome of the task (``OutcomeObservationStateMachine``).
    private func complete(_ completion: TaskStateMachine.Completion) {
        if let outcomeObservers {
            // One section: the end, for the observers that want it, is one more outcome the
            // task's end waits for (so the end then waits: the observed callback finishes it).
            let wantsEnd = outcomeObservers.observesEnds
            let (action, snapshot): (Observation.FinishAction, URLTask?) = engine.withLock { _ in
                var snapshot: URLTask?
                if wantsEnd {
                    observation.outcomeQueued()
                    snapshot = machine.task
                }
                return (observation.finishRequested(completion), snapshot)
            }
            if let snapshot {
                var error: (any Error)?
                if case .fail(let failure) = completion { error = failure }
                outcomeObservers.observeEnd(of: snapshot, error: error) { [self] in observed() }
            }
            if case .wait = action { return }
        }
        finish(completion)
    }

    /// Hands `outcome` to the manager's observers, on their queue; the task's end waits for it.
    private func observe(_ outcome: URLTaskOutcome) {
        guard let outcomeObservers else { return }
        let snapshot = engine.withLock { _ in
            observation.outcomeQueued()
            return machine.task
        }
        outcomeObservers.observe(outcome, of: snapshot) { [self] in observed() }
    }

    /// The observers were told of one queued outcome (or end): the task's end or next attempt,
    /// if it waited for that one, goes on.
    private func observed() {
        let next: (completion: TaskStateMachine.Completion?, step: Step?) = engine.withLock { state in
            switch observation.outcomeObserved() {
            case .none: return (nil, nil)
            case .finish(let completion): return (completion, nil)
            case .resend(let action): return (nil, passGates(action, &state))
            }
        }
        if let completion = next.completion { finish(completion) }
        if let step = next.step { proceed(step) }
    }

    private func finish(_ completion: TaskStateMachine.Completion) {
        switch completion {
        case .finish:
            observer?.completed()
            sink.finish()
        case .respond(let response, let data):
            observer?.completed(response: response)
            sink.receive(response: response)
            if !data.isEmpty { sink.receive(data: data) }
            sink.finish()
        case .fail(let error):
            observer?.completed(error: error)
            sink.fail(error)
        }
        cancelTimers()
        environment.taskEnded(self)
    }

    /// Arms a timer for one of the task's waits, kept to be cancelled when the task ends.
    private func arm(_ deadline: DispatchTime, _ work: @escaping @Sendable () -> Void) {
        let timer = environment.runtime.at(deadline, work)
        engine.withLock { _ in timers.append(timer) }
    }

    private func cancelTimers() {
        let armed = engine.withLock { _ in
            defer { timers = [] }
            return timers
        }
        for timer in armed { timer.cancel() }
    }

    /// Asks the caller's side about the challenge of `response` (a 401): a credential sends the
    /// request again through the pipeline; anything else gives the caller the 401 (without its
    /// challenge header, which would make the caller's session answer it again) or cancels.
    private func consultChallenge(_ response: HTTPURLResponse, previousFailures: Int, request: URLRequest) {
        let challenge = AuthenticationChallenge.make(
            for: response, previousFailureCount: previousFailures, storage: environment.credentialStorage)
        sink.challenge(challenge) { [self] disposition, credential in
            let answer = AuthenticationChallenge.answer(
                disposition, credential: credential, to: challenge, response: response, request: request)
            let now = environment.runtime.now
            proceed(engine.withLock { resend(machine.challengeAnswered(answer, now: now), &$0) })
        }
    }

    private func runInterceptor(_ index: Int, on task: URLTask) {
        let work = environment.intercept(index, task) { [self] outcome, snapshot, flushes in
            let interceptor = environment.interceptorComponents[index]
            observer?.intercepted(interceptor, outcome)
            proceed(
                engine.withLock { state in
                    switch outcome {
                    case .success(let command):
                        return passGates(
                            machine.interceptorReturned(
                                index: index, command: command, snapshot: snapshot, flushes: flushes, interceptor: interceptor),
                            &state)
                    case .failure(let error):
                        return passGates(machine.interceptorThrew(index: index, error: error, interceptor: interceptor), &state)
                    }
                })
        }
        // An interceptor that decided without suspending has already moved the task on.
        guard let work else { return }
        // It may wait (for a credential, a lock, another service): that counts toward the timeout.
        waitBegins()
        if case .cancel(let work) = engine.withLock({ _ in machine.workStarted(work) }) { work.cancel() }
    }

    private func armHoldTimeout(index: Int, generation: Int) {
        // Both come from the caller: clamped before any arithmetic (0.2.0 trapped converting a
        // policy's 1e16 s, NaN or infinity to milliseconds).
        let limit = (policy?.maximumHoldSeconds.map(Duration.init(clampingSeconds:)) ?? environment.options.maximumHoldTime).clampedWait
        let interceptor = environment.interceptorComponents[index]
        let runtime = environment.runtime
        arm(runtime.now + limit.dispatchInterval) { [weak self] in
            guard let self else { return }
            let error = URLTaskError.holdTimedOut(interceptor, after: limit)
            perform(engine.withLock { _ in machine.holdExpired(index: index, generation: generation, error: error) })
        }
    }

    private func chooseReactor(for outcome: URLTaskOutcome) -> Int? {
        guard !environment.reactors.isEmpty else { return nil }
        return chooseReactor(for: outcome, of: engine.withLock { _ in machine.task })
    }

    /// The first reactor that takes `outcome` of `snapshot`: the reactors' code, outside the lock.
    private func chooseReactor(for outcome: URLTaskOutcome, of snapshot: URLTask) -> Int? {
        for reactor in environment.reactors where !exemptedBy[reactor.index] {
            if let policy, policy.skips(reactor.component, type: reactor.type) { continue }
            if reactor.reactor.shouldReact(to: outcome, of: snapshot) { return reactor.index }
        }
        return nil
    }

    /// A reactor that runs its work for each task on its own took the outcome; the task's slot
    /// went back in the section that ended its transfer.
    private func reactAlone(_ reaction: Reaction) {
        if let timer = reaction.timer { armWaitTimer(timer) }
        let reactor = environment.reactors[reaction.index]
        observer?.reactionStarting()
        observer?.reacted(by: reactor.name, run: nil)
        let work = environment.runtime.react(reactor, to: reaction.outcome, body: reaction.body, of: reaction.task) { [self] result in
            perTaskReactionFinished(reactor: reaction.index, outcome: result)
        }
        if let work, case .cancel(let work) = engine.withLock({ _ in machine.workStarted(work) }) { work.cancel() }
    }

    /// A shared reactor took the outcome: its run was started or joined in the section that ended
    /// the transfer (or the task was answered at once, ``SharedReaction/immediate``).
    private func reactTogether(_ reaction: Reaction, _ shared: SharedReaction) {
        if let timer = reaction.timer { armWaitTimer(timer) }
        observer?.reactionStarting()
        observer?.reacted(by: environment.reactors[reaction.index].name, run: shared.immediate == nil ? shared.run : nil)
        if case .startRun(let number) = shared.need {
            engine.startRun(reactor: reaction.index, number: number, outcome: reaction.outcome, body: reaction.body, task: reaction.task)
        }
        if let immediate = shared.immediate { perform(immediate) }
    }

    /// The key requests share slots under: scheme, host and port, as URLSession pools connections.
    static func host(of request: URLRequest) -> String {
        URLOrigin.description(of: request.url) ?? ""
    }

    /// Bounds a wait for a connection slot by the request's timeout, as URLSession's own queue
    /// does: the task then fails with `URLError.timedOut`. Firing is one section: the task
    /// leaves the queue and fails together, if it still waits in that generation.
    private func armSlotTimeout(generation: Int) {
        let (interval, url) = engine.withLock { _ in (machine.task.request.timeoutInterval, machine.task.request.url) }
        guard interval > 0, interval.isFinite else { return }
        let runtime = environment.runtime
        arm(runtime.now + interval) { [weak self] in
            guard let self else { return }
            perform(
                engine.withLock { state in
                    guard state.admission.slotWaitExpired(id, generation: generation) else { return TaskStateMachine.FailAction.none }
                    return machine.fail(URLError.timedOut(url: url))
                })
        }
    }

    /// The task starts to wait inside the pipeline; the first wait of a stretch sets the timer
    /// (``TaskStateMachine/waitBegins()``).
    private func waitBegins() {
        guard let timer = engine.withLock({ _ in machine.waitBegins() }) else { return }
        armWaitTimer(timer)
    }

    /// Arms the timer of a stretch of waits (``TaskStateMachine/waitBegins()``).
    private func armWaitTimer(_ timer: TaskStateMachine.WaitTimer) {
        arm(timer.deadline) { [weak self] in
            guard let self else { return }
            perform(
                engine.withLock { _ in
                    let url = machine.task.request.url
                    return machine.waitExpired(generation: timer.generation, error: URLError.timedOut(url: url))
                })
        }
    }

    private func send(_ request: URLRequest, body: URLTaskBody, attempt: Int, whole: Bool) {
        // The bytes sent decide the framing, never a header that disagrees with them.
        let framed = BodyFraming.framed(request, body: body)
        var snapshot: URLTask?
        if observer != nil || environment.sharing != nil { snapshot = engine.withLock { _ in machine.task } }
        let share = snapshot.flatMap { sharing(of: framed, body: body, task: $0, attempt: attempt) }
        if share == nil, let observer, let snapshot {
            // Before the transfer starts: its response may arrive before the next line runs.
            announceSent(to: observer, task: snapshot, attempt: attempt, body: body)
        }
        let delivery = whole || sink.delivery != .whole ? sink.delivery : .streamed
        environment.startTransfer(framed, body: body, callerURL: callerURL, events: self, share: share, delivery: delivery) {
            [self] started in
            switch started {
            case .success(let transfer):
                if case .cancel(let transfer) = engine.withLock({ _ in machine.transferStarted(transfer, attempt: attempt) }),
                    !environment.abandonsTransfers
                {
                    // A cancel that raced with the send found no inner task to stop.
                    environment.stopTransfer(transfer)
                }
            case .failure(let error):
                // The session was invalidated meanwhile: one section fails the task and hands
                // its slot over.
                let (completion, decided) = engine.withLock { state in
                    (machine.failSending(error), EngineStorage.admit(state.admission.transferEnded(id), in: &state))
                }
                engine.tell(decided)
                if let completion { complete(completion) }
            }
        }
    }

    /// The task's `sent` event, then what its interceptors asked to say once it is sent
    /// (``URLTask/annotateWhenSent(_:_:)``: a `curl` command, a trace span).
    private func announceSent(to observer: TaskObserver, task: URLTask, attempt: Int, body: URLTaskBody) {
        observer.sent(attempt: attempt, credentialVersions: environment.engine.credentialVersions(of: self, task: task), body: body)
        for annotation in task.annotationsWhenSent { observer.annotated(name: annotation.name, value: annotation.value) }
    }

    /// How this task may share its transfer with identical requests in flight, or `nil`: the
    /// manager has a ``TransferSharingInterceptor`` and the task is marked ``ShareableTransfer``, has no body, is not a
    /// part's own exclusive request (``ExclusiveTransfer``), and its method is shared.
    private func sharing(of request: URLRequest, body: URLTaskBody, task: URLTask, attempt: Int) -> TransferShare? {
        guard let sharing = environment.sharing, case .none = body, task.attemptValues[ShareableTransfer.self] == true,
            task.attemptValues[ExclusiveTransfer.self] != true,
            let wire = WireHeaders(request, cookies: sharing.cookies),
            let key = SharingKey(request, wire: wire, policy: policy, rules: sharing.rules)
        else { return nil }
        // Weakly: the subscription keeps this closure, and the task keeps the subscription.
        return TransferShare(key: key, task: id, request: request, wire: wire) { [weak self] role in
            guard let self else { return }
            switch role {
            case .sends, .sendsAlone:
                if let observer { announceSent(to: observer, task: task, attempt: attempt, body: body) }
            case .joins(let leader):
                // It uses no connection of its own: the slot goes to the next task.
                engine.tell(engine.withLock { EngineStorage.admit($0.admission.transferEnded(id), in: &$0) })
                observer?.joinedSharedTransfer(of: leader, attempt: attempt)
                // Nor anything on the wire: a part that counts what is sent (a rate limiter) hears it.
                outcomeObservers?.observeJoinedTransfer(of: task)
            }
        }
    }
}
