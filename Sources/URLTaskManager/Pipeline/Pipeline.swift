import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Everything one manager runs: its interceptors, their batches, the reactors and the transport.
///
/// The session the manager hands out owns it (see ``Platform/makeSession(configuration:delegate:delegateQueue:pipeline:)``):
/// the bridge calls ``start(request:body:sink:)`` for each outer task, and the session's
/// invalidation or release ends it. Its life (which tasks are accepted, when the inner session
/// may be released) is a ``PipelineLifecycleStateMachine``.
final class Pipeline: TaskEnvironment, SharedTransferStarter, Sendable {
    let interceptors: [any URLTaskInterceptor]
    /// Who each interceptor is in errors and events: its index, and its type's name.
    let interceptorComponents: [URLTaskError.Component]
    /// Each interceptor's type, as a ``URLTaskPolicy`` names the ones a request skips.
    let interceptorTypes: [URLTaskPolicy.ComponentType]
    let batches: [BatchStorage]
    /// One per interceptor that intercepts one task at a time, `nil` for the others.
    let serialGates: [SerialGate?]
    /// Each interceptor as a ``SynchronousInterceptor`` when it is one and has no serial gate:
    /// cast once here, because the cast is a protocol conformance lookup, which the runtime would
    /// otherwise make again on every send, for every interceptor (its cost on Linux: the
    /// Performance article, "Single operations on Linux").
    private let synchronousInterceptors: [(any SynchronousInterceptor)?]
    let reactors: [ReactorRunner]
    let options: URLTaskManager.Options
    /// Reactor runs and gates, credential stamps, and the per-host connection slots.
    let engine: EngineStorage
    let transport: Transport
    /// The inner session of ``URLTaskManager/bytes(for:)``, made on first use where
    /// ``transport`` runs its callbacks on the session's work queue (corelibs): a body streamed
    /// through callbacks there costs memory that grows with it, given back only at its end (see
    /// the Performance article, "Streaming memory through the session"), which a session whose
    /// callbacks run on a thread of their own does not. Elsewhere it is ``transport``.
    private let streaming: LockedState<Transport?>
    private let transportConfiguration: URLSessionConfiguration
    /// Who listens to the tasks' events (``URLTaskManager/events(bufferingNewest:)``).
    let events: EventHub<URLTaskEvent>
    /// The configuration's `httpAdditionalHeaders`: put on each caller's request by the
    /// pipeline, never merged by the inner session (which would add them to every redirect).
    let additionalHeaders: AdditionalHeaders?
    /// Dispatch and Swift tasks: the pipeline's threads and timers.
    let runtime: any PipelineRuntime = LiveRuntime()
    /// The transfers identical requests share, with the manager's `CoalescingInterceptor`;
    /// `nil` without one.
    let sharing: SharedTransfers?
    /// The outcome observers among the parts and beside them; `nil` without any.
    let outcomeObservers: OutcomeObservers?

    private let lifecycle = LockedState(PipelineLifecycleStateMachine())

    init(
        interceptors: [any URLTaskInterceptor], reactors: [any URLTaskReactor], observers: [any URLTaskOutcomeObserver] = [],
        configuration: URLSessionConfiguration, options: URLTaskManager.Options
    ) {
        self.interceptors = interceptors
        self.outcomeObservers = OutcomeObservers(parts: interceptors + reactors + observers)
        let reactors = zip(reactors, URLTaskError.Component.chain(reactors, kind: .reactor)).map {
            ReactorRunner(reactor: $0, component: $1)
        }
        self.interceptorComponents = URLTaskError.Component.chain(interceptors, kind: .interceptor)
        self.interceptorTypes = interceptors.map { URLTaskPolicy.ComponentType(type(of: $0)) }
        self.reactors = reactors
        self.batches = interceptors.indices.map { [runtime] in BatchStorage(interceptorIndex: $0, runtime: runtime) }
        self.serialGates = interceptors.map { $0.interceptsOneAtATime ? SerialGate() : nil }
        self.synchronousInterceptors = interceptors.map { $0.interceptsOneAtATime ? nil : $0 as? any SynchronousInterceptor }
        self.options = options
        self.events = EventHub(batchWindow: options.eventBatchWindow)
        // Slots only matter while a reactor may hold new tasks: otherwise nothing can make a
        // queued request's headers stale, and URLSession queues them itself.
        let holding = reactors.contains { $0.configuration.mode.holdsNewTasks }
        let limit = options.maximumRequestsInFlightPerHost ?? configuration.httpMaximumConnectionsPerHost
        self.engine = EngineStorage(reactors: reactors, slotsPerHost: holding && limit > 0 ? limit : nil, runtime: runtime)
        let (additionalHeaders, transportConfiguration) = AdditionalHeaders.split(configuration)
        self.additionalHeaders = additionalHeaders
        self.transport = Transport(configuration: transportConfiguration)
        self.transportConfiguration = transportConfiguration
        self.streaming = LockedState(transport.callbacksOnWorkQueue ? nil : transport)
        self.sharing = interceptors.lazy.compactMap { ($0 as? any TransferSharingInterceptor)?.transferSharing }.first?
            .makeSharedTransfers(
                cookies: CookieJar(transportConfiguration), sessionTimeout: transportConfiguration.timeoutIntervalForRequest,
                runtime: runtime)
    }

    deinit {
        // The session and every task are gone: end the subscribers' streams.
        events.finish()
    }

    /// Starts a task. The bridge calls it on the outer session's work queue, which must not
    /// block: the task then starts on another thread. The manager's own methods call it from
    /// the calling task with `now`: the task starts right here, as a plain session's task is
    /// created and resumed on its caller's thread.
    func start(request: URLRequest, body: URLTaskBody, sink: any TaskSink, now: Bool = false) -> any PipelineTaskHandle {
        let decision = lifecycle.withLock { $0.taskStarted() }
        switch decision {
        case .run:
            break
        case .refuseCancelled:
            // The session is being cancelled: the error corelibs would give the task, whichever
            // of the two reaches the caller.
            sink.fail(URLError.cancelled(url: request.url))
            return RefusedTask()
        case .refuseInvalidated:
            sink.fail(URLTaskError.managerInvalidated)
            return RefusedTask()
        }
        // Registered with the engine as it is made: the end of a task is always one it knows.
        let run = TaskRun(id: .next(), request: request, body: body, sink: sink, environment: self)
        if now {
            run.start()
        } else {
            // The work queue must not block, and creating the inner task syncs onto it.
            DispatchQueue.global().async { run.start() }
        }
        return run
    }

    /// A task accepted by ``start(request:body:sink:)`` has completed: it leaves admission (its
    /// slot, if any, goes to the next task) and the lifecycle counts it out.
    func taskEnded(_ run: TaskRun) {
        engine.finished(run)
        perform(lifecycle.withLock { $0.taskEnded() })
    }

    /// Creates and resumes the inner task for `request`, unless the session was invalidated
    /// meanwhile: then `started` gets the error to fail the task with. The inner session is never
    /// invalidated while this runs (corelibs crashes when a task is created on an invalidated
    /// session).
    /// - Parameter callerURL: The URL the caller asked for, which a cancellation error names.
    /// - Parameter delivery: How the caller takes the answer (``TransferDelivery``).
    func startTransfer(
        _ request: URLRequest, body: URLTaskBody, callerURL: URL?, events: any TransportEvents, share: TransferShare?,
        delivery: TransferDelivery,
        started: @escaping @Sendable (Result<any TransferHandle, any Error>) -> Void
    ) {
        if Platform.isOnSessionWorkQueue {
            // Reached from a transport callback (a slot handed over, a requeue): creating the
            // inner task `sync`s onto the queue this runs on.
            return runtime.async {
                self.startTransfer(
                    request, body: body, callerURL: callerURL, events: events, share: share, delivery: delivery, started: started)
            }
        }
        if let refusal = transferStarting(callerURL: callerURL) { return started(.failure(refusal)) }
        guard let share, let sharing else {
            let transfer: any TransferHandle
            switch delivery {
            case .streamed: transfer = transport.start(request, body: body, events: events)
            case .whole:
                // A whole transfer may send its request twice: safe requests only.
                if WholeTransfer.accepts(request, body: body) {
                    transfer = transport.startWhole(request, events: events)
                } else {
                    transfer = transport.start(request, body: body, events: events)
                }
            case .streamedApart: transfer = streamingTransport.start(request, body: body, events: events)
            }
            perform(lifecycle.withLock { $0.transferStarted() })
            return started(.success(transfer))
        }
        let transfer = sharing.start(share, events: events, starter: self) { request, events in
            transport.start(request, body: body, events: events)
        }
        perform(lifecycle.withLock { $0.transferStarted() })
        started(.success(transfer))
    }

    /// A transfer is about to be handed to the inner session: `nil` if it may be (every such
    /// call is followed by `transferStarted()`), or the error its task fails with.
    private func transferStarting(callerURL: URL?) -> (any Error)? {
        switch lifecycle.withLock({ $0.transferStarting() }) {
        case .run: nil
        case .refuseCancelled: URLError.cancelled(url: callerURL)
        case .refuseInvalidated: URLTaskError.managerInvalidated
        }
    }

    func stopTransfer(_ transfer: any TransferHandle) {
        if let subscription = transfer as? TransferSubscription, let sharing {
            for transfer in sharing.stop(subscription) { stopTransfer(transfer) }
            return
        }
        if let whole = transfer as? WholeTransfer { return whole.cancel() }
        guard let task = transfer as? URLSessionTask else { preconditionFailure("a transfer of another transport") }
        transport.cancel(task)
    }

    /// Sends the request of a task that had joined a shared transfer whose answer may not be
    /// shared with it (its `Vary`), on its own; its events reach it through its subscription.
    func sendAlone(_ subscription: TransferSubscription) {
        runtime.async { [self] in
            if let refusal = transferStarting(callerURL: subscription.request.url) {
                return subscription.transportDidComplete(error: refusal)
            }
            subscription.announce(.sendsAlone)
            let task = transport.start(subscription.request, body: .none, events: subscription)
            perform(lifecycle.withLock { $0.transferStarted() })
            if !subscription.sentAlone(task) { transport.cancel(task) }
        }
    }

    /// The inner session of ``TransferDelivery/streamedApart`` transfers (see ``streaming``).
    private var streamingTransport: Transport {
        streaming.withLock { streaming in
            if let streaming { return streaming }
            let made = Transport(configuration: transportConfiguration, callbacksOnWorkQueue: false)
            streaming = made
            return made
        }
    }

    /// Every inner session made so far.
    private var transports: [Transport] {
        let streaming = streaming.withLock { $0 }
        guard let streaming, streaming !== transport else { return [transport] }
        return [transport, streaming]
    }

    var credentialStorage: URLCredentialStorage? {
        transport.session.configuration.urlCredentialStorage
    }

    /// Runs interceptor `index`: right here when it decides without suspending (no Swift task,
    /// no hop), otherwise in a Swift task, one call at a time for an interceptor that asks for it.
    func intercept(
        _ index: Int, _ task: URLTask,
        decided: @escaping @Sendable (Result<InterceptCommand, any Error>, URLTask, Int) -> Void
    ) -> Task<Void, Never>? {
        let interceptor = interceptors[index]
        let serialGate = serialGates[index]
        if let synchronous = synchronousInterceptors[index] {
            let (count, flushes) = batches[index].snapshot
            let context = InterceptContext(currentBatchCount: count)
            var attempt = task
            do {
                if let command = try synchronous.interceptWithoutSuspending(&attempt, context: context) {
                    decided(.success(command), attempt, flushes)
                    return nil
                }
            } catch {
                decided(.failure(error), attempt, flushes)
                return nil
            }
            // `nil`: the async path starts again from the task as it came (`attempt` is dropped).
        }
        var snapshot = task
        let batch = batches[index]
        return Task {
            await serialGate?.acquire()
            // Released only after the command took effect (a hold is in the batch), so the
            // next call's count includes it.
            defer { serialGate?.release() }
            let (count, flushes) = batch.snapshot
            let context = InterceptContext(currentBatchCount: count)
            do {
                let command = try await interceptor.intercept(&snapshot, context: context)
                decided(.success(command), snapshot, flushes)
            } catch {
                decided(.failure(error), snapshot, flushes)
            }
        }
    }

    /// The outer session was told to finish its tasks and invalidate. Tasks it resumed before
    /// that may not have reached ``start(request:body:sink:)`` yet (`startLoading` is queued on
    /// its work queue), so the pipeline finishes only once they have
    /// (``PlatformSupport/afterTasksResumedSoFar(of:_:)``, a hop that reads nothing of the
    /// session).
    ///
    /// Twice: corelibs accepts a task created before its own invalidation block has run on the
    /// work queue (which `finishTasksAndInvalidate()` queues just before this), and the async
    /// APIs resume such a task right after making it, on the caller's thread; a thread preempted
    /// between the two resumes it after the first hop, and its `startLoading` would find the
    /// pipeline finished (seen once in a loaded CI run of `InvalidationStressTests`). The second
    /// hop leaves that thread the time of the first one and a thread switch. A task resumed later
    /// still (made with an open factory, resumed long after the call) is refused with a typed
    /// error where a plain session would run it: the Linux notes say so.
    func outerSessionFinishing(_ session: URLSession) {
        Platform.afterTasksResumedSoFar(of: session) { [self] in
            Platform.afterTasksResumedSoFar(of: session) { [self] in
                perform(lifecycle.withLock { $0.finishRequested() })
            }
        }
    }

    /// The outer session was deallocated: no task of it is left, so the pipeline finishes
    /// whatever runs without one (``URLTaskManager/download(for:)``) and releases the inner session.
    func outerSessionReleased() {
        perform(lifecycle.withLock { $0.finishRequested() })
    }

    /// The outer session was invalidated and cancelled: held tasks complete with `cancelled`,
    /// never sent, and the inner session's transfers are cancelled.
    ///
    /// The streams of events end here, whatever happens to the inner session: a transfer still
    /// being handed over delays its release (``PipelineLifecycleStateMachine/cancelRequested()``),
    /// and that transfer's task may already have answered its caller, so a reader starting
    /// after this call must find every event in its stream, not wait for them.
    func invalidateAndCancel() {
        cancelHeldTasks(cancelRequested())
    }

    /// The first half of ``invalidateAndCancel()``: from now on nothing more is sent, the
    /// transfers of the tasks the session cancels are abandoned rather than cancelled one by one,
    /// and the streams of events end, so the cancellations that follow are not reported (the
    /// session's, which complete on corelibs' work queue at any time after its call, and the held
    /// tasks' alike). Completes no task, so that corelibs' `invalidateAndCancel()`, which reads
    /// its task registry on the caller's thread (URLSession.swift:331-337), can run next without
    /// the pipeline removing tasks from that registry meanwhile.
    func cancelRequested() -> PipelineLifecycleStateMachine.CancelAction {
        let action = lifecycle.withLock { $0.cancelRequested() }
        if case .cancelHeldTasks = action { events.finish() }
        return action
    }

    /// The second half of ``invalidateAndCancel()``: held tasks complete with `cancelled` (those
    /// the session already cancelled stay silent, see ``ProtocolSink``), the calls of the
    /// manager's own methods are cancelled, and the inner session is abandoned.
    func cancelHeldTasks(_ action: PipelineLifecycleStateMachine.CancelAction) {
        guard case .cancelHeldTasks(let inner) = action else { return }
        for batch in batches {
            for run in batch.removeAll() { run.failUnsent(URLError.cancelled(url: run.callerURL)) }
        }
        // No outer task of theirs for the session to cancel: cancelled here as it cancels its
        // own, the caller answered at once and the transfer abandoned (``abandonsTransfers``).
        for run in engine.liveRuns { (run.sink as? any CallSink)?.cancelCall() }
        perform(inner)
    }

    /// Whether the session was invalidated and cancelled: its transfers on the wire are then
    /// abandoned, not cancelled one by one (see ``perform(_:)``).
    var abandonsTransfers: Bool {
        lifecycle.withLock { $0.isCancelled }
    }

    /// Whether the inner session is released or about to be (for tests).
    var isInvalidated: Bool {
        lifecycle.withLock { $0.isInvalidated }
    }

    private func perform(_ action: PipelineLifecycleStateMachine.InnerSessionAction) {
        if case .none = action { return }
        // Every task has ended (or been told so): no event is left to send.
        events.finish()
        switch action {
        case .none: return
        case .finish: for transport in transports { transport.session.finishTasksAndInvalidate() }
        case .abandon:
            // Not `invalidateAndCancel()`, and no inner task is cancelled (see
            // `abandonsTransfers`): cancelling dozens of transfers at once, some of them ending
            // on their own at that moment, crashed corelibs in stress runs (a cancellation
            // reported for a task its registry had already dropped), however the cancels were
            // ordered, and abandoning them never did (the runs: the Performance article,
            // "Figures behind other choices"). Their callers have already completed with
            // `cancelled`; the bytes still arriving are dropped, and the inner session is
            // released when the last transfer ends (at the latest, the request's timeout).
            for transport in transports { transport.session.finishTasksAndInvalidate() }
        }
    }

    /// Ends every running task that `matches` with `error` (see ``TaskRun/abort(with:)``).
    /// `matches` is the caller's code: it runs on each task as the engine handed it over, outside
    /// the lock; a task that moved on since is still ended (an abort concerns the task wherever
    /// it is).
    func failTasks(with error: any Error, where matches: (URLTask) -> Bool) {
        for (run, task) in engine.liveTasks where matches(task) { run.abort(with: error) }
    }

    /// Releases held tasks: every batch, or the one of interceptor `index`.
    func flush(interceptorAt index: Int? = nil) {
        if let index {
            batches[index].flush()
        } else {
            for batch in batches { batch.flush() }
        }
    }
}

/// The handle of a task the pipeline refused: it already failed, there is nothing to cancel.
private struct RefusedTask: PipelineTaskHandle {
    func cancel() {}
}
