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
/// same section and keeps their actions (``Decision``) for the one funnel into the lock,
/// ``EngineStorage/withLock(_:)``, to perform once it is released, as async-http-client's
/// connection pool runs its state machine's actions. So no decision is made in one section and
/// acted on in another. Nothing here calls a reactor's, an interceptor's or an observer's code,
/// a continuation or a client: what an event needs of such code (which reactor takes an
/// outcome, the credential version it reports) is asked before the event and brought as a
/// value, and where the event itself finds it needs a reading, it says so
/// (``TransferEnd/needsReading(reactor:)``) and is sent again with it.
///
/// ``EngineStorage`` holds it under its lock and performs the actions for other tasks;
/// ``TaskRun`` calls its events through that funnel and performs its own.
struct Engine {
    typealias Observation = OutcomeObservationStateMachine<TaskStateMachine.Completion, TaskStateMachine.ProceedAction>

    /// One live task: its machine, and what its end waits for.
    ///
    /// A class the engine owns, reached only inside its sections: the machine (a large value) is
    /// changed in place where it lives, which a collection of values would copy out and back on
    /// every change (what that cost: the Performance article, "Figures behind other choices").
    final class Entry {
        /// Whom the actions decided on other tasks' events are for.
        let run: TaskRun
        var machine: TaskStateMachine
        /// Whether the task's end or next attempt waits for its outcomes to be observed; `nil`
        /// when the manager has no observers (``Traits/observes``).
        var observation: Observation?
        /// The timers armed for the task's waits, cancelled as it ends so that none outlives it.
        var timers: [any PipelineTimer] = []
        let traits: Traits

        init(run: TaskRun, machine: TaskStateMachine, traits: Traits) {
            self.run = run
            self.machine = machine
            self.traits = traits
            self.observation = traits.observes ? Observation() : nil
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
    /// What this section decided for other tasks so far (``takeDecisions()``).
    private var decided: [Decision] = []
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
    /// the storage once the lock is released (``EngineStorage/withLock(_:)``).
    struct Decision {
        let run: TaskRun
        let action: TaskAction
    }

    /// What a task does next on its way to the network: its machine's own action, with the gates
    /// already checked in the section that decided it (never a `.checkGates`).
    typealias Step = TaskStateMachine.ProceedAction

    /// What an event of the engine (admission, a run's end) or a failure means for a task.
    enum TaskAction {
        case none
        /// Go on (run the interceptors again, wait at a gate, complete).
        case step(Step)
        /// Start the transfer; `whole`: it may be a ``WholeTransfer``; `task`: the task as it
        /// leaves, and `stamped` its credential stamps per reactor, when its sender needs them.
        case send(request: URLRequest, body: URLTaskBody, attempt: Int, whole: Bool, task: URLTask?, stamped: [Int: Int])
        /// A slot was handed over on another task's event: read what the reactors report of
        /// `task`, then be judged again holding it (``slotHandedOver(_:readings:)``).
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
    mutating func register(_ run: TaskRun, machine: TaskStateMachine, traits: Traits) {
        let index = run.ref.index
        // Without reactors admission has nothing to decide (no gate, stamp or slot): a task it
        // does not know is let go at once by every event, without a record to keep.
        if !reactors.isEmpty { admission.register(run.id, exemptedBy: run.exemptedBy) }
        entries[index] = Entry(run: run, machine: machine, traits: traits)
        indices[run.id] = index
    }

    /// The task completed or was cancelled: it leaves every queue, and its slot is handed over.
    /// Returns its timers, to be cancelled.
    mutating func finished(_ ref: TaskRef) -> [any PipelineTimer] {
        let id = ref.id
        var timers: [any PipelineTimer] = []
        if let entry = entry(ref) {
            timers = entry.timers
            entries[ref.index] = nil
            indices.removeValueShrinking(forKey: id)
            freeIndices.append(ref.index)
        }
        admit(admission.finished(id))
        return timers
    }

    /// Every live task, with its task as it stands.
    var live: [(TaskRun, URLTask)] { entries.compactMap { $0.map { ($0.run, $0.machine.task) } } }

    /// Every live task's run.
    var runs: [TaskRun] { entries.compactMap { $0?.run } }

    /// What the sections since the last call decided for other tasks; the funnel
    /// (``EngineStorage/withLock(_:)``) takes them as each section ends and performs them.
    mutating func takeDecisions() -> [Decision] {
        guard !decided.isEmpty else { return [] }
        defer { decided = [] }
        return decided
    }

    // MARK: Events on the way to the network

    /// The pipeline starts the task; `replayableBody` replaces a stream body a reactor may send again.
    mutating func start(_ ref: TaskRef, replayableBody: URLTaskBody?) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        return .step(passGates(task, task.machine.start(replayableBody: replayableBody)))
    }

    /// Interceptor `index`'s batch was released.
    mutating func released(_ ref: TaskRef, index: Int) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        return .step(passGates(task, task.machine.released(index: index)))
    }

    mutating func interceptorReturned(
        _ ref: TaskRef, index: Int, command: InterceptCommand, snapshot: URLTask, flushes: Int, interceptor: URLTaskError.Component
    ) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        let action = task.machine.interceptorReturned(
            index: index, command: command, snapshot: snapshot, flushes: flushes, interceptor: interceptor)
        return .step(passGates(task, action))
    }

    mutating func interceptorThrew(_ ref: TaskRef, index: Int, error: any Error, interceptor: URLTaskError.Component) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        return .step(passGates(task, task.machine.interceptorThrew(index: index, error: error, interceptor: interceptor)))
    }

    /// The caller's side answered an authentication challenge.
    mutating func challengeAnswered(_ ref: TaskRef, _ answer: TaskStateMachine.ChallengeAnswer, now: DispatchTime) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        return .step(resend(task, task.machine.challengeAnswered(answer, now: now)))
    }

    /// A reaction run for this task alone (no shared run) ended.
    mutating func reactionEnded(_ ref: TaskRef, reactor: Int, outcome: ReactorRunner.Outcome) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        return reactionFinished(task, reactor: reactor, outcome: outcome)
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

    // MARK: Failures from outside the transfer

    /// ``URLTaskManager/failTasks(with:where:)``, wherever the task is.
    mutating func abort(_ ref: TaskRef, _ error: any Error) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        return Self.taskAction(task.machine.abort(error))
    }

    /// Before it was sent (invalidation, an unreadable stream body).
    mutating func failUnsent(_ ref: TaskRef, _ error: any Error) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        return Self.taskAction(task.machine.fail(error))
    }

    /// The hold timer of `generation` in interceptor `index`'s batch fired.
    mutating func holdExpired(_ ref: TaskRef, index: Int, generation: Int, error: any Error) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        return Self.taskAction(task.machine.holdExpired(index: index, generation: generation, error: error))
    }

    /// The timer of a stretch of waits fired: `URLError.timedOut` for the request as it is.
    mutating func waitExpired(_ ref: TaskRef, generation: Int) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        let url = task.machine.task.request.url
        return Self.taskAction(task.machine.waitExpired(generation: generation, error: URLError.timedOut(url: url)))
    }

    /// The wait for a slot of `generation` passed the request's timeout.
    mutating func slotWaitExpired(_ ref: TaskRef, generation: Int, error: any Error) -> TaskAction {
        guard let task = entry(ref), admission.slotWaitExpired(ref.id, generation: generation) else { return .none }
        return Self.taskAction(task.machine.fail(error))
    }

    private static func taskAction(_ action: TaskStateMachine.FailAction) -> TaskAction {
        guard case .fail(let error, let heldIn, let work, let transfer) = action else { return .none }
        return .fail(error, heldIn: heldIn, work: work, transfer: transfer)
    }

    // MARK: Waits and timers

    /// A wait begins; the first of a stretch returns the timer to arm.
    mutating func waitBegins(_ ref: TaskRef) -> TaskStateMachine.WaitTimer? {
        entry(ref)?.machine.waitBegins()
    }

    /// A timer was armed for one of the task's waits: kept to be cancelled as the task ends, or
    /// returned to be cancelled now if it ended meanwhile.
    mutating func timerArmed(_ ref: TaskRef, _ timer: any PipelineTimer) -> (any PipelineTimer)? {
        guard let task = entry(ref) else { return timer }
        task.timers.append(timer)
        return nil
    }

    // MARK: Admission

    /// The task is ready to leave for `host` (its slot key, ``URLOrigin/slotKey(of:)``);
    /// `readings`: what its covering reactors report of it.
    mutating func wantsToSend(
        _ ref: TaskRef, host: String, restamp: Bool, readings: [Int: ReactorRunStateMachine.ReportedVersion]
    ) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        let decision = admission.wantsToSend(ref.id, host: host, restamp: restamp, reported: readings)
        let (action, handedOver) = admitted(task, decision, read: true)
        admit(handedOver)
        return action
    }

    /// A slot handed over on another task's event, judged again with `readings`.
    mutating func slotHandedOver(_ ref: TaskRef, readings: [Int: ReactorRunStateMachine.ReportedVersion]) -> TaskAction {
        guard let task = entry(ref) else { return .none }
        let (decision, passedOn) = admission.slotHandedOver(ref.id, reported: readings)
        let (action, handedOver) = admitted(task, decision, read: true)
        admit(passedOn + handedOver)
        return action
    }

    // MARK: The transfer

    /// The transfer of `attempt` was created: returns it to be stopped if the task ended meanwhile.
    mutating func transferStarted(_ ref: TaskRef, _ handle: any TransferHandle, attempt: Int) -> (any TransferHandle)? {
        guard let task = entry(ref) else { return handle }
        if case .cancel(let transfer) = task.machine.transferStarted(handle, attempt: attempt) { return transfer }
        return nil
    }

    /// The transfer could not start (the session was invalidated meanwhile): the completion, and
    /// the slot handed over.
    mutating func transferCouldNotStart(_ ref: TaskRef, _ error: any Error) -> TaskStateMachine.Completion? {
        guard let task = entry(ref) else { return nil }
        let completion = task.machine.failSending(error)
        admit(admission.transferEnded(ref.id))
        return completion
    }

    /// The task joined an identical request's transfer: it uses no connection of its own.
    mutating func joinedSharedTransfer(_ ref: TaskRef) {
        guard entry(ref) != nil else { return }
        admit(admission.transferEnded(ref.id))
    }

    /// The final response head; `reactor`: the reactor that takes it (its code was asked).
    /// Returns the head to hand to the caller, if it goes to them.
    mutating func responseHead(_ ref: TaskRef, _ response: URLResponse, reactor: Int?, challenge: Bool) -> URLResponse? {
        guard let task = entry(ref) else { return nil }
        if response is HTTPURLResponse { task.observation?.outcomeQueued() }
        if case .forward(let response) = task.machine.transportReceived(response: response, reactor: reactor, challenge: challenge) {
            return response
        }
        return nil
    }

    /// What a chunk of the body means (``received(_:_:)``).
    enum DataAction {
        case none
        case forward(Data)
        /// Its body is no longer wanted (a reactor has the part it reads): stop the transfer.
        case stop(any TransferHandle)
        /// The task ended on this chunk (a body held whole passed its limit, a rejected answer's
        /// prefix is complete): perform it (its transfer is stopped).
        case fail(TaskAction)
    }

    mutating func received(_ ref: TaskRef, _ data: Data) -> DataAction {
        guard let task = entry(ref) else { return .none }
        switch task.machine.transportReceived(data: data) {
        case .none: return .none
        case .forward(let data): return .forward(data)
        case .stopTransfer(let handle): return .stop(handle)
        case .fail(let action): return .fail(Self.taskAction(action))
        }
    }

    /// The transfer met a redirect: returns the request it was proposed from, to ask the
    /// caller's side, or `nil` (not followed).
    mutating func redirected(_ ref: TaskRef) -> URLRequest? {
        guard let task = entry(ref) else { return nil }
        let url = task.machine.task.request.url
        if case .consult(let current) = task.machine.redirectReceived(tooMany: URLError.tooManyRedirects(url: url)) { return current }
        return nil
    }

    /// The caller's side answered the redirect.
    mutating func redirectAnswered(_ ref: TaskRef, _ answer: URLRequest?, refused: (any Error)?) {
        entry(ref)?.machine.redirectAnswered(answer, refused: refused)
    }

    /// What the end of a transfer decided, or what it must be told first.
    enum TransferEnd {
        case none
        /// A transport error before the head: ask the reactors which takes it (their code), then
        /// end the transfer again with the choice.
        case chooseReactor(task: URLTask)
        /// The reactor taking the outcome keeps versions of its own: read what it reports of
        /// the task, then end the transfer again with the reading.
        case needsReading(reactor: Int)
        /// The task ended, was answered, or waits for nothing more.
        case complete(TaskStateMachine.Completion)
        /// Ask the caller's side about the challenge of a 401.
        case consultChallenge(response: HTTPURLResponse, previousFailures: Int, request: URLRequest)
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

    /// The transfer ended: one section, the machine's end of the transfer and the slot handed
    /// over (before the caller hears of the end, so it never sees it taken); for a shared
    /// reactor, its run started or joined (or the task answered at once) in the same transition,
    /// so the task that gets the slot finds the run going.
    /// - Parameters:
    ///   - choice: Which reactor takes a transport error, once asked (``TransferEnd/chooseReactor(task:)``).
    ///   - reading: What the reactor taking the outcome reports of the task as sent, once asked
    ///     (``TransferEnd/needsReading(reactor:)``).
    mutating func transferEnded(
        _ ref: TaskRef, error: (any Error)?, choice: Int??, reading asked: ReactorRunStateMachine.ReportedVersion??, now: DispatchTime
    ) -> TransferEnd {
        guard let task = entry(ref) else { return .none }
        let id = ref.id
        let traits = task.traits
        // A transport error before the head may be an outcome: the reactors choose (and the
        // observers are told) outside the lock, then the end comes again; the reactor that takes
        // the outcome reads the task's version first, if it keeps one. The machine says which.
        let action: TaskStateMachine.TransferEndAction
        switch task.machine.transferEnded(error: error, choice: choice, readingKnown: asked != nil, now: now) {
        case .chooseReactor(let task): return .chooseReactor(task: task)
        case .needsReading(let reactor): return .needsReading(reactor: reactor)
        case .ended(let ended): action = ended
        }
        let reading = asked ?? nil
        if choice != nil { task.observation?.outcomeQueued() }
        guard case .react(let index, let outcome, let body, let reacting, let requeued, let timer) = action else {
            // Every end but a reaction gives the slot back first; only an answer forwarded as is
            // tells the loop guards the credential works.
            var answered = false
            if case .complete(_, let forwarded) = action { answered = forwarded && traits.countsAsAnswer }
            admit(admission.transferEnded(id, answered: answered))
            switch action {
            case .none: return .none
            case .complete(let completion, _): return .complete(completion)
            case .consultChallenge(let response, let failures, let request):
                return .consultChallenge(response: response, previousFailures: failures, request: request)
            case .restart: return .restart(resend(task, .checkGates))
            case .react: preconditionFailure("handled above")
            }
        }
        let reaction = Reaction(index: index, outcome: outcome, body: body, task: reacting, timer: timer)
        guard reactors[index].isShared else {
            admit(admission.transferEnded(id))
            return .reactAlone(reaction)
        }
        let (need, handedOver) = admission.transferEndedNeedingReaction(
            id, reactor: index, alreadyRequeued: requeued, reported: reading, now: .now)
        admit(handedOver)
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
        return .reactTogether(reaction, startRun: startRun, run: run, immediate: answered)
    }

    // MARK: Observation

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

    /// The task wants to end with `completion`; `queueEnd`: the observers that want it are told
    /// of the end first (one more outcome).
    mutating func finishRequested(_ ref: TaskRef, _ completion: TaskStateMachine.Completion, queueEnd: Bool) -> ObservationAction {
        // Gone: the task already ended.
        guard let task = entry(ref), var observation = task.observation else { return .none }
        if queueEnd { observation.outcomeQueued() }
        let action = observation.finishRequested(completion)
        task.observation = observation
        let now: TaskStateMachine.Completion?
        if case .finishNow(let completion) = action { now = completion } else { now = nil }
        if queueEnd {
            var error: (any Error)?
            if case .fail(let failure) = completion { error = failure }
            return .observeEnd(task: task.machine.task, error: error, then: now)
        }
        return now.map(ObservationAction.finish) ?? .none
    }

    /// The observers were told of one queued outcome (or end).
    mutating func outcomeObserved(_ ref: TaskRef) -> ObservationAction {
        guard let task = entry(ref), let observed = task.observation?.outcomeObserved() else { return .none }
        switch observed {
        case .none: return .none
        case .finish(let completion): return .finish(completion)
        case .resend(let action): return .step(passGates(task, action))
        }
    }

    // MARK: Runs

    /// Run `number` of reactor `index` ended: it ends in admission, and every task that waited on
    /// it or at its gate moves (their actions are the section's decisions).
    mutating func runFinished(reactor index: Int, run number: Int, result: ReactorRunner.Outcome) {
        var failure: (any Error)?
        if case .failed(let error) = result { failure = error }
        guard let end = admission.runFinished(reactor: index, run: number, succeeded: failure == nil) else { return }
        lastFailures[index] = failure
        for id in end.waiters {
            guard let task = entry(id) else { continue }
            decided.append(Decision(run: task.run, action: reactionFinished(task, reactor: index, outcome: result)))
        }
        for id in end.gated {
            guard let task = entry(id) else { continue }
            decided.append(Decision(run: task.run, action: gateOpened(task, by: result)))
        }
    }

    // MARK: Within a section

    /// A `.checkGates` goes through admission's gates in the same section: the task waits at a
    /// running reactor's gate, or its credential stamps are recorded and it goes on to the
    /// interceptors (stamped before they run, not at send: an interceptor, or a batch hold, may
    /// apply a token, then a run may start and end before the task is sent).
    private mutating func passGates(_ task: Entry, _ action: TaskStateMachine.ProceedAction) -> Step {
        guard case .checkGates = action else { return action }
        switch admission.headersWillBeDecided(task.run.id) {
        case .waitAtGate(let reactor):
            return task.machine.waitingAtGate(reactor: reactor)
        case .proceed:
            return task.machine.gateOpened()
        }
    }

    /// `action` may send the task again after an outcome; with observers, only once they were
    /// told of every outcome of the task (``OutcomeObservationStateMachine``). The gates are then
    /// checked in the same section.
    private mutating func resend(_ task: Entry, _ action: TaskStateMachine.ProceedAction) -> Step {
        var action = action
        switch action {
        case .checkGates, .acquireConnection:
            guard var observation = task.observation else { break }
            switch observation.resendRequested(action) {
            case .resendNow(let now): action = now
            case .wait, .drop: action = .none
            }
            task.observation = observation
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
            switch task.machine.connectionGranted() {
            case .send(let request, let body, let attempt, let whole, let task):
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
            let host = URLOrigin.slotKey(of: request)
            return (.waitForSlot(generation: generation, host: host, timeout: request.timeoutInterval, url: request.url), [])
        case .waitAtGate(let reactor):
            return (.step(task.machine.admissionGated(reactor: reactor)), [])
        case .reintercept:
            return (.step(passGates(task, task.machine.headersStale())), [])
        case .fail(let reactor):
            return (Self.taskAction(task.machine.fail(lastRunError(reactor))), [])
        }
    }

    /// Moves each task admission decided for (a slot handed over), and every task its move hands
    /// a slot to in turn; their actions are the section's decisions.
    private mutating func admit(_ handedOver: [(URLTask.ID, AdmissionStateMachine.SendAction)]) {
        guard !handedOver.isEmpty else { return }
        var pending = handedOver[...]
        while let (id, decision) = pending.popFirst() {
            guard let task = entry(id) else { continue }
            let (action, passedOn) = admitted(task, decision)
            decided.append(Decision(run: task.run, action: action))
            pending.append(contentsOf: passedOn)
        }
    }

    /// The run of reactor `index` this task waited on (or ran for it alone) ended.
    private mutating func reactionFinished(_ task: Entry, reactor index: Int, outcome: ReactorRunner.Outcome) -> TaskAction {
        let ended = task.machine.reactionEnded(reactor: index, result: reactionResult(index, outcome))
        // Sent again only once the observers saw every outcome, then through the gates.
        return .reacted(requeued: ended.requeuedAs, then: resend(task, ended.action))
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
            switch reactors[index].afterwards {
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

    /// The error a task late for reactor `index`'s failed runs fails with.
    func lastRunError(_ index: Int) -> any Error {
        lastFailures[index] ?? URLTaskError.delivered(CancellationError(), from: reactors[index].component, code: .reactorFailed)
    }
}
