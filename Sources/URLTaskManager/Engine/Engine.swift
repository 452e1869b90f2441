import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Everything one manager's lock guards, as one value: admission (``AdmissionStateMachine``:
/// the reactors' runs and gates, credential stamps, connection slots) and every live task's own
/// machine (``TaskStateMachine``), with what its end waits for (its outcomes observed, its
/// timers).
///
/// **Each event is one method, one lock section, one action.** An event of a task moves its
/// machine and admission together (a gate checked and waited at, a slot taken and the request
/// let go, a transfer's end and its slot handed over) and returns what the task performs; an
/// event that decides for other tasks too (a slot handed over, a run ended) moves them in the
/// same section and returns their actions beside it. So no decision is made in one section and
/// acted on in another. Nothing here calls a reactor's, an interceptor's or an observer's code,
/// a continuation or a client: what an event needs of such code (which reactor takes an
/// outcome, the credential version it reports) is asked before the event and brought as a
/// value, and where the event itself finds it needs a reading, it says so
/// (``TransferAction/needsReading(reactor:)``) and is sent again with it.
///
/// ``EngineStorage`` holds it under its lock and performs the actions for other tasks;
/// ``TaskStorage`` performs its own.
struct Engine {
    typealias Observation = OutcomeObservationStateMachine<TaskStateMachine.Completion, TaskStateMachine.ProceedAction>

    /// One live task: its machine, and what its end waits for.
    ///
    /// A class the engine owns, reached only inside its sections: the machine (a large value) is
    /// changed in place where it lives, which a collection of values would copy out and back on
    /// every change (what that cost: the Performance article, "Figures behind other choices").
    final class Entry {
        /// Whom the actions decided on other tasks' events are for.
        let run: TaskStorage
        var machine: TaskStateMachine
        /// Whether the task's end or next attempt waits for its outcomes to be observed.
        var observation = Observation()
        /// The timers armed for the task's waits, cancelled as it ends so that none outlives it.
        var timers: [any PipelineTimer] = []
        let traits: Traits

        init(run: TaskStorage, machine: TaskStateMachine, traits: Traits) {
            self.run = run
            self.machine = machine
            self.traits = traits
        }
    }

    /// What the engine needs to know of a task, fixed as it starts.
    struct Traits: Sendable {
        /// The manager has outcome observers: outcomes are queued, ends and resends wait.
        var observes = false
        /// Some covering reactor reports credential versions of its own: a slot handed over on
        /// another task's event is judged again after a reading (``TaskAction/confirmSlot(task:)``),
        /// and readings of the task as it leaves need it (``Step/acquireConnection(request:restamp:task:)``).
        var hasReporters = false
        /// An answer tells the loop guards the credential works (no reactor was skipped).
        var countsAsAnswer = true
        /// Whoever sends needs the task as it leaves (its `sent` event, sharing, the reactors
        /// and observers that are asked about its outcomes).
        var sendsSnapshot = false
        /// Its `sent` event reports the credential versions it leaves with.
        var sendsStamps = false
    }

    var admission: AdmissionStateMachine
    /// The live tasks, each at an index of its own for as long as it lives (``TaskRef``): a task's
    /// events find it without hashing its identifier.
    private var entries: [Entry?] = []
    /// Indices freed by tasks that ended, to be used again.
    private var freeIndices: [Int] = []
    /// Each live task's index, for the decisions admission makes by identifier (a slot handed
    /// over, a run ended).
    private var indices: [URLTask.ID: Int] = [:]
    /// Per reactor, the error of its last failed run: what tasks late for it fail with.
    var lastFailures: [(any Error)?]
    let reactors: [ReactorRunner]

    init(reactors: [ReactorRunner], slotsPerHost: Int?) {
        self.reactors = reactors
        self.admission = AdmissionStateMachine(reactors: reactors.map(\.configuration.mode), slotsPerHost: slotsPerHost)
        self.lastFailures = Array(repeating: nil, count: reactors.count)
    }

    // MARK: Actions

    /// What an event decided for another task (a slot handed over, a run ended): performed by
    /// the storage once the lock is released.
    struct Decision {
        let run: TaskStorage
        let action: TaskAction
    }

    /// What a task does next on its way to the network: its machine's next step, with the gates
    /// already checked in the section that decided it.
    enum Step {
        case none
        case runInterceptor(index: Int, task: URLTask)
        case hold(index: Int, maximumWait: Duration?, generation: Int, flushesSeen: Int)
        case releaseBatch(index: Int)
        /// Ask admission to let the request go; `task`: the task as it is, when its reactors'
        /// readings are to be taken first.
        case acquireConnection(request: URLRequest, restamp: Bool, task: URLTask?)
        case complete(TaskStateMachine.Completion)
        /// The task waits at reactor `reactor`'s gate.
        case waitAtGate(reactor: Int)
    }

    /// What an event of the engine (admission, a run's end) or a failure means for a task.
    enum TaskAction {
        case none
        /// Go on (run the interceptors again, wait at a gate, complete).
        case step(Step)
        /// Start the transfer; `whole`: it may be a ``WholeTransfer``; `task`: the task as it
        /// leaves, and `stamped` its credential stamps per reactor, when its sender needs them.
        case send(request: URLRequest, body: URLTaskBody, attempt: Int, whole: Bool, task: URLTask?, stamped: [Int: Int])
        /// A slot was handed over on another task's event: read what the reactors report of
        /// `task`, then be judged again holding it (``AdmissionEvent/slotHandedOver(readings:)``).
        case confirmSlot(task: URLTask)
        /// Wait for a slot; a timer for `generation` bounds the wait by `timeout` (the request's),
        /// failing it as timed out for `url`.
        case waitForSlot(generation: Int, host: String, timeout: TimeInterval, url: URL?)
        /// End the task with `error`: take it out of batch `heldIn`, cancel `work`, stop `transfer`.
        case fail(any Error, heldIn: Int?, work: Task<Void, Never>?, transfer: (any TransferHandle)?)
        /// The request cannot be sent (an invalid header, a stream already read): complete with
        /// the error (its slot went back).
        case refuse(any Error)
        /// The task's reaction ended (`requeued`: the attempt it is sent again as), then `then`.
        case reacted(requeued: Int?, then: Step)
    }

    /// Where a task lives in the engine: its identifier and its index, fixed as it is made.
    struct TaskRef: Sendable {
        let id: URLTask.ID
        let index: Int
    }

    // MARK: Tasks

    /// An index for a task about to be made (``register(_:machine:traits:)`` fills it).
    mutating func reserveIndex() -> Int {
        if let index = freeIndices.popLast() { return index }
        entries.append(nil)
        return entries.count - 1
    }

    /// The live task at `ref`, if it still lives (an index freed by a task that ended may hold
    /// another by now).
    private func entry(_ ref: TaskRef) -> Entry? {
        guard let entry = entries[ref.index], entry.run.id == ref.id else { return nil }
        return entry
    }

    /// The live task `id`, found by its identifier.
    private func entry(_ id: URLTask.ID) -> Entry? {
        indices[id].flatMap { entries[$0] }
    }

    /// A task starts: its machine and traits are kept until ``finished(_:)``.
    mutating func register(_ run: TaskStorage, machine: TaskStateMachine, traits: Traits) {
        let index = run.ref.index
        // Without reactors admission has nothing to decide (no gate, stamp or slot): a task it
        // does not know is let go at once by every event, without a record to keep.
        if !reactors.isEmpty { admission.register(run.id, exemptedBy: run.exemptedBy) }
        entries[index] = Entry(run: run, machine: machine, traits: traits)
        indices[run.id] = index
    }

    /// The task completed or was cancelled: it leaves every queue, and its slot is handed over.
    /// Returns its timers, to be cancelled.
    mutating func finished(_ ref: TaskRef) -> (timers: [any PipelineTimer], decided: [Decision]) {
        let id = ref.id
        var timers: [any PipelineTimer] = []
        if let entry = entry(ref) {
            timers = entry.timers
            entries[ref.index] = nil
            indices.removeValueShrinking(forKey: id)
            freeIndices.append(ref.index)
        }
        return (timers, admit(admission.finished(id)))
    }

    /// Every live task, with its task as it stands.
    var live: [(TaskStorage, URLTask)] { entries.compactMap { $0.map { ($0.run, $0.machine.task) } } }

    /// Every live task's storage.
    var runs: [TaskStorage] { entries.compactMap { $0?.run } }

    // MARK: Proceeding

    /// Events that move a task on its way to the network.
    enum ProceedEvent {
        case start(replayableBody: URLTaskBody?)
        case released(index: Int)
        case interceptorReturned(
            index: Int, command: InterceptCommand, snapshot: URLTask, flushes: Int, interceptor: URLTaskError.Component)
        case interceptorThrew(index: Int, error: any Error, interceptor: URLTaskError.Component)
        case challengeAnswered(TaskStateMachine.ChallengeAnswer, now: DispatchTime)
        /// A reaction run for this task alone (no shared run) ended.
        case reactionEnded(reactor: Int, outcome: ReactorRunner.Outcome)
    }

    mutating func proceed(_ ref: TaskRef, _ event: ProceedEvent) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        switch event {
        case .start(let replayable):
            return .step(passGates(task, task.machine.start(replayableBody: replayable)))
        case .released(let index):
            return .step(passGates(task, task.machine.released(index: index)))
        case .interceptorReturned(let index, let command, let snapshot, let flushes, let interceptor):
            let action = task.machine.interceptorReturned(
                index: index, command: command, snapshot: snapshot, flushes: flushes, interceptor: interceptor)
            return .step(passGates(task, action))
        case .interceptorThrew(let index, let error, let interceptor):
            return .step(passGates(task, task.machine.interceptorThrew(index: index, error: error, interceptor: interceptor)))
        case .challengeAnswered(let answer, let now):
            return .step(resend(task, task.machine.challengeAnswered(answer, now: now)))
        case .reactionEnded(let reactor, let outcome):
            return reactionFinished(task, reactor: reactor, outcome: outcome)
        }
    }

    /// Whether the task ended (a cancel that raced with a hold).
    func isCompleted(_ ref: TaskRef) -> Bool { entry(ref)?.machine.isCompleted ?? true }

    /// The interceptor's or reaction's Swift task for the task started: `work` to cancel if the
    /// task ended meanwhile.
    mutating func workStarted(_ ref: TaskRef, _ work: Task<Void, Never>) -> Task<Void, Never>? {
        guard let task = entry(ref) else { return work }
        if case .cancel(let work) = task.machine.workStarted(work) { return work }
        return nil
    }

    /// The caller cancelled.
    mutating func cancel(_ ref: TaskRef) -> TaskStateMachine.CancelAction {
        guard let task = entry(ref) else { return .none }
        return task.machine.cancel()
    }

    // MARK: Failures

    /// Events that end a task from outside its transfer.
    enum FailureEvent {
        /// ``URLTaskManager/failTasks(with:where:)``, wherever the task is.
        case abort(any Error)
        /// Before it was sent (invalidation, an unreadable stream body).
        case unsent(any Error)
        /// The hold timer of `generation` in interceptor `index`'s batch fired.
        case holdExpired(index: Int, generation: Int, error: any Error)
        /// The timer of a stretch of waits fired: `URLError.timedOut` for the request as it is.
        case waitExpired(generation: Int)
        /// The wait for a slot of `generation` passed the request's timeout.
        case slotWaitExpired(generation: Int, error: any Error)
    }

    mutating func fail(_ ref: TaskRef, _ event: FailureEvent) -> TaskAction {
        let id = ref.id
        guard let task = entry(ref) else { return .none }
        let action: TaskStateMachine.FailAction
        switch event {
        case .abort(let error): action = task.machine.abort(error)
        case .unsent(let error): action = task.machine.fail(error)
        case .holdExpired(let index, let generation, let error):
            action = task.machine.holdExpired(index: index, generation: generation, error: error)
        case .waitExpired(let generation):
            let url = task.machine.task.request.url
            action = task.machine.waitExpired(generation: generation, error: URLError.timedOut(url: url))
        case .slotWaitExpired(let generation, let error):
            guard admission.slotWaitExpired(id, generation: generation) else { return .none }
            action = task.machine.fail(error)
        }
        return Self.taskAction(action)
    }

    private static func taskAction(_ action: TaskStateMachine.FailAction) -> TaskAction {
        guard case .fail(let error, let heldIn, let work, let transfer) = action else { return .none }
        return .fail(error, heldIn: heldIn, work: work, transfer: transfer)
    }

    // MARK: Waits and timers

    /// Events of a task's waits inside the pipeline.
    enum WaitEvent {
        /// A wait begins; the first of a stretch returns the timer to arm.
        case begins
        /// A timer was armed for one of the task's waits.
        case armed(any PipelineTimer)
    }

    /// Returns the timer to arm for a stretch of waits that begins, if any; a timer armed for a
    /// task that ended meanwhile is returned to be cancelled.
    mutating func wait(_ ref: TaskRef, _ event: WaitEvent) -> WaitAction {
        guard let task = entry(ref) else {
            if case .armed(let timer) = event { return .cancel(timer) }
            return .none
        }
        switch event {
        case .begins:
            return task.machine.waitBegins().map(WaitAction.arm) ?? .none
        case .armed(let timer):
            task.timers.append(timer)
            return .none
        }
    }

    enum WaitAction {
        case none
        /// Arm the timer of a stretch of waits.
        case arm(TaskStateMachine.WaitTimer)
        /// The task ended before its timer was kept: cancel it.
        case cancel(any PipelineTimer)
    }

    // MARK: Admission

    /// Events of a task's admission to the network.
    enum AdmissionEvent {
        /// The task is ready to leave for `host` (its slot key, ``Engine/slotKey(of:)``);
        /// `readings`: what its covering reactors report of it.
        case wantsToSend(host: String, restamp: Bool, readings: [Int: ReactorRunStateMachine.ReportedVersion])
        /// A slot handed over on another task's event, judged again with `readings`.
        case slotHandedOver(readings: [Int: ReactorRunStateMachine.ReportedVersion])
    }

    mutating func admission(_ ref: TaskRef, _ event: AdmissionEvent) -> (TaskAction, decided: [Decision]) {
        let id = ref.id
        guard let task = entry(ref) else { return (.none, []) }
        switch event {
        case .wantsToSend(let host, let restamp, let readings):
            let decision = admission.wantsToSend(id, host: host, restamp: restamp, reported: readings)
            let (action, handedOver) = admitted(task, decision, read: true)
            return (action, admit(handedOver))
        case .slotHandedOver(let readings):
            let (decision, passedOn) = admission.slotHandedOver(id, reported: readings)
            let (action, handedOver) = admitted(task, decision, read: true)
            return (action, admit(passedOn + handedOver))
        }
    }

    // MARK: Transfers

    /// Events of a task's transfer.
    enum TransferEvent {
        /// The transfer was created (`attempt`'s).
        case started(any TransferHandle, attempt: Int)
        /// It could not be (the session was invalidated meanwhile).
        case couldNotStart(any Error)
        /// The task joined an identical request's transfer: it uses no connection of its own.
        case joined
        /// The final response head; `reactor`: the reactor that takes it (its code was asked).
        case head(URLResponse, reactor: Int?, challenge: Bool)
        case data(Data)
        /// The transfer met a redirect.
        case redirect
        /// The caller's side answered the redirect.
        case redirectAnswered(URLRequest?, refused: (any Error)?)
        /// The transfer ended. `choice`: which reactor takes a transport error, once asked
        /// (``TransferAction/chooseReactor(task:)``); `reading`: what the reactor taking the
        /// outcome reports of the task as sent, once asked (``TransferAction/needsReading(reactor:)``).
        case ended(error: (any Error)?, choice: Int??, reading: ReactorRunStateMachine.ReportedVersion??, now: DispatchTime)
    }

    enum TransferAction {
        case none
        /// Hand the head to the caller; `observe`: the outcome was queued for the observers.
        case forwardHead(URLResponse)
        case forwardData(Data)
        /// Ask the caller's side about a redirect proposed from `current`.
        case consultRedirect(current: URLRequest)
        /// Stop the transfer: it was created for a task that ended meanwhile, or its body is no
        /// longer wanted (a reactor has the part it reads).
        case stop(any TransferHandle)
        /// The task ended on a chunk of its body (a body held whole passed its limit, a rejected
        /// answer's prefix is complete): perform it (its transfer is stopped).
        case fail(TaskAction)
        /// The transfer could not start: complete with this.
        case complete(TaskStateMachine.Completion)
        /// A transport error before the head: ask the reactors which takes it (their code), then
        /// send ``TransferEvent/ended(error:choice:reading:now:)`` again with the choice.
        case chooseReactor(task: URLTask)
        /// The reactor taking the outcome keeps versions of its own: read what it reports of
        /// the task, then send the end again with the reading.
        case needsReading(reactor: Int)
        /// The transfer ended (``TransferEnd``).
        case ended(TransferEnd)
    }

    /// What the end of a transfer decided.
    enum TransferEnd {
        /// The task ended, was answered, or waits for nothing more.
        case complete(TaskStateMachine.Completion)
        /// Ask the caller's side about the challenge of a 401.
        case consultChallenge(response: HTTPURLResponse, previousFailures: Int, request: URLRequest)
        case none
        /// A followed redirect: the task starts again from the gates.
        case restart(Step)
        /// A reactor that runs its work for each task on its own takes the outcome.
        case reactAlone(Reaction)
        /// A shared reactor's run was started (`startRun`) or joined, or the task was answered
        /// at once (`immediate`).
        case reactTogether(Reaction, startRun: Int?, run: Int?, immediate: TaskAction?)
    }

    /// The outcome a reactor takes, and the timer of the wait for it.
    struct Reaction {
        var index: Int
        var outcome: URLTaskOutcome
        var body: Data
        var task: URLTask
        var timer: TaskStateMachine.WaitTimer?
    }

    mutating func transfer(_ ref: TaskRef, _ event: TransferEvent) -> (TransferAction, decided: [Decision]) {
        let id = ref.id
        guard let task = entry(ref) else {
            if case .started(let handle, _) = event { return (.stop(handle), []) }
            return (.none, [])
        }
        switch event {
        case .started(let handle, let attempt):
            if case .cancel(let transfer) = task.machine.transferStarted(handle, attempt: attempt) { return (.stop(transfer), []) }
            return (.none, [])
        case .couldNotStart(let error):
            let completion = task.machine.failSending(error)
            let decided = admit(admission.transferEnded(id))
            return (completion.map(TransferAction.complete) ?? .none, decided)
        case .joined:
            return (.none, admit(admission.transferEnded(id)))
        case .head(let response, let reactor, let challenge):
            if task.traits.observes, response is HTTPURLResponse { task.observation.outcomeQueued() }
            if case .forward(let response) = task.machine.transportReceived(
                response: response, reactor: reactor, challenge: challenge)
            {
                return (.forwardHead(response), [])
            }
            return (.none, [])
        case .data(let data):
            switch task.machine.transportReceived(data: data) {
            case .none: return (.none, [])
            case .forward(let data): return (.forwardData(data), [])
            case .stopTransfer(let handle): return (.stop(handle), [])
            case .fail(let action): return (.fail(Self.taskAction(action)), [])
            }
        case .redirect:
            let url = task.machine.task.request.url
            if case .consult(let current) = task.machine.redirectReceived(tooMany: URLError.tooManyRedirects(url: url)) {
                return (.consultRedirect(current: current), [])
            }
            return (.none, [])
        case .redirectAnswered(let answer, let refused):
            task.machine.redirectAnswered(answer, refused: refused)
            return (.none, [])
        case .ended(let error, let choice, let reading, let now):
            return transferEnded(task, error: error, choice: choice, reading: reading, now: now)
        }
    }

    /// One section: the machine's end of the transfer and the slot handed over (before the
    /// caller hears of the end, so it never sees it taken); for a shared reactor, its run started
    /// or joined (or the task answered at once) in the same transition, so the task that gets the
    /// slot finds the run going.
    private mutating func transferEnded(
        _ task: Entry, error: (any Error)?, choice: Int??, reading asked: ReactorRunStateMachine.ReportedVersion??, now: DispatchTime
    ) -> (TransferAction, decided: [Decision]) {
        let id = task.run.id
        let traits = task.traits
        // A transport error before the head may be an outcome: the reactors choose (and the
        // observers are told) outside the lock, then the end comes again.
        var reactor: Int?
        if error != nil, task.machine.isAwaitingResponseHead, !reactors.isEmpty || traits.observes {
            guard let choice else { return (.chooseReactor(task: task.machine.task), []) }
            reactor = choice
        }
        // The reactor that takes the outcome reads the task's version first, if it keeps one.
        let taking = reactor ?? task.machine.collectingFor
        if asked == nil, let taking, reactors[taking].reportsCredentialVersions { return (.needsReading(reactor: taking), []) }
        let reading = asked ?? nil
        if choice != nil, traits.observes { task.observation.outcomeQueued() }
        let forwarded = task.machine.isForwardingResponse
        let action = task.machine.transportCompleted(error: error, reactor: reactor, now: now)
        guard case .react(let index, let outcome, let body, let reacting, let requeued) = action else {
            let decided = admit(admission.transferEnded(id, answered: forwarded && traits.countsAsAnswer))
            switch action {
            case .none: return (.ended(.none), decided)
            case .complete(let completion): return (.ended(.complete(completion)), decided)
            case .consultChallenge(let response, let failures, let request):
                return (.ended(.consultChallenge(response: response, previousFailures: failures, request: request)), decided)
            case .restart: return (.ended(.restart(resend(task, .checkGates))), decided)
            case .react: preconditionFailure("handled above")
            }
        }
        let reaction = Reaction(index: index, outcome: outcome, body: body, task: reacting, timer: task.machine.waitBegins())
        guard reactors[index].configuration.mode.isShared else {
            return (.ended(.reactAlone(reaction)), admit(admission.transferEnded(id)))
        }
        let (need, handedOver) = admission.transferEndedNeedingReaction(
            id, reactor: index, alreadyRequeued: requeued, reported: reading, now: .now)
        let decided = admit(handedOver)
        var immediate: ReactorRunner.Outcome?
        switch need {
        case .wait, .startRun: break
        case .requeueNow: immediate = .succeeded
        case .failNow: immediate = .failed(lastRunError(index))
        case .deliverNow: immediate = .declined
        case .refuseLoop(let runs):
            let configuration = reactors[index].configuration
            immediate = .failed(
                URLTaskError.reactionLoop(reactors[index].component, runs: runs, window: configuration.mode.loopGuard?.window ?? .zero))
        }
        var startRun: Int?
        if case .startRun(let number) = need { startRun = number }
        let run = admission.reactors[index].currentRun
        let answered = immediate.map { reactionFinished(task, reactor: index, outcome: $0) }
        return (.ended(.reactTogether(reaction, startRun: startRun, run: run, immediate: answered)), decided)
    }

    // MARK: Observation

    /// Events of a task's outcome observation (``OutcomeObservationStateMachine``).
    enum ObservationEvent {
        /// The task wants to end with `completion`; `queueEnd`: the observers that want it are
        /// told of the end first (one more outcome).
        case finishRequested(TaskStateMachine.Completion, queueEnd: Bool)
        /// The observers were told of one queued outcome (or end).
        case observed
    }

    enum ObservationAction {
        case none
        /// End the task now.
        case finish(TaskStateMachine.Completion)
        /// Tell the observers of the end of `task` (`error`: how it failed), then end it now
        /// (`then`) or wait for them.
        case observeEnd(task: URLTask, error: (any Error)?, then: TaskStateMachine.Completion?)
        /// Go on after an outcome was observed.
        case step(Step)
    }

    mutating func observation(_ ref: TaskRef, _ event: ObservationEvent) -> ObservationAction {
        // Gone: the task already ended.
        guard let task = entry(ref) else { return .none }
        switch event {
        case .finishRequested(let completion, let queueEnd):
            if queueEnd { task.observation.outcomeQueued() }
            let action = task.observation.finishRequested(completion)
            let now: TaskStateMachine.Completion?
            if case .finishNow(let completion) = action { now = completion } else { now = nil }
            if queueEnd {
                var error: (any Error)?
                if case .fail(let failure) = completion { error = failure }
                return .observeEnd(task: task.machine.task, error: error, then: now)
            }
            return now.map(ObservationAction.finish) ?? .none
        case .observed:
            switch task.observation.outcomeObserved() {
            case .none: return .none
            case .finish(let completion): return .finish(completion)
            case .resend(let action): return .step(passGates(task, action))
            }
        }
    }

    // MARK: Runs

    /// Run `number` of reactor `index` ended: it ends in admission, and every task that waited on
    /// it or at its gate moves.
    mutating func runFinished(reactor index: Int, run number: Int, result: ReactorRunner.Outcome) -> [Decision] {
        var failure: (any Error)?
        if case .failed(let error) = result { failure = error }
        guard let end = admission.runFinished(reactor: index, run: number, succeeded: failure == nil) else { return [] }
        lastFailures[index] = failure
        var moved: [Decision] = []
        for id in end.waiters {
            guard let task = entry(id) else { continue }
            moved.append(Decision(run: task.run, action: reactionFinished(task, reactor: index, outcome: result)))
        }
        for id in end.gated {
            guard let task = entry(id) else { continue }
            moved.append(Decision(run: task.run, action: gateOpened(task, by: result)))
        }
        return moved
    }

    // MARK: Within a section

    /// A `.checkGates` goes through admission's gates in the same section: the task waits at a
    /// running reactor's gate, or its credential stamps are recorded and it goes on to the
    /// interceptors (stamped before they run, not at send: an interceptor, or a batch hold, may
    /// apply a token, then a run may start and end before the task is sent).
    private mutating func passGates(_ task: Entry, _ action: TaskStateMachine.ProceedAction) -> Step {
        let id = task.run.id
        guard case .checkGates = action else { return step(task, action) }
        // Ended meanwhile (a cancel between a restart and this section): nothing to decide.
        guard !task.machine.isCompleted else { return .none }
        switch admission.headersWillBeDecided(id) {
        case .waitAtGate(let reactor):
            task.machine.waitingAtGate(reactor: reactor)
            return .waitAtGate(reactor: reactor)
        case .proceed:
            return step(task, task.machine.gateOpened())
        }
    }

    /// The machine's action as the task performs it (never a `.checkGates`: ``passGates(_:_:)``).
    private func step(_ task: Entry, _ action: TaskStateMachine.ProceedAction) -> Step {
        switch action {
        case .none: return .none
        case .checkGates: preconditionFailure("a .checkGates never leaves the section that returned it (passGates)")
        case .runInterceptor(let index, let task): return .runInterceptor(index: index, task: task)
        case .hold(let index, let maximumWait, let generation, let flushes):
            return .hold(index: index, maximumWait: maximumWait, generation: generation, flushesSeen: flushes)
        case .releaseBatch(let index): return .releaseBatch(index: index)
        case .acquireConnection(let request, let restamp):
            let traits = task.traits
            return .acquireConnection(request: request, restamp: restamp, task: traits.hasReporters ? task.machine.task : nil)
        case .complete(let completion): return .complete(completion)
        }
    }

    /// `action` may send the task again after an outcome; with observers, only once they were
    /// told of every outcome of the task (``OutcomeObservationStateMachine``). The gates are then
    /// checked in the same section.
    private mutating func resend(_ task: Entry, _ action: TaskStateMachine.ProceedAction) -> Step {
        var action = action
        switch action {
        case .checkGates, .acquireConnection:
            guard task.traits.observes else { break }
            switch task.observation.resendRequested(action) {
            case .resendNow(let now): action = now
            case .wait, .drop: action = .none
            }
        default:
            break
        }
        return passGates(task, action)
    }

    /// Admission decided `decision` for the task, on its own event or on another task's (a slot
    /// handed over). Returns what the task does, and the tasks a slot it gave back was handed to.
    /// - Parameter read: The decision was made with what the task's reactors report read just
    ///   before (its own event). A slot handed over on another task's event was judged by what
    ///   the engine last heard: a task whose reactors keep versions of their own reads them
    ///   first (their state may change outside any run: the app renewing a token).
    private mutating func admitted(
        _ task: Entry, _ decision: AdmissionStateMachine.SendAction, read: Bool = false
    ) -> (TaskAction, handedOver: [(URLTask.ID, AdmissionStateMachine.SendAction)]) {
        let id = task.run.id
        switch decision {
        case .send:
            let traits = task.traits
            if !read, traits.hasReporters, !task.machine.isCompleted { return (.confirmSlot(task: task.machine.task), []) }
            let whole = task.machine.mayTakeWholeTransfer
            switch task.machine.connectionGranted() {
            case .send(let request, let body, let attempt):
                let task = traits.sendsSnapshot ? task.machine.task : nil
                let stamped = traits.sendsStamps ? admission.stampedVersions(id) : [:]
                return (.send(request: request, body: body, attempt: attempt, whole: whole, task: task, stamped: stamped), [])
            case .refuse(let error):
                return (.refuse(error), admission.transferEnded(id))
            case .giveSlotBack:
                // Cancelled meanwhile: the slot goes to the next task.
                return (.none, admission.transferEnded(id))
            }
        case .waitForSlot(let generation):
            let request = task.machine.task.request
            return (
                .waitForSlot(generation: generation, host: Self.slotKey(of: request), timeout: request.timeoutInterval, url: request.url),
                []
            )
        case .waitAtGate(let reactor):
            task.machine.admissionGated(reactor: reactor)
            return (.step(.waitAtGate(reactor: reactor)), [])
        case .reintercept:
            return (.step(passGates(task, task.machine.headersStale())), [])
        case .fail(let reactor):
            return (Self.taskAction(task.machine.fail(lastRunError(reactor))), [])
        }
    }

    /// Moves each task admission decided for (a slot handed over), and every task its move hands
    /// a slot to in turn. Returns what each must do.
    private mutating func admit(_ decided: [(URLTask.ID, AdmissionStateMachine.SendAction)]) -> [Decision] {
        guard !decided.isEmpty else { return [] }
        var pending = decided[...]
        var moved: [Decision] = []
        while let (id, decision) = pending.popFirst() {
            guard let task = entry(id) else { continue }
            let (action, handedOver) = admitted(task, decision)
            moved.append(Decision(run: task.run, action: action))
            pending.append(contentsOf: handedOver)
        }
        return moved
    }

    /// The run of reactor `index` this task waited on (or ran for it alone) ended.
    private mutating func reactionFinished(_ task: Entry, reactor index: Int, outcome: ReactorRunner.Outcome) -> TaskAction {
        var action = task.machine.reactionFinished(reactor: index, result: reactionResult(index, outcome))
        var requeued: Int?
        switch action {
        case .checkGates, .acquireConnection:
            requeued = task.machine.attempt
            if task.traits.observes {
                // Sent again only once the observers saw every outcome (``OutcomeObservationStateMachine``).
                switch task.observation.resendRequested(action) {
                case .resendNow(let now): action = now
                case .wait, .drop: action = .none
                }
            }
        default:
            break
        }
        return .reacted(requeued: requeued, then: passGates(task, action))
    }

    /// A run whose gate held this task ended.
    private mutating func gateOpened(_ task: Entry, by outcome: ReactorRunner.Outcome) -> TaskAction {
        switch outcome {
        case .succeeded, .declined:
            // Another covering reactor's run may be going: the gates are checked again.
            guard !task.machine.isCompleted else { return .none }
            return .step(passGates(task, .checkGates))
        case .failed(let error):
            return Self.taskAction(task.machine.fail(error))
        }
    }

    /// What a reactor's outcome means for the task, by the reactor's mode.
    private func reactionResult(_ index: Int, _ outcome: ReactorRunner.Outcome) -> TaskStateMachine.ReactionResult {
        switch outcome {
        case .succeeded:
            switch reactors[index].configuration.mode.afterwards {
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

    /// The key requests share slots under: scheme, host and port, as URLSession pools connections.
    static func slotKey(of request: URLRequest) -> String {
        URLOrigin.description(of: request.url) ?? ""
    }

    /// The error a task late for reactor `index`'s failed runs fails with.
    func lastRunError(_ index: Int) -> any Error {
        lastFailures[index] ?? URLTaskError.delivered(CancellationError(), from: reactors[index].component, code: .reactorFailed)
    }
}
