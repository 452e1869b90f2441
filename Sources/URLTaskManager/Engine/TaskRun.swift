import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One task's run: who it is, whom it talks to (its ``TaskEnvironment``, its sink, its event
/// recorder), and the actions its engine's events return, performed.
///
/// The task's machine (``TaskStateMachine``) lives in the engine (``Engine``), beside admission:
/// every event of the task is one pass through the engine's funnel (``EngineStorage/withLock(_:)``),
/// one lock section that calls the engine's method for that event, moves the machine and
/// admission together and returns the action performed here, with the lock released. This
/// class holds only constants. No interceptor, reactor, transport call or client callback ever
/// runs under the lock: where an event needs the answer of such code first (which reactor takes
/// a response, the credential version a reactor reports, whether `failTasks`'s predicate
/// matches), that code runs on the task as sent (``TransferEvents``) or as the engine handed it
/// over, and the event brings its answer.
final class TaskRun: PipelineTaskHandle, Sendable {
    let id: URLTask.ID
    /// Where the task lives in the engine.
    let ref: Engine.TaskRef
    /// The URL the caller asked for, which the errors a plain session would give name.
    let callerURL: URL?
    /// What the caller changed for this request alone (read from it, and removed, at creation).
    private let policy: URLTaskPolicy?
    /// The engine that keeps this task's machine, and admits it to the network.
    private let engine: EngineStorage
    /// Where the outcome goes (read by the pipeline only to find the manager's own calls).
    let sink: any TaskSink
    /// How the sink takes the answer, and whether it answers challenges: constants of the sink
    /// (``TaskSink``), read once here rather than on every send and head.
    private let delivery: TransferDelivery
    private let answersChallenges: Bool
    private let environment: any TaskEnvironment
    /// Records and emits this task's events; `nil` when nobody listened as it started.
    private let recorder: TaskEventRecorder?
    /// Which reactors exempt this task (``URLTaskReactorConfiguration/exempts``), by index:
    /// asked once, of the caller's request, for admission's gates and for every outcome.
    let exemptedBy: [Bool]
    /// The reactors that cover this task (they hold new tasks and do not exempt it) and keep a
    /// credential version of their own: the ones whose reported versions are read before it leaves.
    private let reporters: [Int]
    /// The caller's body when it is a stream a reactor may need to send again (read once, as
    /// the task starts).
    private let streamBody: URLTaskBody?
    /// The manager's outcome observers; `nil` when it has none.
    private let outcomeObservers: OutcomeObservers?

    /// Makes the task and registers its machine with the engine.
    init(id: URLTask.ID, request: URLRequest, body: URLTaskBody, sink: any TaskSink, environment: any TaskEnvironment) {
        self.id = id
        self.ref = Engine.TaskRef(id: id, index: environment.engine.withLock { $0.reserveIndex() })
        self.callerURL = request.url
        let (request, policy) = URLTaskPolicy.take(from: request)
        self.policy = policy
        self.engine = environment.engine
        // The configuration's additional headers belong to the caller's request, not to every
        // request the inner session sends (a cross-origin redirect must not carry them).
        var bare = environment.additionalHeaders?.applied(to: request) ?? request
        bare.removeBody()
        let exemptedBy = environment.reactors.map { $0.configuration.exempts(bare) }
        self.exemptedBy = exemptedBy
        self.reporters = environment.reactors.indices.filter {
            !exemptedBy[$0] && environment.reactors[$0].holdsNewTasks
                && environment.reactors[$0].reportsCredentialVersions
        }
        if !environment.reactors.isEmpty, case .stream = body { streamBody = body } else { streamBody = nil }
        var task = URLTask(id: id, originalRequest: bare, attempt: 1, body: body)
        task.policy = policy
        self.sink = sink
        self.delivery = sink.delivery
        self.answersChallenges = sink.answersChallenges
        self.environment = environment
        self.outcomeObservers = environment.outcomeObservers
        self.recorder = environment.events.isListening ? TaskEventRecorder(id: id, request: request, hub: environment.events) : nil
        // Reactors and observers are asked about outcomes, a transport error's included.
        let asksAboutOutcomes = !environment.reactors.isEmpty || outcomeObservers != nil
        let components = environment.interceptorComponents
        let types = environment.interceptorTypes
        let machine = TaskStateMachine(
            task: task,
            interceptorCount: components.count,
            skipping: Set(components.indices.filter { policy?.skips(components[$0], type: types[$0]) == true }),
            reactors: engine.taskTraits,
            validation: policy?.responseValidation ?? environment.options.responseValidation,
            heldBodyLimit: max(0, environment.options.maximumHeldBodySize),
            now: environment.runtime.now,
            readsVersionsBeforeSending: !reporters.isEmpty,
            snapshotsWhenSent: recorder != nil || environment.sharing != nil || asksAboutOutcomes,
            asksAboutTransportErrors: asksAboutOutcomes
        )
        let traits = Engine.Traits(
            observes: outcomeObservers != nil,
            hasReporters: !reporters.isEmpty,
            // An answer no reactor needed tells the loop guards that the credential works; not
            // when the request skipped a reactor, which never saw the answer.
            countsAsAnswer: policy?.skippedReactors.isEmpty != false,
            sendsStamps: recorder != nil)
        // Before anything can cancel it: the end of a task is always one the engine knows.
        engine.withLock { $0.register(self, machine: machine, traits: traits) }
    }

    // MARK: The task's events (one pass through the engine's funnel each)

    func start() {
        var replayable: URLTaskBody?
        if case .stream(let stream) = streamBody {
            // A reactor may send the task again, and a stream can be read only once.
            switch ReplayableBody.prepare(stream, limit: environment.options.maximumReplayableBodySize) {
            case .success(let body): replayable = body
            case .failure(let error): return failUnsent(error)
            }
        }
        perform(engine.withLock { $0.start(ref, replayableBody: replayable) })
    }

    /// The caller cancelled (`stopLoading`, on the session's work queue). The transition is made
    /// at once, so nothing that happens next (a connection slot granted, a batch released) can
    /// still send the task; the action is performed elsewhere, because stopping an inner task
    /// syncs onto that very work queue.
    func cancel() {
        let action = engine.withLock { $0.cancel(ref) }
        if case .none = action { return }
        environment.runtime.async { self.perform(action) }
    }

    func batchReleased(index: Int) {
        recorder?.released(by: environment.interceptorComponents[index])
        perform(engine.withLock { $0.released(ref, index: index) })
    }

    /// Ends the task with `error`, wherever it is (``URLTaskManager/failTasks(with:where:)``,
    /// whose predicate ran on the task as the engine handed it over). Off the caller's thread:
    /// stopping a transfer syncs onto URLSession's work queue.
    func abort(with error: any Error) {
        let action = engine.withLock { $0.abort(ref, error) }
        environment.runtime.async { self.perform(action) }
    }

    /// Fails the task if it has not been sent yet (invalidation, an unreadable stream body).
    func failUnsent(_ error: any Error) {
        perform(engine.withLock { $0.failUnsent(ref, error) })
    }

    /// Performs what the engine decided for this task on another task's event (a slot handed
    /// over, a run ended), or on one of its own.
    func perform(_ action: Engine.TaskAction) {
        switch action {
        case .none:
            return
        case .step(let step):
            proceed(step)
        case .send(let request, let body, let attempt, let whole, let task, let stamped):
            send(request, body: body, attempt: attempt, whole: whole, task: task, stamped: stamped)
        case .confirmSlot(let task):
            // What its reactors report is read now, and the engine judges it again holding the slot.
            let readings = outdatedVersions(of: task)
            perform(engine.withLock { $0.slotHandedOver(ref, readings: readings) })
        case .waitForSlot(let generation, let host, let timeout, let url):
            recorder?.waiting(for: .connectionSlot(host: host))
            armSlotTimeout(generation: generation, timeout: timeout, url: url)
            waitBegins()
        case .fail(let error, let heldIn, let work, let transfer):
            if let heldIn { environment.batches[heldIn].remove(self) }
            work?.cancel()
            if let transfer { environment.stopTransfer(transfer) }
            complete(.fail(error))
        case .refuse(let error):
            complete(.fail(error))
        case .reacted(let requeued, let step):
            if let recorder {
                recorder.reactionEnded()
                if let requeued { recorder.requeued(attempt: requeued) }
            }
            proceed(step)
        }
    }

    /// The observers' side of the task's end and resends (``Engine/ObservationAction``).
    private func perform(_ action: Engine.ObservationAction) {
        switch action {
        case .none:
            return
        case .finish(let completion):
            finish(completion)
        case .observeEnd(let task, let error, let then):
            outcomeObservers?.observeEnd(of: task, error: error) { [self] in outcomeObserved() }
            if let then { finish(then) }
        case .step(let step):
            proceed(step)
        }
    }

    /// The observers were told of one of the task's outcomes (or its end).
    private func outcomeObserved() {
        perform(engine.withLock { $0.outcomeObserved(ref) })
    }

    /// Starts one of the task's Swift tasks (an interceptor's, a reaction's): cancelled at once
    /// if the task ended meanwhile.
    private func workStarted(_ work: Task<Void, Never>) {
        engine.withLock { $0.workStarted(ref, work) }?.cancel()
    }

    // MARK: Actions

    private func proceed(_ step: Engine.Step) {
        switch step {
        case .none:
            return
        case .checkGates:
            preconditionFailure("a .checkGates never leaves the section that returned it (Engine.passGates)")
        case .runInterceptor(let index, let task):
            runInterceptor(index, on: task)
        case .hold(let index, let maximumWait, let generation, let flushes):
            recorder?.held(by: environment.interceptorComponents[index])
            waitBegins()
            let batch = environment.batches[index]
            batch.hold(self, maximumWait: maximumWait, flushesSeen: flushes)
            // A cancel that raced with the hold found nothing to leave (the batch is a storage of
            // its own: its lock is not the engine's).
            if engine.withLock({ $0.isCompleted(ref) }) { batch.remove(self) }
            armHoldTimeout(index: index, generation: generation)
        case .releaseBatch(let index):
            environment.batches[index].release(with: self)
        case .acquireConnection(let request, let restamp, let task):
            // The slot key matters only where slots are kept. What the covering reactors report
            // of the task as it is about to leave: their code, read before the section.
            let host = engine.slotsPerHost == nil ? "" : URLOrigin.slotKey(of: request)
            let readings = task.map(outdatedVersions(of:)) ?? [:]
            perform(engine.withLock { $0.wantsToSend(ref, host: host, restamp: restamp, readings: readings) })
        case .complete(let completion):
            complete(completion)
        case .waitAtGate(let reactor):
            recorder?.waiting(for: .reactorGate(reactor: environment.reactors[reactor].name))
            waitBegins()
        }
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
        recorder?.completed(error: URLError(.cancelled))
        environment.taskEnded(self)
    }

    /// Tells the caller, then lets the task go; with observers, only once they were told of
    /// every outcome of the task (``OutcomeObservationStateMachine``): the end, for the
    /// observers that want it, is one more outcome the task's end waits for.
    private func complete(_ completion: TaskStateMachine.Completion) {
        guard let outcomeObservers else { return finish(completion) }
        let queueEnd = outcomeObservers.observesEnds
        perform(engine.withLock { $0.finishRequested(ref, completion, queueEnd: queueEnd) })
    }

    /// Hands `outcome` of `task` (as sent) to the manager's observers, on their queue; the task's
    /// end waits for it (queued in the section that brought it).
    private func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
        outcomeObservers?.observe(outcome, of: task) { [self] in outcomeObserved() }
    }

    private func finish(_ completion: TaskStateMachine.Completion) {
        switch completion {
        case .finish:
            recorder?.completed()
            sink.finish()
        case .respond(let response, let data):
            recorder?.completed(response: response)
            sink.receive(response: response)
            if !data.isEmpty { sink.receive(data: data) }
            sink.finish()
        case .fail(let error):
            recorder?.completed(error: error)
            sink.fail(error)
        }
        // Its timers are cancelled as it leaves the engine.
        environment.taskEnded(self)
    }

    // MARK: Waits

    /// The task starts to wait inside the pipeline; the first wait of a stretch sets the timer
    /// (``TaskStateMachine/waitBegins()``).
    private func waitBegins() {
        if let timer = engine.withLock({ $0.waitBegins(ref) }) { armWaitTimer(timer) }
    }

    /// Arms a timer for one of the task's waits, kept in the engine to be cancelled when the task
    /// ends. Each checks, when it fires, that the wait it bounds is still on (the machine's
    /// generations), so one that fires anyway changes nothing.
    private func arm(_ deadline: DispatchTime, _ fired: @escaping @Sendable (TaskRun) -> Void) {
        let timer = environment.runtime.at(deadline) { [weak self] in
            guard let self else { return }
            fired(self)
        }
        engine.withLock { $0.timerArmed(ref, timer) }?.cancel()
    }

    /// Arms the timer of a stretch of waits (``TaskStateMachine/waitBegins()``).
    private func armWaitTimer(_ timer: TaskStateMachine.WaitTimer) {
        arm(timer.deadline) { run in run.perform(run.engine.withLock { $0.waitExpired(run.ref, generation: timer.generation) }) }
    }

    private func armHoldTimeout(index: Int, generation: Int) {
        // Both come from the caller: clamped before any arithmetic (0.2.0 trapped converting a
        // policy's 1e16 s, NaN or infinity to milliseconds).
        let limit = (policy?.maximumHoldSeconds.map(Duration.init(clampingSeconds:)) ?? environment.options.maximumHoldTime).clampedWait
        let interceptor = environment.interceptorComponents[index]
        arm(environment.runtime.now + limit.dispatchInterval) { run in
            let error = URLTaskError.holdTimedOut(interceptor, after: limit)
            run.perform(run.engine.withLock { $0.holdExpired(run.ref, index: index, generation: generation, error: error) })
        }
    }

    /// Bounds a wait for a connection slot by the request's timeout, as URLSession's own queue
    /// does: the task then fails with `URLError.timedOut`. Firing is one section: the task
    /// leaves the queue and fails together, if it still waits in that generation.
    private func armSlotTimeout(generation: Int, timeout: TimeInterval, url: URL?) {
        guard timeout > 0, timeout.isFinite else { return }
        arm(environment.runtime.now + timeout) { run in
            run.perform(run.engine.withLock { $0.slotWaitExpired(run.ref, generation: generation, error: URLError.timedOut(url: url)) })
        }
    }

    // MARK: Interceptors and reactors

    private func runInterceptor(_ index: Int, on task: URLTask) {
        let work = environment.intercept(index, task) { [self] outcome, snapshot, flushes in
            let interceptor = environment.interceptorComponents[index]
            recorder?.intercepted(interceptor, outcome)
            switch outcome {
            case .success(let command):
                perform(
                    engine.withLock {
                        $0.interceptorReturned(
                            ref, index: index, command: command, snapshot: snapshot, flushes: flushes, interceptor: interceptor)
                    })
            case .failure(let error):
                perform(engine.withLock { $0.interceptorThrew(ref, index: index, error: error, interceptor: interceptor) })
            }
        }
        // An interceptor that decided without suspending has already moved the task on.
        guard let work else { return }
        // It may wait (for a credential, a lock, another service): that counts toward the timeout.
        waitBegins()
        workStarted(work)
    }

    /// What the covering reactors that keep versions of their own report of `task` as it is about
    /// to leave, when its headers carry an older version than the current one: their code, so
    /// called without the lock, just before the event the readings inform. Headers of the current
    /// version need no record (on a send, the common case, nothing is built); a task judged later
    /// on another task's event reads again (``Engine/TaskAction/confirmSlot(task:)``).
    private func outdatedVersions(of task: URLTask) -> [Int: ReactorRunStateMachine.ReportedVersion] {
        var readings: [Int: ReactorRunStateMachine.ReportedVersion] = [:]
        for index in reporters {
            if let reading = environment.reactors[index].reportedVersion(of: task), reading.isOutdated { readings[index] = reading }
        }
        return readings
    }

    /// The first reactor that takes `outcome` of `task` (as sent): the reactors' code, outside the lock.
    private func chooseReactor(for outcome: URLTaskOutcome, of task: URLTask) -> Int? {
        for reactor in environment.reactors where !exemptedBy[reactor.index] {
            if let policy, policy.skips(reactor.component, type: reactor.type) { continue }
            if reactor.reactor.shouldReact(to: outcome, of: task) { return reactor.index }
        }
        return nil
    }

    /// A reactor that runs its work for each task on its own took the outcome; the task's slot
    /// went back in the section that ended its transfer.
    private func reactAlone(_ reaction: Engine.Reaction) {
        if let timer = reaction.timer { armWaitTimer(timer) }
        let reactor = environment.reactors[reaction.index]
        recorder?.reactionStarting()
        recorder?.reacted(by: reactor.name, run: nil)
        let work = environment.runtime.react(reactor, to: reaction.outcome, body: reaction.body, of: reaction.task) { [self] result in
            perform(engine.withLock { $0.reactionEnded(ref, reactor: reaction.index, outcome: result) })
        }
        if let work { workStarted(work) }
    }

    /// A shared reactor took the outcome: its run was started or joined in the section that ended
    /// the transfer (or the task was answered at once).
    private func reactTogether(_ reaction: Engine.Reaction, startRun: Int?, run: Int?, immediate: Engine.TaskAction?) {
        if let timer = reaction.timer { armWaitTimer(timer) }
        recorder?.reactionStarting()
        recorder?.reacted(by: environment.reactors[reaction.index].name, run: immediate == nil ? run : nil)
        if let startRun {
            engine.startRun(reactor: reaction.index, number: startRun, outcome: reaction.outcome, body: reaction.body, task: reaction.task)
        }
        if let immediate { perform(immediate) }
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
            perform(engine.withLock { $0.challengeAnswered(ref, answer, now: now) })
        }
    }

    // MARK: Transfers

    private func send(_ request: URLRequest, body: URLTaskBody, attempt: Int, whole: Bool, task: URLTask?, stamped: [Int: Int]) {
        // The bytes sent decide the framing, never a header that disagrees with them.
        let framed = BodyFraming.framed(request, body: body)
        let share = task.flatMap { sharing(of: framed, body: body, task: $0, stamped: stamped, attempt: attempt) }
        if share == nil, let recorder, let task {
            // Before the transfer starts: its response may arrive before the next line runs.
            announceSent(to: recorder, task: task, stamped: stamped, attempt: attempt, body: body)
        }
        // A task that may no longer take a whole transfer (``TaskStateMachine/mayTakeWholeTransfer``) streams.
        let delivery = delivery == .whole && !whole ? .streamed : delivery
        let events = TransferEvents(run: self, sentAs: task)
        environment.startTransfer(framed, body: body, callerURL: callerURL, events: events, share: share, delivery: delivery) {
            [self] started in
            switch started {
            case .success(let handle):
                if let stop = engine.withLock({ $0.transferStarted(ref, handle, attempt: attempt) }), !environment.abandonsTransfers {
                    // A cancel that raced with the send found no inner task to stop.
                    environment.stopTransfer(stop)
                }
            case .failure(let error):
                // The session was invalidated meanwhile: one section fails the task and hands
                // its slot over.
                if let completion = engine.withLock({ $0.transferCouldNotStart(ref, error) }) { complete(completion) }
            }
        }
    }

    /// The task's `sent` event, then what its interceptors asked to say once it is sent
    /// (``URLTask/annotateWhenSent(_:_:)``: a `curl` command, a trace span).
    private func announceSent(to recorder: TaskEventRecorder, task: URLTask, stamped: [Int: Int], attempt: Int, body: URLTaskBody) {
        var versions: [String: Int] = [:]
        for reactor in environment.reactors {
            if let version = reactor.credentialVersion(of: task, stamped: stamped) { versions[reactor.name] = version }
        }
        recorder.sent(attempt: attempt, credentialVersions: versions, body: body)
        for annotation in task.annotationsWhenSent { recorder.annotated(name: annotation.name, value: annotation.value) }
    }

    /// How this task may share its transfer with identical requests in flight, or `nil`: the
    /// manager has a ``TransferSharingInterceptor`` and the task is marked ``ShareableTransfer``, has no body, is not a
    /// part's own exclusive request (``ExclusiveTransfer``), and its method is shared.
    private func sharing(of request: URLRequest, body: URLTaskBody, task: URLTask, stamped: [Int: Int], attempt: Int) -> TransferShare? {
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
                if let recorder { announceSent(to: recorder, task: task, stamped: stamped, attempt: attempt, body: body) }
            case .joins(let leader):
                // It uses no connection of its own: the slot goes to the next task.
                engine.withLock { $0.joinedSharedTransfer(ref) }
                recorder?.joinedSharedTransfer(of: leader, attempt: attempt)
                // Nor anything on the wire: a part that counts what is sent (a rate limiter) hears it.
                outcomeObservers?.observeJoinedTransfer(of: task)
            }
        }
    }

    // MARK: The transfer's events (``TransferEvents``)

    fileprivate func transportDidReceive(response: URLResponse, sentAs task: URLTask?) {
        // An interim head (100, 103) is not the answer: the caller, the redirect decision and
        // the reactors see only the final one.
        if TaskStateMachine.isInterim(response) { return }
        let http = response as? HTTPURLResponse
        // The task as sent is at hand wherever a reactor or an observer is (``Engine/Traits``).
        let reactor = http.flatMap { http in task.flatMap { chooseReactor(for: .response(http), of: $0) } }
        let challenge = answersChallenges && http.map(AuthenticationChallenge.isChallenge) == true
        recorder?.responseHead(response)
        // The section queues the outcome for the observers; they are told once it did.
        let forwarded = engine.withLock { $0.responseHead(ref, response, reactor: reactor, challenge: challenge) }
        if let http, let task { observe(.response(http), of: task) }
        if let forwarded { sink.receive(response: forwarded) }
    }

    /// The transfer met a redirect; the inner session waits for `decide`, which is always told
    /// not to follow: the pipeline follows a redirect itself, through the interceptors.
    fileprivate func transportWillRedirect(
        _ response: HTTPURLResponse, to newRequest: URLRequest, decide: @escaping @Sendable (URLRequest?) -> Void
    ) {
        guard let current = engine.withLock({ $0.redirected(ref) }) else { return decide(nil) }
        let proposed = Redirect.request(following: response, to: newRequest, from: current)
        sink.redirect(response, to: proposed) { [self] answer in
            // The task keeps the caller's policy; an answer made from `originalRequest` carries
            // it again, and interceptors never see it.
            let answer = answer.map(URLTaskPolicy.removed(from:))
            // Asked first, as a plain session asks it; a request that leaves HTTP then fails.
            let refused = answer.flatMap { Redirect.refusal(of: $0.url, redirectedFrom: response) }
            if let answer, refused == nil { recorder?.redirected(response, to: answer.url) }
            engine.withLock { $0.redirectAnswered(ref, answer, refused: refused) }
            decide(nil)
        }
    }

    fileprivate func transportDidReceive(data: Data) {
        recorder?.received(data.count)
        switch engine.withLock({ $0.received(ref, data) }) {
        case .none: break
        case .forward(let data): sink.receive(data: data)
        case .stop(let transfer): environment.stopTransfer(transfer)
        case .fail(let action): perform(action)
        }
    }

    fileprivate func transportDidDropBody(byteCount: Int) {
        recorder?.received(byteCount)
    }

    fileprivate func transportDidSendBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        sink.sentBody(totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend)
    }

    /// The transfer ended: one section, or more when the reactors' code must answer first (a
    /// transport error before the head: which reactor takes it; an outcome taken by a reactor that
    /// keeps versions of its own: what it reports of the task as sent).
    fileprivate func transportDidComplete(error: (any Error)?, sentAs task: URLTask?) {
        let now = environment.runtime.now
        var choice: Int??
        var reading: ReactorRunStateMachine.ReportedVersion??
        var failure: (URLTaskOutcome, URLTask)?
        while true {
            let end = engine.withLock { $0.transferEnded(ref, error: error, choice: choice, reading: reading, now: now) }
            switch end {
            case .chooseReactor(let sent):
                let outcome = URLTaskOutcome.failure(error ?? URLError(.unknown))
                choice = .some(chooseReactor(for: outcome, of: sent))
                failure = (outcome, sent)
                continue
            case .needsReading(let reactor):
                reading = .some(task.flatMap { environment.reactors[reactor].reportedVersion(of: $0) })
                continue
            default:
                // Queued in the section that ended the transfer: the observers are told now.
                if let (outcome, sent) = failure { observe(outcome, of: sent) }
                recorder?.transferEnded()
                perform(end)
            }
            return
        }
    }

    private func perform(_ end: Engine.TransferEnd) {
        switch end {
        case .none, .chooseReactor, .needsReading:
            break
        case .complete(let completion):
            complete(completion)
        case .consultChallenge(let response, let failures, let request):
            consultChallenge(response, previousFailures: failures, request: request)
        case .restart(let step):
            proceed(step)
        case .reactAlone(let reaction):
            reactAlone(reaction)
        case .reactTogether(let reaction, let startRun, let run, let immediate):
            reactTogether(reaction, startRun: startRun, run: run, immediate: immediate)
        }
    }
}

/// The events of one transfer of a task, with the task as it was sent: the reactors asked which
/// takes the outcome, and the observers told of it, see the task as it left, without a section
/// to read it back (the machine does not change it while the transfer runs).
final class TransferEvents: TransportEvents {
    private let run: TaskRun
    private let sentAs: URLTask?

    init(run: TaskRun, sentAs: URLTask?) {
        self.run = run
        self.sentAs = sentAs
    }

    func transportDidReceive(response: URLResponse) { run.transportDidReceive(response: response, sentAs: sentAs) }
    func transportDidReceive(data: Data) { run.transportDidReceive(data: data) }
    func transportDidDropBody(byteCount: Int) { run.transportDidDropBody(byteCount: byteCount) }
    func transportDidComplete(error: (any Error)?) { run.transportDidComplete(error: error, sentAs: sentAs) }

    func transportDidSendBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        run.transportDidSendBody(totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend)
    }

    func transportWillRedirect(_ response: HTTPURLResponse, to request: URLRequest, decide: @escaping @Sendable (URLRequest?) -> Void) {
        run.transportWillRedirect(response, to: request, decide: decide)
    }
}
