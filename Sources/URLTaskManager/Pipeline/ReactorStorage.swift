/// Runs one single-flight reactor: its ``ReactorStateMachine`` under a lock, the work in a
/// Swift task with its timeout, and the hand-back to every task that waited.
final class ReactorStorage: @unchecked Sendable {  // `machine`, `members` and `lastFailure` are guarded by `lock`.
    enum Outcome {
        case succeeded
        case failed(any Error)
        /// No run can help this task: give its caller the response it received.
        case declined
    }

    let index: Int
    let reactor: any URLTaskReactor
    let configuration: URLTaskReactorConfiguration
    let name: String
    private let lock = NSLock()
    private var machine: ReactorStateMachine
    private var members: [URLTask.ID: TaskRun] = [:]
    /// The error of the last failed run, given to tasks that arrive late for it.
    private var lastFailure: (any Error)?

    init(index: Int, reactor: any URLTaskReactor) {
        self.index = index
        self.reactor = reactor
        self.configuration = reactor.configuration
        self.name = String(describing: type(of: reactor))
        self.machine = ReactorStateMachine(loopGuard: configuration.loopGuard)
    }

    /// What a task whose headers are decided now records: the successful runs so far (the "credential version")
    /// and the failed ones.
    var stamp: ReactorStateMachine.Stamp { lock.withLock { machine.stamp } }

    /// The error of the last run if a run failed since `stamp` (and none succeeded since, which
    /// the caller checks first): a task stamped before it would only meet the same failure.
    func failure(since stamp: ReactorStateMachine.Stamp) -> (any Error)? {
        lock.withLock {
            guard machine.failures > stamp.failures else { return nil }
            return lastRunError
        }
    }

    /// The error a task late for a failed run gets: that run's. Must be called with `lock` held.
    private var lastRunError: any Error {
        lastFailure ?? URLTaskError.reactorFailed(reactor: name, underlying: CancellationError())
    }

    /// Holds `run` if this reactor's work is running and it gates new tasks. Returns `true`
    /// if the task must wait; it is resumed by ``TaskRun/gateOpened()`` or failed with the
    /// run's error.
    func gate(_ run: TaskRun, request: URLRequest) -> Bool {
        guard configuration.holdsNewTasks, !configuration.exempts(request) else { return false }
        return lock.withLock {
            guard machine.gate(run.id) else { return false }
            members[run.id] = run
            return true
        }
    }

    /// `run` needs this reactor. Starts, joins, or skips the work.
    func need(_ run: TaskRun, sentUnder: ReactorStateMachine.Stamp, alreadyRequeued: Bool, outcome: URLTaskOutcome, body: Data, task: URLTask) {
        let (action, lateError) = lock.withLock {
            let action = machine.taskNeedsReaction(run.id, sentUnder: sentUnder, alreadyRequeued: alreadyRequeued, now: .now)
            switch action {
            case .startRun, .wait: members[run.id] = run
            case .requeueNow, .failNow, .deliverNow, .refuseLoop: break
            }
            return (action, lastRunError)
        }
        switch action {
        case .wait:
            return
        case .requeueNow:
            run.reactionFinished(reactor: index, outcome: .succeeded)
        case .failNow:
            run.reactionFinished(reactor: index, outcome: .failed(lateError))
        case .deliverNow:
            run.reactionFinished(reactor: index, outcome: .declined)
        case .refuseLoop(let runs):
            let window = configuration.loopGuard?.window ?? .zero
            run.reactionFinished(reactor: index, outcome: .failed(URLTaskError.reactionLoop(reactor: name, runs: runs, window: window)))
        case .startRun(let number):
            Task { await self.execute(run: number, outcome: outcome, body: body, task: task) }
        }
    }

    func remove(_ run: TaskRun) {
        lock.withLock {
            if machine.remove(run.id) { members[run.id] = nil }
        }
    }

    /// Runs the reactor's work once, within its timeout, and names the failure: what a single
    /// flight run and a per-task reaction both do.
    func runWork(outcome: URLTaskOutcome, body: Data, task: URLTask) async -> Outcome {
        do {
            try await withDeadline(configuration.timeout) {
                try await self.reactor.react(to: outcome, body: body, of: task)
            }
            return .succeeded
        } catch let error as ReactorDeadlineExceeded {
            return .failed(URLTaskError.reactorTimedOut(reactor: name, after: error.limit))
        } catch {
            return .failed(URLTaskError.reactorFailed(reactor: name, underlying: error))
        }
    }

    private func execute(run number: Int, outcome: URLTaskOutcome, body: Data, task: URLTask) async {
        let result = await runWork(outcome: outcome, body: body, task: task)
        let (waiters, gated): ([TaskRun], [TaskRun]) = lock.withLock {
            var failure: (any Error)?
            if case .failed(let error) = result { failure = error }
            guard let end = machine.runFinished(run: number, succeeded: failure == nil) else { return ([], []) }
            lastFailure = failure
            let waiters = end.waiters.compactMap { members.removeValue(forKey: $0) }
            let gated = end.gated.compactMap { members.removeValue(forKey: $0) }
            return (waiters, gated)
        }
        for run in waiters { run.reactionFinished(reactor: index, outcome: result) }
        for run in gated {
            switch result {
            case .succeeded, .declined: run.gateOpened()
            case .failed(let error): run.failUnsent(error)
            }
        }
    }
}
