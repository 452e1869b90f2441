/// Runs one task: its ``TaskStateMachine`` under a lock, and the actions it returns.
///
/// Every event takes the lock only for the transition; the returned action is performed with
/// the lock released, so no interceptor, transport call or client callback ever runs under it.
final class TaskRun: TransportEvents, PipelineTaskHandle, @unchecked Sendable {  // mutable state is guarded by `lock`.
    let id: URLTask.ID
    private let lock = NSLock()
    private var machine: TaskStateMachine
    private var task: URLTask
    private var innerTask: URLSessionTask?
    private var holdGeneration = 0
    private let body: TransportBody
    private let sink: ProtocolSink
    private let pipeline: Pipeline

    init(id: URLTask.ID, request: URLRequest, body: TransportBody, sink: ProtocolSink, pipeline: Pipeline) {
        self.id = id
        self.task = URLTask(id: id, originalRequest: request, attempt: 1)
        self.body = body
        self.sink = sink
        self.pipeline = pipeline
        self.machine = TaskStateMachine(interceptorCount: pipeline.interceptors.count)
    }

    // MARK: Events

    func start() {
        perform(lock.withLock { machine.start() })
    }

    func cancel() {
        DispatchQueue.global().async {
            self.perform(self.lock.withLock { self.machine.cancel() })
        }
    }

    func batchReleased(index: Int) {
        perform(lock.withLock { machine.released(index: index) })
    }

    /// Fails the task if it has not been sent yet (hold timeout, manager invalidated).
    func failUnsent(_ error: any Error) {
        let (action, heldIndex): (TaskStateMachine.Action, Int?) = lock.withLock {
            let held = heldIndexLocked
            return (machine.fail(error), held)
        }
        if case .fail = action, let heldIndex { pipeline.batches[heldIndex].remove(self) }
        perform(action)
    }

    func transportDidReceive(response: URLResponse) {
        perform(lock.withLock { machine.transportReceived(response: response) })
    }

    func transportDidReceive(data: Data) {
        perform(lock.withLock { machine.transportReceived(data: data) })
    }

    func transportDidComplete(error: (any Error)?) {
        perform(lock.withLock {
            innerTask = nil
            return machine.transportCompleted(error: error)
        })
    }

    // MARK: Actions

    private var heldIndexLocked: Int? { currentHold?.index }
    private var currentHold: (index: Int, generation: Int)?

    private func perform(_ action: TaskStateMachine.Action) {
        switch action {
        case .none:
            return
        case .runInterceptor(let index):
            runInterceptor(index)
        case .hold(let index, let maximumWait):
            let generation = lock.withLock {
                holdGeneration += 1
                currentHold = (index, holdGeneration)
                return holdGeneration
            }
            pipeline.batches[index].hold(self, maximumWait: maximumWait)
            armHoldTimeout(index: index, generation: generation)
        case .releaseBatch(let index):
            lock.withLock {
                holdGeneration += 1
                currentHold = (index, holdGeneration)
            }
            pipeline.batches[index].release(with: self)
        case .send:
            send()
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
        case .cancelTransport:
            let inner = lock.withLock { innerTask }
            inner?.cancel()
            pipeline.taskEnded()
        case .leaveBatch(let index):
            pipeline.batches[index].remove(self)
            pipeline.taskEnded()
        }
    }

    private func runInterceptor(_ index: Int) {
        lock.withLock { currentHold = nil }
        let interceptor = pipeline.interceptors[index]
        let name = String(describing: type(of: interceptor))
        let context = InterceptContext(currentBatchCount: pipeline.batches[index].count)
        var snapshot = lock.withLock { task }
        Task {
            let action: TaskStateMachine.Action
            do {
                let command = try await interceptor.intercept(&snapshot, context: context)
                action = lock.withLock {
                    task = snapshot
                    return machine.interceptorReturned(index: index, command: command, interceptorName: name)
                }
            } catch {
                action = lock.withLock { machine.interceptorThrew(index: index, error: error, interceptorName: name) }
            }
            perform(action)
        }
    }

    private func armHoldTimeout(index: Int, generation: Int) {
        let limit = pipeline.options.maximumHoldTime
        let interceptor = String(describing: type(of: pipeline.interceptors[index]))
        DispatchQueue.global().asyncAfter(deadline: .now() + limit.dispatchInterval) { [weak self] in
            guard let self else { return }
            let stillHeld = self.lock.withLock { self.currentHold.map { $0 == (index, generation) } ?? false }
            guard stillHeld else { return }
            self.failUnsent(URLTaskError.holdTimedOut(interceptor: interceptor, after: limit))
        }
    }

    private func send() {
        let request = lock.withLock { task.request }
        if let problem = HeaderValidation.firstProblem(in: request) {
            perform(lock.withLock { machine.failSending(problem) })
            return
        }
        let inner = pipeline.transport.start(request, body: body, events: self)
        let cancelled = lock.withLock {
            innerTask = inner
            return machine.isCompleted
        }
        // A cancel that raced with the send found no inner task to stop.
        if cancelled { inner.cancel() }
    }
}

extension Duration {
    var dispatchInterval: DispatchTimeInterval {
        let (seconds, attoseconds) = components
        let nanoseconds = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !nanoseconds.overflow else { return .never }
        return .nanoseconds(Int(clamping: nanoseconds.partialValue + attoseconds / 1_000_000_000))
    }
}
