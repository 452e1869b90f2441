import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One task's ``TaskStateMachine`` under a lock, and the I/O its actions name.
///
/// Every event is one lock section: take the lock, call the machine's event, release, perform
/// the returned action. The machine holds everything the task carries; this class keeps only
/// who the task is and whom it talks to (its ``TaskEnvironment``, its sink, its observer). No
/// interceptor, reactor, transport call or client callback ever runs under the lock: where an
/// event needs the answer of such code first (which reactor wants a response, whether a
/// reactor finds the headers outdated, whether `failTasks`'s predicate matches), that code runs
/// on a snapshot of the task taken just before, and the event is sent with its answer.
final class TaskStorage: TransportEvents, PipelineTaskHandle, @unchecked Sendable {  // `machine` is guarded by `lock`.
    let id: URLTask.ID
    /// The URL the caller asked for, which the errors a plain session would give name.
    let callerURL: URL?
    /// What the caller changed for this request alone (read from it, and removed, at creation).
    private let policy: URLTaskPolicy?
    private let lock = NSLock()
    private var machine: TaskStateMachine
    private let sink: any TaskSink
    private let environment: any TaskEnvironment
    /// Records and emits this task's events; `nil` when nobody listened as it started.
    private let observer: TaskObserver?
    /// Which reactors exempt this task (``URLTaskReactorConfiguration/exempts``), by index:
    /// asked once, of the caller's request, for admission's gates and for every outcome.
    let exemptedBy: [Bool]
    /// The manager's outcome observers; `nil` when it has none.
    private let outcomeObservers: OutcomeObservers?
    /// Whether the task's end or next attempt waits for its outcomes to be observed; guarded by
    /// `lock`.
    private var observation = OutcomeObservationStateMachine<TaskStateMachine.Completion, TaskStateMachine.ProceedAction>()
    /// The timers armed for this task's waits, cancelled as it ends so none outlives it (a
    /// request's timeout is 60 s by default); guarded by `lock`. Each checks, when it fires,
    /// that the wait it bounds is still on (the machine's generations), so one that fires
    /// anyway changes nothing.
    private var timers: [any PipelineTimer] = []

    init(id: URLTask.ID, request: URLRequest, body: URLTaskBody, sink: any TaskSink, environment: any TaskEnvironment) {
        self.id = id
        self.callerURL = request.url
        let (request, policy) = URLTaskPolicy.take(from: request)
        self.policy = policy
        // The configuration's additional headers belong to the caller's request, not to every
        // request the inner session sends (a cross-origin redirect must not carry them).
        var bare = environment.additionalHeaders.applied(to: request)
        bare.removeBody()
        self.exemptedBy = environment.reactors.map { $0.configuration.exempts(bare) }
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

    // MARK: Events

    func start() {
        var replayable: URLTaskBody?
        if !environment.reactors.isEmpty, case .stream(let stream) = lock.withLock({ machine.body }) {
            // A reactor may send the task again, and a stream can be read only once.
            switch ReplayableBody.prepare(stream, limit: environment.options.maximumReplayableBodySize) {
            case .success(let body): replayable = body
            case .failure(let error): return failUnsent(error)
            }
        }
        proceed(lock.withLock { machine.start(replayableBody: replayable) })
    }

    /// The caller cancelled (`stopLoading`, on the session's work queue). The transition is made
    /// at once, so nothing that happens next (a connection slot granted, a batch released) can
    /// still send the task; the action is performed elsewhere, because stopping an inner task
    /// syncs onto that very work queue.
    func cancel() {
        let action = lock.withLock { machine.cancel() }
        if case .none = action { return }
        environment.runtime.async { self.perform(action) }
    }

    func batchReleased(index: Int) {
        observer?.released(by: environment.interceptorComponents[index])
        proceed(lock.withLock { machine.released(index: index) })
    }

    /// A reactor whose gate held this task finished successfully: check the gates again.
    func gateOpened() {
        decideHeaders()
    }

    /// Ends the task with `error`, wherever it is, if `matches` says so of it as it stands
    /// (``URLTaskManager/failTasks(with:where:)``). `matches` is the caller's code: it runs on a
    /// snapshot, outside the lock.
    func abort(with error: any Error, if matches: (URLTask) -> Bool) {
        guard matches(lock.withLock({ machine.task })) else { return }
        let action = lock.withLock { machine.abort(error) }
        // Off the caller's thread: stopping a transfer syncs onto URLSession's work queue.
        environment.runtime.async { self.perform(action) }
    }

    /// Fails the task if it has not been sent yet (invalidation, a failed run it was gated on,
    /// a slot wait longer than the request's timeout).
    func failUnsent(_ error: any Error) {
        perform(lock.withLock { machine.fail(error) })
    }

    /// What admission decided for this task, now or on another task's event (a slot handed
    /// over). `failure` is the error of a `.fail` decision.
    func admitted(_ decision: AdmissionStateMachine.SendAction, failure: (any Error)?) {
        switch decision {
        case .send:
            // Headers older than a covering reactor's own credential version (a token renewed
            // before it expired by another request): give the slot back, intercept again.
            if environment.admission.headersAreOutdated(self, task: { lock.withLock { machine.task } }) {
                environment.admission.transferEnded(self)
                return admitted(.reintercept, failure: nil)
            }
            perform(lock.withLock { machine.connectionGranted() })
        case .waitForSlot(let generation):
            if let observer { observer.waiting(for: .connectionSlot(host: Self.host(of: lock.withLock { machine.task.request }))) }
            armSlotTimeout(generation: generation)
            waitBegins()
        case .waitAtGate(let reactor):
            observer?.waiting(for: .reactorGate(reactor: environment.reactors[reactor].name))
            waitBegins()
            lock.withLock { machine.admissionGated(reactor: reactor) }
            // The run may have ended before the line above; its `gateOpened` then found the
            // task still awaiting admission and was ignored. Now that the task is gated, decide again.
            decideHeaders()
        case .reintercept:
            proceed(lock.withLock { machine.headersStale() })
        case .fail:
            failUnsent(failure ?? URLTaskError.managerInvalidated)
        }
    }

    func reactionFinished(reactor index: Int, outcome: ReactorStorage.Outcome) {
        let result: TaskStateMachine.ReactionResult
        switch outcome {
        case .succeeded:
            switch environment.reactors[index].configuration.mode.afterwards {
            case .sendAgain: result = .requeue(reintercept: true)
            case .sendAgainUnchanged: result = .requeue(reintercept: false)
            case .deliverResponse: result = .deliver
            }
        case .failed(let error):
            result = .fail(error)
        case .declined:
            result = .deliver
        }
        let (action, attempt) = lock.withLock { (machine.reactionFinished(reactor: index, result: result), machine.attempt) }
        if let observer {
            observer.reactionEnded()
            switch action {
            case .checkGates, .acquireConnection: observer.requeued(attempt: attempt)
            default: break
            }
        }
        resend(action)
    }

    /// Performs `action`, which may send the task again after an outcome: with observers, only
    /// once they were told of every outcome of the task (``OutcomeObservationStateMachine``).
    private func resend(_ action: TaskStateMachine.ProceedAction) {
        switch action {
        case .checkGates, .acquireConnection:
            guard outcomeObservers != nil else { return proceed(action) }
            switch lock.withLock({ observation.resendRequested(action) }) {
            case .resendNow(let action): proceed(action)
            case .wait, .drop: return
            }
        default:
            proceed(action)
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
        let action = lock.withLock { machine.transportReceived(response: response, reactor: reactor, challenge: challenge) }
        if case .forward(let response) = action { sink.receive(response: response) }
    }

    /// The transfer met a redirect; the inner session waits for `decide`, which is always told
    /// not to follow: the pipeline follows a redirect itself, through the interceptors.
    func transportWillRedirect(_ response: HTTPURLResponse, to newRequest: URLRequest, decide: @escaping @Sendable (URLRequest?) -> Void) {
        let action = lock.withLock {
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
            lock.withLock { machine.redirectAnswered(answer, refused: refused) }
            decide(nil)
        }
    }

    func transportDidReceive(data: Data) {
        observer?.received(data.count)
        if case .forward(let data) = lock.withLock({ machine.transportReceived(data: data) }) { sink.receive(data: data) }
    }

    func transportDidSendBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        sink.sentBody(totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend)
    }

    func transportDidComplete(error: (any Error)?) {
        // Which reactor wants a transport error is the reactors' code: asked outside the lock,
        // and only when the error would be the task's outcome.
        var reactor: Int?
        if let error, !environment.reactors.isEmpty || outcomeObservers != nil, lock.withLock({ machine.isAwaitingResponseHead }) {
            if outcomeObservers != nil { observe(.failure(error)) }
            reactor = chooseReactor(for: .failure(error))
        }
        let now = environment.runtime.now
        let (action, forwarded) = lock.withLock {
            let forwarded = machine.isForwardingResponse
            return (machine.transportCompleted(error: error, reactor: reactor, now: now), forwarded)
        }
        observer?.transferEnded()
        if case .react(let index, let outcome, let body, let task, let requeued) = action {
            return react(index, outcome: outcome, body: body, task: task, requeued: requeued)
        }
        // Free the slot before the caller hears of the end, so it never sees it taken. An answer
        // no reactor needed tells the loop guards that the credential works; not when the request
        // skipped a reactor, which never saw the answer.
        environment.admission.transferEnded(self, answered: forwarded && policy?.skippedReactors.isEmpty != false)
        switch action {
        case .none, .react:
            break
        case .complete(let completion):
            complete(completion)
        case .consultChallenge(let response, let failures, let request):
            consultChallenge(response, previousFailures: failures, request: request)
        case .restart:
            // A followed redirect: its 3xx was an outcome too.
            resend(.checkGates)
        }
    }

    // MARK: Actions

    private func proceed(_ action: TaskStateMachine.ProceedAction) {
        switch action {
        case .none:
            return
        case .checkGates:
            decideHeaders()
        case .runInterceptor(let index, let task):
            runInterceptor(index, on: task)
        case .hold(let index, let maximumWait, let generation, let flushes):
            observer?.held(by: environment.interceptorComponents[index])
            waitBegins()
            let batch = environment.batches[index]
            batch.hold(self, maximumWait: maximumWait, flushesSeen: flushes)
            // A cancel that raced with the hold found nothing to leave.
            if lock.withLock({ machine.isCompleted }) { batch.remove(self) }
            armHoldTimeout(index: index, generation: generation)
        case .releaseBatch(let index):
            environment.batches[index].release(with: self)
        case .acquireConnection(let request, let restamp):
            // The slot key matters only where slots are kept.
            let admission = environment.admission
            let host = admission.slotsPerHost == nil ? "" : Self.host(of: request)
            let (decision, failure) = admission.wantsToSend(self, host: host, restamp: restamp)
            admitted(decision, failure: failure)
        case .complete(let completion):
            complete(completion)
        }
    }

    private func perform(_ action: TaskStateMachine.SendAction) {
        switch action {
        case .send(let request, let body, let attempt):
            send(request, body: body, attempt: attempt)
        case .refuse(let error):
            environment.admission.transferEnded(self)
            complete(.fail(error))
        case .giveSlotBack:
            // Cancelled meanwhile: the slot goes to the next task.
            environment.admission.transferEnded(self)
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
        if outcomeObservers != nil, case .wait = lock.withLock({ observation.finishRequested(completion) }) { return }
        finish(completion)
    }

    /// Hands `outcome` to the manager's observers, on their queue; the task's end waits for it.
    private func observe(_ outcome: URLTaskOutcome) {
        guard let outcomeObservers else { return }
        let snapshot = lock.withLock {
            observation.outcomeQueued()
            return machine.task
        }
        outcomeObservers.observe(outcome, of: snapshot) { [self] in
            switch lock.withLock({ observation.outcomeObserved() }) {
            case .none: break
            case .finish(let completion): finish(completion)
            case .resend(let action): proceed(action)
            }
        }
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
        lock.withLock { timers.append(timer) }
    }

    private func cancelTimers() {
        let armed = lock.withLock {
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
            resend(lock.withLock { machine.challengeAnswered(answer, now: now) })
        }
    }

    /// Waits at a running reactor's gate, or records the credential stamps and goes on to the
    /// interceptors. Stamped before the interceptors run, not at send: an interceptor (or a
    /// batch hold) may apply a token, then a run may start and end before the task is sent.
    private func decideHeaders() {
        switch environment.admission.headersWillBeDecided(self) {
        case .waitAtGate(let reactor):
            observer?.waiting(for: .reactorGate(reactor: environment.reactors[reactor].name))
            waitBegins()
            lock.withLock { machine.waitingAtGate(reactor: reactor) }
        case .proceed:
            proceed(lock.withLock { machine.gateOpened() })
        }
    }

    private func runInterceptor(_ index: Int, on task: URLTask) {
        let work = environment.intercept(index, task) { [self] outcome, snapshot, flushes in
            let interceptor = environment.interceptorComponents[index]
            observer?.intercepted(interceptor, outcome)
            proceed(
                lock.withLock {
                    switch outcome {
                    case .success(let command):
                        return machine.interceptorReturned(
                            index: index, command: command, snapshot: snapshot, flushes: flushes, interceptor: interceptor)
                    case .failure(let error):
                        return machine.interceptorThrew(index: index, error: error, interceptor: interceptor)
                    }
                })
        }
        // An interceptor that decided without suspending has already moved the task on.
        guard let work else { return }
        // It may wait (for a credential, a lock, another service): that counts toward the timeout.
        waitBegins()
        if case .cancel(let work) = lock.withLock({ machine.workStarted(work) }) { work.cancel() }
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
            perform(lock.withLock { machine.holdExpired(index: index, generation: generation, error: error) })
        }
    }

    private func chooseReactor(for outcome: URLTaskOutcome) -> Int? {
        guard !environment.reactors.isEmpty else { return nil }
        let snapshot = lock.withLock { machine.task }
        for reactor in environment.reactors where !exemptedBy[reactor.index] {
            if let policy, policy.skips(reactor.component, type: reactor.type) { continue }
            if reactor.reactor.shouldReact(to: outcome, of: snapshot) { return reactor.index }
        }
        return nil
    }

    /// Hands the task's outcome to reactor `index`, and gives its connection slot back.
    private func react(_ index: Int, outcome: URLTaskOutcome, body: Data, task: URLTask, requeued: Bool) {
        waitBegins()
        let reactor = environment.reactors[index]
        observer?.reactionStarting()
        if reactor.configuration.mode.isShared {
            // The run starts (or is joined) and the slot is handed over in one transition.
            let (immediate, run) = environment.admission.transferEnded(
                self, needing: index, alreadyRequeued: requeued, outcome: outcome, body: body, task: task)
            observer?.reacted(by: reactor.name, run: run)
            if let immediate { reactionFinished(reactor: index, outcome: immediate) }
        } else {
            observer?.reacted(by: reactor.name, run: nil)
            environment.admission.transferEnded(self)
            let work = environment.runtime.react(reactor, to: outcome, body: body, of: task) { [self] result in
                reactionFinished(reactor: index, outcome: result)
            }
            if let work, case .cancel(let work) = lock.withLock({ machine.workStarted(work) }) { work.cancel() }
        }
    }

    /// The key requests share slots under: scheme, host and port, as URLSession pools connections.
    static func host(of request: URLRequest) -> String {
        URLOrigin.description(of: request.url) ?? ""
    }

    /// Bounds a wait for a connection slot by the request's timeout, as URLSession's own queue
    /// does: the task then fails with `URLError.timedOut`.
    private func armSlotTimeout(generation: Int) {
        let (interval, url) = lock.withLock { (machine.task.request.timeoutInterval, machine.task.request.url) }
        guard interval > 0, interval.isFinite else { return }
        let runtime = environment.runtime
        arm(runtime.now + interval) { [weak self] in
            guard let self, environment.admission.slotWaitExpired(self, generation: generation) else { return }
            failUnsent(URLError.timedOut(url: url))
        }
    }

    /// The task starts to wait inside the pipeline; the first wait of a stretch sets the timer
    /// (``TaskStateMachine/waitBegins()``).
    private func waitBegins() {
        guard let timer = lock.withLock({ machine.waitBegins() }) else { return }
        arm(timer.deadline) { [weak self] in
            guard let self else { return }
            perform(
                lock.withLock {
                    let url = machine.task.request.url
                    return machine.waitExpired(generation: timer.generation, error: URLError.timedOut(url: url))
                })
        }
    }

    private func send(_ request: URLRequest, body: URLTaskBody, attempt: Int) {
        // The bytes sent decide the framing, never a header that disagrees with them.
        let framed = BodyFraming.framed(request, body: body)
        var snapshot: URLTask?
        if observer != nil || environment.sharing != nil { snapshot = lock.withLock { machine.task } }
        let share = snapshot.flatMap { sharing(of: framed, body: body, task: $0, attempt: attempt) }
        if share == nil, let observer, let snapshot {
            // Before the transfer starts: its response may arrive before the next line runs.
            announceSent(to: observer, task: snapshot, attempt: attempt, body: body)
        }
        environment.startTransfer(framed, body: body, callerURL: callerURL, events: self, share: share) {
            [self] started in
            switch started {
            case .success(let transfer):
                if case .cancel(let transfer) = lock.withLock({ machine.transferStarted(transfer, attempt: attempt) }),
                    !environment.abandonsTransfers
                {
                    // A cancel that raced with the send found no inner task to stop.
                    environment.stopTransfer(transfer)
                }
            case .failure(let error):
                // The session was invalidated meanwhile.
                environment.admission.transferEnded(self)
                if let completion = lock.withLock({ machine.failSending(error) }) { complete(completion) }
            }
        }
    }

    /// The task's `sent` event, then what its interceptors asked to say once it is sent
    /// (``URLTask/annotateWhenSent(_:_:)``: a `curl` command, a trace span).
    private func announceSent(to observer: TaskObserver, task: URLTask, attempt: Int, body: URLTaskBody) {
        observer.sent(attempt: attempt, credentialVersions: environment.admission.credentialVersions(of: self, task: task), body: body)
        for annotation in task.annotationsWhenSent { observer.annotated(name: annotation.name, value: annotation.value) }
    }

    /// How this task may share its transfer with identical requests in flight, or `nil`: the
    /// manager has a ``TransferSharingInterceptor`` and the task is marked ``ShareableTransfer``, has no body, is not a
    /// part's own exclusive request (``ExclusiveTransfer``), and its method is shared.
    private func sharing(of request: URLRequest, body: URLTaskBody, task: URLTask, attempt: Int) -> TransferShare? {
        guard let sharing = environment.sharing, case .none = body, task.attemptValues[ShareableTransfer.self] == true,
            task.attemptValues[ExclusiveTransfer.self] != true,
            let key = SharingKey(request, policy: policy, rules: sharing.rules)
        else { return nil }
        // Weakly: the subscription keeps this closure, and the task keeps the subscription.
        return TransferShare(key: key, task: id, request: request) { [weak self] role in
            guard let self else { return }
            switch role {
            case .sends, .sendsAlone:
                if let observer { announceSent(to: observer, task: task, attempt: attempt, body: body) }
            case .joins(let leader):
                // It uses no connection of its own: the slot goes to the next task.
                environment.admission.transferEnded(self)
                observer?.joinedSharedTransfer(of: leader, attempt: attempt)
            }
        }
    }
}
