/// Runs one task: its ``TaskStateMachine`` under a lock, and the actions it returns.
///
/// Every event takes the lock only for the transition; the returned action is performed with
/// the lock released, so no interceptor, reactor, transport call or client callback ever runs
/// under it.
final class TaskRun: TransportEvents, PipelineTaskHandle, @unchecked Sendable {  // mutable state is guarded by `lock`.
    let id: URLTask.ID
    private let lock = NSLock()
    private var machine: TaskStateMachine
    private var task: URLTask
    private var innerTask: URLSessionTask?
    private var running: Task<Void, Never>?
    private var hold: (index: Int, generation: Int)?
    private var holdGeneration = 0
    /// The batch's flush count when the interceptor that returned last began deciding.
    private var decidedUnderFlushes = 0
    /// What each reactor had done when the current attempt's headers were decided: when its
    /// interceptors began (or, for a resend without them, when it was sent). A run that ended
    /// after that point is one this attempt's response may be late for.
    private var sentUnder: [ReactorStateMachine.Stamp]
    /// The attempt `sentUnder` belongs to.
    private var stampedAttempt = 0
    /// This task's place in ``Pipeline/connectionSlots``: waiting for a slot of a host, or holding one.
    private var slot = Slot.none
    private var bodyUsed = false
    /// Replaced once, in ``start()``, by a replayable copy when it is a stream.
    private var body: RequestBodySource
    private let sink: any TaskSink
    private let pipeline: Pipeline

    private enum Slot {
        case none
        case waiting(host: String)
        case holding(host: String)
    }

    init(id: URLTask.ID, request: URLRequest, body: RequestBodySource, sink: any TaskSink, pipeline: Pipeline) {
        self.id = id
        self.task = URLTask(id: id, originalRequest: request, attempt: 1)
        self.body = body
        self.sink = sink
        self.pipeline = pipeline
        self.sentUnder = Array(repeating: ReactorStateMachine.Stamp(), count: pipeline.reactors.count)
        self.machine = TaskStateMachine(
            interceptorCount: pipeline.interceptors.count,
            reactors: pipeline.reactors.map {
                TaskStateMachine.ReactorTraits(name: $0.name, maximumReactions: $0.configuration.maximumReactionsPerTask, delivers: !$0.configuration.requeue)
            }
        )
    }

    // MARK: Events

    func start() {
        if case .stream(let stream) = lock.withLock({ body }), !pipeline.reactors.isEmpty {
            // A reactor may send the task again, and a stream can be read only once.
            switch ReplayableBody.prepare(stream, limit: pipeline.options.maximumReplayableBodySize) {
            case .success(let replayable): lock.withLock { body = replayable }
            case .failure(let error): return failUnsent(error)
            }
        }
        perform(lock.withLock { machine.start() })
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
        perform(lock.withLock {
            if hold?.index == index { hold = nil }  // no longer subject to maximumHoldTime
            return machine.released(index: index)
        })
    }

    /// A reactor whose gate held this task finished successfully: check the gates again.
    func gateOpened() {
        checkGates()
    }

    /// Fails the task if it has not been sent yet (hold timeout, invalidation, a failed run).
    func failUnsent(_ error: any Error) {
        let (action, heldIndex): (TaskStateMachine.Action, Int?) = lock.withLock {
            let held = hold?.index
            let action = machine.fail(error)
            return (action, held)
        }
        if case .fail = action {
            if let heldIndex { pipeline.batches[heldIndex].remove(self) }
            leaveConnectionQueue()
        }
        perform(action)
    }

    /// A connection slot for the task's host is free: send, or give the slot back if the
    /// task was cancelled while it waited.
    /// - Parameter host: The host whose slot the task now holds; `nil` when requests are not limited.
    func connectionGranted(host: String?) {
        let action: TaskStateMachine.Action = lock.withLock {
            if let host { slot = .holding(host: host) }
            return machine.connectionGranted()
        }
        guard case .send = action else { return releaseConnection() }
        perform(action)
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
        perform(lock.withLock { machine.reactionFinished(reactor: index, result: result) })
    }

    func transportDidReceive(response: URLResponse) {
        let reactor = (response as? HTTPURLResponse).flatMap { chooseReactor(for: .response($0)) }
        perform(lock.withLock { machine.transportReceived(response: response, reactor: reactor) })
    }

    func transportDidReceive(data: Data) {
        perform(lock.withLock { machine.transportReceived(data: data) })
    }

    func transportDidComplete(error: (any Error)?) {
        let awaitingHead = lock.withLock { machine.isAwaitingResponseHead }
        let reactor = awaitingHead ? error.flatMap { chooseReactor(for: .failure($0)) } : nil
        let action = lock.withLock {
            innerTask = nil
            return machine.transportCompleted(error: error, reactor: reactor)
        }
        if case .react = action {
            // Start (or join) the refresh first: the task that gets this slot next then
            // finds the reactor running and waits instead of going out with a stale token.
            perform(action)
            releaseConnection()
        } else {
            // Free the slot before the caller hears of the end, so it never sees it taken.
            releaseConnection()
            perform(action)
        }
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
                    task = URLTask(id: id, originalRequest: task.originalRequest, attempt: machine.attempt)
                }
            }
            checkGates()
        case .runInterceptor(let index):
            runInterceptor(index)
        case .hold(let index, let maximumWait):
            let (generation, flushes) = lock.withLock {
                holdGeneration += 1
                hold = (index, holdGeneration)
                return (holdGeneration, decidedUnderFlushes)
            }
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
            acquireConnection()
        case .send(let attempt):
            send(attempt: attempt)
        case .forwardResponse(let response):
            sink.receive(response: response)
        case .forwardData(let data):
            sink.receive(data: data)
        case .finish:
            sink.finish()
            pipeline.taskEnded()
        case .respond(let response, let data):
            sink.receive(response: response)
            if !data.isEmpty { sink.receive(data: data) }
            sink.finish()
            pipeline.taskEnded()
        case .fail(let error):
            sink.fail(error)
            pipeline.taskEnded()
        case .react(let index, let outcome, let body):
            react(index, outcome: outcome, body: body)
        case .cancelTransport:
            if let inner = lock.withLock({ innerTask }) { pipeline.transport.cancel(inner) }
            pipeline.taskEnded()
        case .leaveConnectionQueue:
            leaveConnectionQueue()
            pipeline.taskEnded()
        case .leaveBatch(let index):
            pipeline.batches[index].remove(self)
            pipeline.taskEnded()
        case .leaveReactor(let index):
            lock.withLock { running }?.cancel()
            pipeline.reactors[index].remove(self)
            pipeline.taskEnded()
        case .abandon:
            lock.withLock { running }?.cancel()
            pipeline.taskEnded()
        }
    }

    private func checkGates() {
        let request = lock.withLock { task.originalRequest }
        for reactor in pipeline.reactors where reactor.gate(self, request: request) {
            perform(lock.withLock { machine.waitingAtGate(reactor: reactor.index) })
            return
        }
        // Stamped before the interceptors run, not at send: an interceptor (or a batch hold)
        // may apply a token, then a run may start and end before the task is sent.
        let stamps = pipeline.reactors.map(\.stamp)
        perform(lock.withLock {
            sentUnder = stamps
            stampedAttempt = machine.attempt
            return machine.gateOpened()
        })
    }

    private func runInterceptor(_ index: Int) {
        lock.withLock { hold = nil }
        let interceptor = pipeline.interceptors[index]
        let name = String(describing: type(of: interceptor))
        let serialGate = pipeline.serialGates[index]
        var snapshot = lock.withLock { task }
        let work = Task {
            await serialGate?.acquire()
            // Released only after the command took effect (a hold is in the batch), so the
            // next call's count includes it.
            defer { serialGate?.release() }
            let (count, flushes) = pipeline.batches[index].snapshot
            let context = InterceptContext(currentBatchCount: count)
            let action: TaskStateMachine.Action
            do {
                let command = try await interceptor.intercept(&snapshot, context: context)
                action = lock.withLock {
                    task = snapshot
                    decidedUnderFlushes = flushes
                    return machine.interceptorReturned(index: index, command: command, interceptorName: name)
                }
            } catch {
                action = lock.withLock { machine.interceptorThrew(index: index, error: error, interceptorName: name) }
            }
            perform(action)
        }
        lock.withLock { running = work }
    }

    private func armHoldTimeout(index: Int, generation: Int) {
        let limit = pipeline.options.maximumHoldTime
        let interceptor = String(describing: type(of: pipeline.interceptors[index]))
        DispatchQueue.global().asyncAfter(deadline: .now() + limit.dispatchInterval) { [weak self] in
            guard let self else { return }
            let stillHeld = self.lock.withLock { self.hold.map { $0 == (index, generation) } ?? false }
            guard stillHeld else { return }
            self.failUnsent(URLTaskError.holdTimedOut(interceptor: interceptor, after: limit))
        }
    }

    private func chooseReactor(for outcome: URLTaskOutcome) -> Int? {
        guard !pipeline.reactors.isEmpty else { return nil }
        let snapshot = lock.withLock { task }
        for reactor in pipeline.reactors where !reactor.configuration.exempts(snapshot.originalRequest) {
            if reactor.reactor.shouldReact(to: outcome, of: snapshot) { return reactor.index }
        }
        return nil
    }

    private func react(_ index: Int, outcome: URLTaskOutcome, body: Data) {
        let reactor = pipeline.reactors[index]
        let (snapshot, stamp, requeued) = lock.withLock { (task, sentUnder[index], machine.wasRequeued(by: index)) }
        switch reactor.configuration.sharing {
        case .singleFlight:
            reactor.need(self, sentUnder: stamp, alreadyRequeued: requeued, outcome: outcome, body: body, task: snapshot)
        case .perTask:
            let work = Task {
                let result = await reactor.runWork(outcome: outcome, body: body, task: snapshot)
                reactionFinished(reactor: index, outcome: result)
            }
            lock.withLock { running = work }
        }
    }

    /// Waits for a slot of the request's host when the manager limits requests per host
    /// (see ``URLTaskManager/Options/maximumRequestsInFlightPerHost``), so that URLSession
    /// never queues a request whose headers a refresh could make stale.
    private func acquireConnection() {
        let (request, original) = lock.withLock { (task.request, task.originalRequest) }
        guard let slots = pipeline.connectionSlots, !pipeline.isReactorTraffic(original) else {
            return connectionGranted(host: nil)
        }
        let host = ConnectionSlots.host(of: request)
        lock.withLock { slot = .waiting(host: host) }
        if slots.acquire(self, host: host) { connectionGranted(host: host) }
    }

    /// Takes the task out of its host's queue, if it waits there. A slot granted meanwhile
    /// is given back by ``connectionGranted(host:)``, which finds the task completed.
    private func leaveConnectionQueue() {
        let host: String? = lock.withLock {
            guard case .waiting(let host) = slot else { return nil }
            slot = .none
            return host
        }
        if let host { pipeline.connectionSlots?.remove(self, host: host) }
    }

    /// Gives the task's connection slot back, if it holds one. Safe to call more than once.
    private func releaseConnection() {
        let host: String? = lock.withLock {
            guard case .holding(let host) = slot else { return nil }
            slot = .none
            return host
        }
        if let host { pipeline.connectionSlots?.release(host: host) }
    }

    private func send(attempt: Int) {
        let original = lock.withLock { task.originalRequest }
        // A holding reactor that started while this task was being intercepted: its headers
        // may be stale. Wait, then intercept again.
        for reactor in pipeline.reactors where reactor.gate(self, request: original) {
            releaseConnection()
            perform(lock.withLock { machine.sendGated(reactor: reactor.index) })
            // The run may have ended before the line above; its `gateOpened` then found the
            // task still sending and was ignored. Now that the task is gated, check again.
            checkGates()
            return
        }
        // A holding reactor's run ended while this task waited (in a batch, for a slot) after
        // its headers were decided: they are stale. Intercept again, or share the failure.
        if let outdated = outdatedHeaders(attempt: attempt) {
            releaseConnection()
            switch outdated {
            case .refreshed:
                perform(lock.withLock {
                    task = URLTask(id: id, originalRequest: task.originalRequest, attempt: machine.attempt)
                    return machine.sendStale()
                })
            case .failed(let error):
                perform(lock.withLock { machine.failSending(error) })
            }
            return
        }
        let (request, body, replay): (URLRequest, RequestBodySource, Bool) = lock.withLock {
            task.attempt = attempt
            defer { bodyUsed = true }
            return (task.request, self.body, bodyUsed)
        }
        if let problem = HeaderValidation.firstProblem(in: request) {
            releaseConnection()
            perform(lock.withLock { machine.failSending(problem) })
            return
        }
        if replay, case .stream = body {
            let error = URLTaskError.bodyNotReplayable(reason: "a stream body larger than maximumReplayableBodySize was already sent once")
            releaseConnection()
            perform(lock.withLock { machine.failSending(error) })
            return
        }
        let stamps = pipeline.reactors.map(\.stamp)
        lock.withLock {
            // A requeue without the interceptors resends the same headers: stamp it now.
            if stampedAttempt != attempt {
                sentUnder = stamps
                stampedAttempt = attempt
            }
        }
        let inner: URLSessionTask
        switch pipeline.startTransfer(request, body: body, events: self) {
        case .success(let task):
            inner = task
        case .failure(let error):
            // The session was invalidated meanwhile.
            releaseConnection()
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

    private enum OutdatedHeaders {
        /// A run succeeded since: intercept again.
        case refreshed
        /// Only failed runs ended since: the task would meet the same failure.
        case failed(any Error)
    }

    /// Whether this attempt's headers, decided by its interceptors, predate a run of a
    /// reactor that holds new tasks and has ended since.
    private func outdatedHeaders(attempt: Int) -> OutdatedHeaders? {
        let (stamps, stampedNow): ([ReactorStateMachine.Stamp], Bool) = lock.withLock { (sentUnder, stampedAttempt == attempt) }
        // A resend without the interceptors keeps its headers on purpose; it is stamped below.
        guard stampedNow else { return nil }
        for reactor in pipeline.reactors where reactor.configuration.holdsNewTasks {
            let stamp = stamps[reactor.index]
            if reactor.stamp.version > stamp.version { return .refreshed }
        }
        for reactor in pipeline.reactors where reactor.configuration.holdsNewTasks {
            if let error = reactor.failure(since: stamps[reactor.index]) { return .failed(error) }
        }
        return nil
    }
}
