import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Runs one task: its ``TaskStateMachine`` under a lock, and the actions it returns.
///
/// Every event takes the lock only for the transition; the returned action is performed with
/// the lock released, so no interceptor, reactor, transport call or client callback ever runs
/// under it.
final class TaskRun: TransportEvents, PipelineTaskHandle, @unchecked Sendable {  // mutable state is guarded by `lock`.
    let id: URLTask.ID
    /// The URL the caller asked for, which the errors a plain session would give name.
    let callerURL: URL?
    /// What the caller changed for this request alone (read from it, and removed, at start).
    private let policy: URLTaskPolicy?
    private let lock = NSLock()
    private var machine: TaskStateMachine
    private var task: URLTask
    private var innerTask: URLSessionTask?
    private var running: Task<Void, Never>?
    private var hold: (index: Int, generation: Int)?
    private var holdGeneration = 0
    /// The batch's flush count when the interceptor that returned last began deciding.
    private var decidedUnderFlushes = 0
    private var bodyUsed = false
    /// Where the interceptors start on each attempt: the caller's request, or what a followed
    /// redirect or an answered challenge sends instead.
    private var base: URLRequest
    /// Challenges of this task the caller's side answered with a credential that failed.
    private var challengeFailures = 0
    /// The body each attempt's interceptors start from (``URLTask/body``): the caller's,
    /// replaced once, in ``start()``, by a replayable copy when it is a stream, and by what a
    /// followed redirect or an answered challenge carries.
    private var body: URLTaskBody
    private let sink: any TaskSink
    private let pipeline: Pipeline
    /// Records and emits this task's events; `nil` when nobody listened as it started.
    private let observer: TaskObserver?
    /// The current stretch of the task's life without the network: its waits count toward the
    /// request's `timeoutInterval` (see ``waitBegins()``).
    private var waiting = WaitPhase()

    /// One stretch of a task's life inside the pipeline: from its start, the end of a transfer
    /// it reacts to, or a restart, until it is sent. `armed` once its first wait set the timer.
    private struct WaitPhase {
        var generation = 0
        var started = DispatchTime.now()
        var armed = false

        /// A new stretch starts now; a timer set for the previous one no longer fires.
        mutating func begin() {
            generation += 1
            started = .now()
            armed = false
        }

        /// The task is sent: nothing it waited for can time it out any more.
        mutating func end() {
            generation += 1
            armed = true
        }
    }

    init(id: URLTask.ID, request: URLRequest, body: URLTaskBody, sink: any TaskSink, pipeline: Pipeline) {
        self.id = id
        self.callerURL = request.url
        let (request, policy) = URLTaskPolicy.take(from: request)
        self.policy = policy
        // The configuration's additional headers belong to the caller's request, not to every
        // request the inner session sends (a cross-origin redirect must not carry them).
        var bare = pipeline.additionalHeaders.applied(to: request)
        bare.httpBody = nil
        bare.httpBodyStream = nil
        self.task = URLTask(id: id, originalRequest: bare, attempt: 1, body: body)
        self.task.policy = policy
        self.base = bare
        self.body = body
        self.sink = sink
        self.pipeline = pipeline
        self.observer = pipeline.events.isListening ? TaskObserver(id: id, request: request, hub: pipeline.events) : nil
        self.machine = TaskStateMachine(
            interceptorCount: pipeline.interceptors.count,
            skipping: Set(
                pipeline.interceptors.indices.filter {
                    policy?.skips(pipeline.interceptorComponents[$0], typeName: pipeline.interceptorTypeNames[$0]) == true
                }),
            reactors: pipeline.reactors.map {
                TaskStateMachine.ReactorTraits(
                    component: $0.component, maximumReactions: $0.configuration.maximumReactionsPerTask, delivers: !$0.configuration.requeue
                )
            },
            validation: policy?.responseValidation ?? pipeline.options.responseValidation
        )
    }

    // MARK: Events

    func start() {
        if case .stream(let stream) = lock.withLock({ body }), !pipeline.reactors.isEmpty {
            // A reactor may send the task again, and a stream can be read only once.
            switch ReplayableBody.prepare(stream, limit: pipeline.options.maximumReplayableBodySize) {
            case .success(let replayable):
                lock.withLock {
                    body = replayable
                    task.body = replayable
                }
            case .failure(let error): return failUnsent(error)
            }
        }
        perform(
            lock.withLock {
                waiting.begin()
                return machine.start()
            })
    }

    /// The caller cancelled (`stopLoading`, on the session's work queue). The transition is made
    /// at once, so nothing that happens next (a connection slot granted, a batch released) can
    /// still send the task; the action is performed elsewhere, because stopping an inner task
    /// syncs onto that very work queue.
    func cancel() {
        let action = lock.withLock { machine.cancel() }
        if case .none = action { return }
        DispatchQueue.global().async { self.perform(action) }
    }

    func batchReleased(index: Int) {
        observer?.released(by: pipeline.interceptorComponents[index])
        perform(
            lock.withLock {
                if hold?.index == index { hold = nil }  // no longer subject to maximumHoldTime
                return machine.released(index: index)
            })
    }

    /// A reactor whose gate held this task finished successfully: check the gates again.
    func gateOpened() {
        decideHeaders()
    }

    /// Ends the task with `error`, wherever it is, if `matches` says so of it as it stands
    /// (``URLTaskManager/failTasks(with:where:)``).
    func abort(with error: any Error, if matches: (URLTask) -> Bool) {
        let (action, heldIndex): (TaskStateMachine.Action, Int?) = lock.withLock {
            guard matches(task) else { return (.none, nil) }
            return (machine.abort(error), hold?.index)
        }
        if case .none = action { return }
        if let heldIndex { pipeline.batches[heldIndex].remove(self) }
        lock.withLock { running }?.cancel()
        // Off the caller's thread: stopping a transfer syncs onto URLSession's work queue.
        DispatchQueue.global().async { self.perform(action) }
    }

    /// Fails the task if it has not been sent yet (hold timeout, invalidation, a failed run, a
    /// slot wait longer than the request's timeout).
    func failUnsent(_ error: any Error) {
        let (action, heldIndex): (TaskStateMachine.Action, Int?) = lock.withLock {
            let held = hold?.index
            let action = machine.fail(error)
            return (action, held)
        }
        if case .fail = action, let heldIndex { pipeline.batches[heldIndex].remove(self) }
        perform(action)
    }

    /// What admission decided for this task, now or on another task's event (a slot handed
    /// over). `failure` is the error of a `.fail` decision.
    func admitted(_ decision: AdmissionStateMachine.SendAction, failure: (any Error)?) {
        switch decision {
        case .send:
            // Headers older than a covering reactor's own credential version (a token renewed
            // before it expired by another request): give the slot back, intercept again.
            if pipeline.admission.headersAreOutdated(self, task: lock.withLock({ task })) {
                pipeline.admission.transferEnded(self)
                return admitted(.reintercept, failure: nil)
            }
            let action = lock.withLock {
                let action = machine.connectionGranted()
                if case .send = action { waiting.end() }
                return action
            }
            // Not sendable any more (cancelled meanwhile): the slot goes to the next task.
            guard case .send = action else { return pipeline.admission.transferEnded(self) }
            perform(action)
        case .waitForSlot(let generation):
            if let observer { observer.waiting(for: .connectionSlot(host: Self.host(of: lock.withLock { task.request }))) }
            armSlotTimeout(generation: generation)
            waitBegins()
        case .waitAtGate(let reactor):
            observer?.waiting(for: .reactorGate(reactor: pipeline.reactors[reactor].name))
            waitBegins()
            perform(lock.withLock { machine.admissionGated(reactor: reactor) })
            // The run may have ended before the line above; its `gateOpened` then found the
            // task still awaiting admission and was ignored. Now that the task is gated, decide again.
            decideHeaders()
        case .reintercept:
            perform(
                lock.withLock {
                    task = task.startingOver(attempt: machine.attempt, request: base, body: body)
                    return machine.headersStale()
                })
        case .fail:
            failUnsent(failure ?? URLTaskError.managerInvalidated)
        }
    }

    func reactionFinished(reactor index: Int, outcome: ReactorStorage.Outcome) {
        let configuration = pipeline.reactors[index].configuration
        let result: TaskStateMachine.ReactionResult
        switch outcome {
        case .succeeded:
            result = configuration.requeue ? .requeue(reintercept: configuration.reintercept) : .deliver
        case .failed(let error):
            result = .fail(error)
        case .declined:
            result = .deliver
        }
        let (action, attempt) = lock.withLock { (machine.reactionFinished(reactor: index, result: result), machine.attempt) }
        if let observer {
            observer.reactionEnded()
            if case .checkGates = action { observer.requeued(attempt: attempt) }
            if case .acquireConnection = action { observer.requeued(attempt: attempt) }
        }
        perform(action)
    }

    func transportDidReceive(response: URLResponse) {
        // An interim head (100, 103) is not the answer: the caller, the redirect decision and
        // the reactors see only the final one.
        if TaskStateMachine.isInterim(response) { return }
        let http = response as? HTTPURLResponse
        let reactor = http.flatMap { chooseReactor(for: .response($0)) }
        let challenge = sink.answersChallenges && http.map(AuthenticationChallenge.isChallenge) == true
        observer?.responseHead(response)
        perform(lock.withLock { machine.transportReceived(response: response, reactor: reactor, challenge: challenge) })
    }

    /// The transfer met a redirect; the inner session waits for `decide`, which is always told
    /// not to follow: the pipeline follows a redirect itself, through the interceptors.
    func transportWillRedirect(_ response: HTTPURLResponse, to newRequest: URLRequest, decide: @escaping @Sendable (URLRequest?) -> Void) {
        let (action, current) = lock.withLock {
            (machine.redirectReceived(tooMany: URLError.tooManyRedirects(url: task.request.url)), base)
        }
        guard case .consultRedirect = action else { return decide(nil) }
        let proposed = Redirect.request(following: response, to: newRequest, from: current)
        sink.redirect(response, to: proposed) { [self] answer in
            // Asked first, as a plain session asks it; a request that leaves HTTP then fails.
            let refused = answer.flatMap { Redirect.refusal(of: $0.url, redirectedFrom: response) }
            if let answer, refused == nil { observer?.redirected(response, to: answer.url) }
            perform(lock.withLock { machine.redirectAnswered(answer, refused: refused) })
            decide(nil)
        }
    }

    func transportDidReceive(data: Data) {
        observer?.received(data.count)
        perform(lock.withLock { machine.transportReceived(data: data) })
    }

    func transportDidSendBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        sink.sentBody(totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend)
    }

    func transportDidComplete(error: (any Error)?) {
        let awaitingHead = lock.withLock { machine.isAwaitingResponseHead }
        let reactor = awaitingHead ? error.flatMap { chooseReactor(for: .failure($0)) } : nil
        let action = lock.withLock {
            innerTask = nil
            return machine.transportCompleted(error: error, reactor: reactor)
        }
        observer?.transferEnded()
        guard case .react(let index, let outcome, let body) = action else {
            // Free the slot before the caller hears of the end, so it never sees it taken.
            pipeline.admission.transferEnded(self)
            return perform(action)
        }
        react(index, outcome: outcome, body: body)
    }

    // MARK: Actions

    private func perform(_ action: TaskStateMachine.Action) {
        switch action {
        case .none:
            return
        case .checkGates:
            lock.withLock {
                if task.attempt != machine.attempt {
                    // A requeue starts the interceptors again from the caller's request.
                    task = task.startingOver(attempt: machine.attempt, request: base, body: body)
                }
            }
            decideHeaders()
        case .runInterceptor(let index):
            runInterceptor(index)
        case .hold(let index, let maximumWait):
            let (generation, flushes) = lock.withLock {
                holdGeneration += 1
                hold = (index, holdGeneration)
                return (holdGeneration, decidedUnderFlushes)
            }
            observer?.held(by: pipeline.interceptorComponents[index])
            waitBegins()
            pipeline.batches[index].hold(self, maximumWait: maximumWait, flushesSeen: flushes)
            // A cancel that raced with the hold found nothing to leave.
            if lock.withLock({ machine.isCompleted }) { pipeline.batches[index].remove(self) }
            armHoldTimeout(index: index, generation: generation)
        case .releaseBatch(let index):
            lock.withLock {
                holdGeneration += 1
                hold = (index, holdGeneration)
            }
            pipeline.batches[index].release(with: self)
        case .acquireConnection:
            let (request, restamp) = lock.withLock { (task.request, machine.needsRestamp) }
            // The slot key matters only where slots are kept.
            let host = pipeline.admission.slotsPerHost == nil ? "" : Self.host(of: request)
            let (decision, failure) = pipeline.admission.wantsToSend(self, host: host, restamp: restamp)
            admitted(decision, failure: failure)
        case .send(let attempt):
            send(attempt: attempt)
        case .forwardResponse(let response):
            sink.receive(response: response)
        case .forwardData(let data):
            sink.receive(data: data)
        case .finish:
            observer?.completed()
            sink.finish()
            pipeline.taskEnded(self)
        case .respond(let response, let data):
            observer?.completed(response: response)
            sink.receive(response: response)
            if !data.isEmpty { sink.receive(data: data) }
            sink.finish()
            pipeline.taskEnded(self)
        case .fail(let failure):
            // The manager's own errors name the request they happened to.
            let error = lock.withLock { (failure as? URLTaskError)?.about(task.request, attempt: task.attempt) } ?? failure
            observer?.completed(error: error)
            sink.fail(error)
            pipeline.taskEnded(self)
        case .react:
            preconditionFailure("a reaction begins only when the transport completes")
        case .cancelTransport:
            observer?.completed(error: URLError(.cancelled))
            // A caller's own cancel stops the transfer; the session's invalidation abandons it
            // (see `Pipeline.abandonsTransfers`).
            if let inner = lock.withLock({ innerTask }), !pipeline.abandonsTransfers { pipeline.transport.cancel(inner) }
            pipeline.taskEnded(self)
        case .leaveConnectionQueue:
            observer?.completed(error: URLError(.cancelled))
            pipeline.taskEnded(self)
        case .leaveBatch(let index):
            observer?.completed(error: URLError(.cancelled))
            pipeline.batches[index].remove(self)
            pipeline.taskEnded(self)
        case .leaveReactor:
            observer?.completed(error: URLError(.cancelled))
            // Admission takes it off the reactor's gate or run (in `taskEnded`).
            lock.withLock { running }?.cancel()
            pipeline.taskEnded(self)
        case .abandon:
            observer?.completed(error: URLError(.cancelled))
            lock.withLock { running }?.cancel()
            pipeline.taskEnded(self)
        case .abortTransfer(let error):
            observer?.completed(error: error)
            if let inner = lock.withLock({ innerTask }) { pipeline.transport.cancel(inner) }
            sink.fail(error)
            pipeline.taskEnded(self)
        case .consultRedirect:
            preconditionFailure("a redirect is consulted where it is met")
        case .consultChallenge(let response):
            consultChallenge(response)
        case .restart(let request):
            lock.withLock {
                // A body on the request replaces the one held; a request with the same method
                // (a 307, a challenge answered) sends the held body again; a new method, none.
                let carried = URLTaskBody(request: request)
                if !carried.isNone {
                    body = carried
                    bodyUsed = false
                } else if request.httpMethod != base.httpMethod {
                    body = .none
                    bodyUsed = false
                }
                base = request
                base.httpBody = nil
                base.httpBodyStream = nil
                waiting.begin()
                task = task.startingOver(attempt: machine.attempt, request: base, body: body)
            }
            decideHeaders()
        }
    }

    /// Asks the caller's side about the challenge of `response` (a 401): a credential sends the
    /// request again through the pipeline; anything else gives the caller the 401 (without its
    /// challenge header, which would make the caller's session answer it again) or cancels.
    private func consultChallenge(_ response: HTTPURLResponse) {
        let (failures, current) = lock.withLock { (challengeFailures, base) }
        let storage = pipeline.transport.session.configuration.urlCredentialStorage
        let challenge = AuthenticationChallenge.make(for: response, previousFailureCount: failures, storage: storage)
        sink.challenge(challenge) { [self] disposition, credential in
            let answer = AuthenticationChallenge.answer(
                disposition, credential: credential, to: challenge, response: response, request: current)
            perform(
                lock.withLock {
                    if case .resend = answer { challengeFailures += 1 }
                    return machine.challengeAnswered(answer)
                })
        }
    }

    /// Waits at a running reactor's gate, or records the credential stamps and goes on to the
    /// interceptors. Stamped before the interceptors run, not at send: an interceptor (or a
    /// batch hold) may apply a token, then a run may start and end before the task is sent.
    private func decideHeaders() {
        switch pipeline.admission.headersWillBeDecided(self) {
        case .waitAtGate(let reactor):
            observer?.waiting(for: .reactorGate(reactor: pipeline.reactors[reactor].name))
            waitBegins()
            perform(lock.withLock { machine.waitingAtGate(reactor: reactor) })
        case .proceed:
            perform(lock.withLock { machine.gateOpened() })
        }
    }

    private func runInterceptor(_ index: Int) {
        lock.withLock { hold = nil }
        let interceptor = pipeline.interceptors[index]
        let serialGate = pipeline.serialGates[index]
        var snapshot = lock.withLock { task }
        // An interceptor that decides without suspending runs right here: no Swift task, no hop.
        if serialGate == nil, let synchronous = interceptor as? any SynchronousInterception {
            let (count, flushes) = pipeline.batches[index].snapshot
            let context = InterceptContext(currentBatchCount: count)
            do {
                if let command = try synchronous.interceptWithoutSuspending(&snapshot, context: context) {
                    return interceptorDecided(index, .success(command), snapshot: snapshot, flushes: flushes)
                }
            } catch {
                return interceptorDecided(index, .failure(error), snapshot: snapshot, flushes: flushes)
            }
        }
        // It may wait (for a credential, a lock, another service): that counts toward the timeout.
        waitBegins()
        let work = Task {
            await serialGate?.acquire()
            // Released only after the command took effect (a hold is in the batch), so the
            // next call's count includes it.
            defer { serialGate?.release() }
            let (count, flushes) = pipeline.batches[index].snapshot
            let context = InterceptContext(currentBatchCount: count)
            do {
                let command = try await interceptor.intercept(&snapshot, context: context)
                interceptorDecided(index, .success(command), snapshot: snapshot, flushes: flushes)
            } catch {
                interceptorDecided(index, .failure(error), snapshot: snapshot, flushes: flushes)
            }
        }
        lock.withLock { running = work }
    }

    /// Interceptor `index` returned `outcome` for `snapshot`, deciding under `flushes` of its batch.
    private func interceptorDecided(_ index: Int, _ outcome: Result<InterceptCommand, any Error>, snapshot: URLTask, flushes: Int) {
        observer?.intercepted(pipeline.interceptorComponents[index], outcome)
        let interceptor = pipeline.interceptorComponents[index]
        perform(
            lock.withLock {
                switch outcome {
                case .success(let command):
                    task = snapshot
                    decidedUnderFlushes = flushes
                    return machine.interceptorReturned(index: index, command: command, interceptor: interceptor)
                case .failure(let error):
                    return machine.interceptorThrew(index: index, error: error, interceptor: interceptor)
                }
            })
    }

    private func armHoldTimeout(index: Int, generation: Int) {
        let limit = policy?.maximumHoldSeconds.map { Duration.milliseconds(Int64($0 * 1_000)) } ?? pipeline.options.maximumHoldTime
        let interceptor = pipeline.interceptorComponents[index]
        DispatchQueue.global().asyncAfter(deadline: .now() + limit.dispatchInterval) { [weak self] in
            guard let self else { return }
            let stillHeld = self.lock.withLock { self.hold.map { $0 == (index, generation) } ?? false }
            guard stillHeld else { return }
            self.failUnsent(URLTaskError.holdTimedOut(interceptor, after: limit))
        }
    }

    private func chooseReactor(for outcome: URLTaskOutcome) -> Int? {
        guard !pipeline.reactors.isEmpty else { return nil }
        let snapshot = lock.withLock { task }
        for reactor in pipeline.reactors where !reactor.configuration.exempts(snapshot.originalRequest) {
            if let policy, policy.skips(reactor.component, typeName: reactor.typeName) { continue }
            if reactor.reactor.shouldReact(to: outcome, of: snapshot) { return reactor.index }
        }
        return nil
    }

    /// Hands the task's outcome to reactor `index`, and gives its connection slot back.
    private func react(_ index: Int, outcome: URLTaskOutcome, body: Data) {
        // The transfer has ended: waiting for the reaction starts a new stretch without progress.
        lock.withLock { waiting.begin() }
        waitBegins()
        let reactor = pipeline.reactors[index]
        let (snapshot, requeued) = lock.withLock { (task, machine.wasRequeued(by: index)) }
        switch reactor.configuration.sharing {
        case .singleFlight:
            // The run starts (or is joined) and the slot is handed over in one transition.
            observer?.reactionStarting()
            let (immediate, run) = pipeline.admission.transferEnded(
                self, needing: index, alreadyRequeued: requeued, outcome: outcome, body: body, task: snapshot)
            observer?.reacted(by: reactor.name, run: run)
            if let immediate { reactionFinished(reactor: index, outcome: immediate) }
        case .perTask:
            observer?.reactionStarting()
            observer?.reacted(by: reactor.name, run: nil)
            pipeline.admission.transferEnded(self)
            let work = Task {
                let result = await reactor.runWork(outcome: outcome, body: body, task: snapshot)
                reactionFinished(reactor: index, outcome: result)
            }
            lock.withLock { running = work }
        }
    }

    /// The key requests share slots under: scheme, host and port, as URLSession pools connections.
    static func host(of request: URLRequest) -> String {
        OAuth2Origin.poolKey(of: request.url)
    }

    /// Bounds a wait for a connection slot by the request's timeout, as URLSession's own queue
    /// does: the task then fails with `URLError.timedOut`.
    private func armSlotTimeout(generation: Int) {
        let (interval, url) = lock.withLock { (task.request.timeoutInterval, task.request.url) }
        guard interval > 0, interval.isFinite else { return }
        DispatchQueue.global().asyncAfter(deadline: .now() + interval) { [weak self] in
            guard let self, self.pipeline.admission.slotWaitExpired(self, generation: generation) else { return }
            self.failUnsent(URLError.timedOut(url: url))
        }
    }

    /// The task starts to wait inside the pipeline (a gate, an interceptor that suspends, a
    /// batch, the slot queue, a reaction). The first wait of a stretch sets one timer for the
    /// request's `timeoutInterval` from the stretch's start: every wait of the stretch counts,
    /// as a plain session counts every second without progress. A task sent meanwhile, or one
    /// that started another stretch, is left alone when it fires.
    private func waitBegins() {
        let timer: (generation: Int, started: DispatchTime, interval: TimeInterval)? = lock.withLock {
            guard !waiting.armed else { return nil }
            waiting.armed = true
            return (waiting.generation, waiting.started, task.request.timeoutInterval)
        }
        guard let timer, timer.interval > 0, timer.interval.isFinite else { return }
        DispatchQueue.global().asyncAfter(deadline: timer.started + timer.interval) { [weak self] in
            self?.waitExpired(generation: timer.generation)
        }
    }

    /// The request's timeout passed while the task still waited in stretch `generation`: it
    /// fails with `URLError.timedOut`, leaves what it waited in (admission takes it off a gate,
    /// a run or the slot queue when it ends), and the interceptor or reaction work it waited
    /// for is cancelled.
    private func waitExpired(generation: Int) {
        let (action, held, work): (TaskStateMachine.Action, Int?, Task<Void, Never>?) = lock.withLock {
            guard waiting.generation == generation else { return (.none, nil, nil) }
            return (machine.waitTimedOut(URLError.timedOut(url: task.request.url)), hold?.index, running)
        }
        guard case .fail = action else { return }
        if let held { pipeline.batches[held].remove(self) }
        work?.cancel()
        perform(action)
    }

    private func send(attempt: Int) {
        if Platform.isOnSessionWorkQueue {
            // Reached from a transport callback (a slot handed over, a requeue): creating the
            // inner task `sync`s onto the queue this runs on.
            DispatchQueue.global().async { self.send(attempt: attempt) }
            return
        }
        let (request, body, replay): (URLRequest, URLTaskBody, Bool) = lock.withLock {
            task.attempt = attempt
            defer { bodyUsed = true }
            // The bytes sent decide the framing, never a header that disagrees with them.
            return (BodyFraming.framed(task.request, body: task.body), task.body, bodyUsed)
        }
        if let problem = HeaderValidation.firstProblem(in: request) {
            pipeline.admission.transferEnded(self)
            perform(lock.withLock { machine.failSending(problem) })
            return
        }
        if replay, case .stream = body {
            let error = URLTaskError.bodyNotReplayable(reason: "a stream body larger than maximumReplayableBodySize was already sent once")
            pipeline.admission.transferEnded(self)
            perform(lock.withLock { machine.failSending(error) })
            return
        }
        if let observer {
            // Before the transfer starts: its response may arrive before the next line runs.
            let snapshot = lock.withLock { task }
            observer.sent(attempt: attempt, credentialVersions: pipeline.admission.credentialVersions(of: self, task: snapshot), body: body)
        }
        let inner: URLSessionTask
        switch pipeline.startTransfer(request, body: body, callerURL: callerURL, events: self) {
        case .success(let task):
            inner = task
        case .failure(let error):
            // The session was invalidated meanwhile.
            pipeline.admission.transferEnded(self)
            perform(lock.withLock { machine.failSending(error) })
            return
        }
        let cancelled = lock.withLock {
            innerTask = inner
            return machine.isCompleted
        }
        // A cancel that raced with the send found no inner task to stop.
        if cancelled { pipeline.transport.cancel(inner) }
    }
}
