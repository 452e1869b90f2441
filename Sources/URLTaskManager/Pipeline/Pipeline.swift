/// Everything one manager runs: its interceptors, their batches, and the transport.
///
/// The bridge calls ``start(request:body:sink:)`` for each outer task; the pipeline creates a
/// ``TaskRun`` and counts it until it completes, so that ``finishAndInvalidate()`` can release
/// the inner session once the last task is done.
final class Pipeline: @unchecked Sendable {  // `activeTasks`/`invalidation` are guarded by `lock`; the rest is immutable.
    private enum Invalidation {
        case none
        case whenIdle
        case done
    }

    let interceptors: [any URLTaskInterceptor]
    let batches: [BatchStorage]
    /// One per interceptor that intercepts one task at a time, `nil` for the others.
    let serialGates: [SerialGate?]
    let reactors: [ReactorStorage]
    let options: URLTaskManager.Options
    /// Requests per host handed to the transport at once; `nil` when no reactor holds new
    /// tasks (nothing can make a queued request's headers stale, so URLSession queues them).
    let connectionSlots: ConnectionSlots?
    private(set) var transport: Transport!

    private let lock = NSLock()
    private var activeTasks = 0
    private var invalidation = Invalidation.none
    private var nextID: UInt64 = 0

    init(interceptors: [any URLTaskInterceptor], reactors: [any URLTaskReactor], configuration: URLSessionConfiguration, options: URLTaskManager.Options) {
        self.interceptors = interceptors
        self.reactors = reactors.enumerated().map { ReactorStorage(index: $0.offset, reactor: $0.element) }
        self.batches = interceptors.indices.map { BatchStorage(interceptorIndex: $0) }
        self.serialGates = interceptors.map { $0.interceptsOneAtATime ? SerialGate() : nil }
        self.options = options
        let holding = reactors.contains { $0.configuration.holdsNewTasks }
        let limit = options.maximumRequestsInFlightPerHost ?? configuration.httpMaximumConnectionsPerHost
        self.connectionSlots = holding && limit > 0 ? ConnectionSlots(limit: limit) : nil
        self.transport = Transport(configuration: configuration, onInvalidated: {})
    }

    /// Called by the bridge on the outer session's work queue: returns at once.
    func start(request: URLRequest, body: RequestBodySource, sink: any TaskSink) -> any PipelineTaskHandle {
        let id: URLTask.ID = lock.withLock {
            activeTasks += 1
            nextID += 1
            return URLTask.ID(rawValue: nextID)
        }
        let run = TaskRun(id: id, request: request, body: body, sink: sink, pipeline: self)
        // The work queue must not block, and creating the inner task syncs onto it.
        DispatchQueue.global().async { run.start() }
        return run
    }

    func taskEnded() {
        let invalidate: Bool = lock.withLock {
            activeTasks -= 1
            guard activeTasks == 0, case .whenIdle = invalidation else { return false }
            invalidation = .done
            return true
        }
        if invalidate { transport.session.finishTasksAndInvalidate() }
    }

    /// Lets running tasks finish, then releases the inner session.
    func finishAndInvalidate() {
        let now: Bool = lock.withLock {
            guard case .none = invalidation else { return false }
            if activeTasks == 0 {
                invalidation = .done
                return true
            }
            invalidation = .whenIdle
            return false
        }
        if now { transport.session.finishTasksAndInvalidate() }
    }

    /// Cancels everything now: held tasks complete with `cancelled`, never sent.
    func invalidateAndCancel() {
        lock.withLock { invalidation = .done }
        for batch in batches {
            for run in batch.removeAll() { run.failUnsent(URLError(.cancelled)) }
        }
        transport.session.invalidateAndCancel()
    }

    /// Whether the inner session still accepts tasks. Creating a task on an invalidated
    /// session is a crash in corelibs, so a task that reaches the network after this fails
    /// with ``URLTaskError/managerInvalidated`` instead.
    var acceptsNewTransfers: Bool {
        lock.withLock { if case .done = invalidation { false } else { true } }
    }

    /// Whether a reactor that holds new tasks exempts `request`: its own work's traffic (a
    /// token request) must not wait behind the requests that wait for that work.
    func isReactorTraffic(_ request: URLRequest) -> Bool {
        reactors.contains { $0.configuration.holdsNewTasks && $0.configuration.exempts(request) }
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
