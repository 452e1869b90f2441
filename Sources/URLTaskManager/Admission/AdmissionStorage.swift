import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Runs one manager's ``AdmissionStateMachine`` under a lock, names every task it may call
/// back, and runs the reactors' shared work.
///
/// The single map of live tasks (`runs`) is the only place a decision about one task made on
/// another's event (a slot handed over, a gate opened, a run finished) finds the task to tell.
final class AdmissionStorage: @unchecked Sendable {  // `machine`, `runs` and `lastFailures` are guarded by `lock`.
    let reactors: [ReactorStorage]
    /// Requests per host handed to the transport at once for covered tasks; `nil`: no limit.
    let slotsPerHost: Int?
    /// Whether some reactor holds new tasks: only such reactors cover tasks.
    private let holdsNewTasks: Bool
    private let lock = NSLock()
    private var machine: AdmissionStateMachine
    private var runs: [URLTask.ID: TaskStorage] = [:]
    /// Per reactor, the error of its last failed run: what tasks late for it fail with.
    private var lastFailures: [(any Error)?]
    /// Where decisions reach their tasks, and the reactors' runs run.
    private let runtime: any PipelineRuntime

    /// - Parameter slotsPerHost: See ``AdmissionStateMachine/init(reactors:slotsPerHost:)``.
    init(reactors: [ReactorStorage], slotsPerHost: Int?, runtime: any PipelineRuntime) {
        self.reactors = reactors
        self.runtime = runtime
        self.slotsPerHost = slotsPerHost
        self.holdsNewTasks = reactors.contains { $0.configuration.mode.holdsNewTasks }
        self.machine = AdmissionStateMachine(
            reactors: reactors.map(\.configuration.mode),
            slotsPerHost: slotsPerHost
        )
        self.lastFailures = Array(repeating: nil, count: reactors.count)
    }

    // MARK: Task events

    func register(_ run: TaskStorage) {
        lock.withLock {
            machine.register(run.id, exemptedBy: run.exemptedBy)
            runs[run.id] = run
        }
    }

    /// Every task the pipeline runs now.
    var liveRuns: [TaskStorage] { lock.withLock { Array(runs.values) } }

    func headersWillBeDecided(_ run: TaskStorage) -> AdmissionStateMachine.DecideAction {
        lock.withLock { machine.headersWillBeDecided(run.id) }
    }

    /// The decision for a task about to leave; `.fail` is returned with the run's error.
    func wantsToSend(_ run: TaskStorage, host: String, restamp: Bool) -> (AdmissionStateMachine.SendAction, (any Error)?) {
        lock.withLock {
            let action = machine.wantsToSend(run.id, host: host, restamp: restamp)
            return (action, failure(for: action))
        }
    }

    /// Per reactor name, the credential version `task`'s headers were decided under: the
    /// reactor's own (``URLTaskReactor/credentialVersion(of:)``) or, for a reactor that holds
    /// new tasks (a credential's), its successful runs. Reactors with neither (a retry) have none.
    func credentialVersions(of run: TaskStorage, task: URLTask) -> [String: Int] {
        guard !reactors.isEmpty else { return [:] }
        let stamped = lock.withLock { machine.stampedVersions(run.id) }
        var versions: [String: Int] = [:]
        for reactor in reactors {
            if let own = reactor.reactor.credentialVersion(of: task) {
                versions[reactor.name] = own
            } else if reactor.configuration.mode.holdsNewTasks, let version = stamped[reactor.index] {
                versions[reactor.name] = version
            }
        }
        return versions
    }

    /// `run`'s transfer ended, or it was not sent after all: its slot goes to the next task.
    /// - Parameter answered: The transfer ended with an answer no reactor needed (see
    ///   ``AdmissionStateMachine/transferEnded(_:answered:)``): the loop guards hear of it in
    ///   the same lock section.
    func transferEnded(_ run: TaskStorage, answered: Bool = false) {
        tell(lock.withLock { decisions(machine.transferEnded(run.id, answered: answered)) })
    }

    func finished(_ run: TaskStorage) {
        tell(
            lock.withLock {
                let decided = decisions(machine.finished(run.id))
                runs[run.id] = nil
                return decided
            })
    }

    /// Whether a reactor covering `run` keeps a credential version of its own by which `task`'s
    /// headers are older than the current ones (``URLTaskReactor/credentialVersion(of:)``): a
    /// change the engine did not make itself (a sign-in, a token renewed before it expired).
    /// Asked just before the task leaves, outside the lock: the version is the reactor's.
    /// `task` is read only when some reactor covers the task.
    func headersAreOutdated(_ run: TaskStorage, task: () -> URLTask) -> Bool {
        guard holdsNewTasks else { return false }  // no reactor covers any task
        let covering = lock.withLock { machine.covering(run.id) }
        guard !covering.isEmpty else { return false }
        let task = task()
        return covering.contains { reactors[$0].reactor.headersAreOutdated(task) }
    }

    /// Returns `true` if the task still waited for a slot in `generation`: it must fail.
    func slotWaitExpired(_ run: TaskStorage, generation: Int) -> Bool {
        lock.withLock { machine.slotWaitExpired(run.id, generation: generation) }
    }

    // MARK: Reactors

    /// `run`'s transfer ended with an outcome that needs single-flight reactor `index`: starts
    /// or joins its work, or decides at once, and hands the task's slot over (one transition,
    /// see ``AdmissionStateMachine/transferEndedNeedingReaction(_:reactor:alreadyRequeued:now:)``).
    /// Returns the outcome when it is decided at once (late for a run, or no run can help).
    /// Returns the outcome when the task needs no run (requeued, failed or answered at once);
    /// otherwise `nil` and the run it waits on (for its events).
    func transferEnded(
        _ run: TaskStorage, needing index: Int, alreadyRequeued: Bool, outcome: URLTaskOutcome, body: Data, task: URLTask
    ) -> (immediate: ReactorStorage.Outcome?, run: Int?) {
        let reactor = reactors[index]
        // The reactor's own credential version, read before the lock: it is the reactor's code.
        let outdated = reactor.reactor.headersAreOutdated(task)
        let (action, lateError, decided, joined) = lock.withLock {
            let (need, handedOver) = machine.transferEndedNeedingReaction(
                run.id, reactor: index, alreadyRequeued: alreadyRequeued, outdated: outdated, now: .now)
            return (need, lastRunError(index), decisions(handedOver), machine.reactors[index].currentRun)
        }
        tell(decided)
        switch action {
        case .wait:
            return (nil, joined)
        case .requeueNow:
            return (.succeeded, nil)
        case .failNow:
            return (.failed(lateError), nil)
        case .deliverNow:
            return (.declined, nil)
        case .refuseLoop(let runs):
            let window = reactor.configuration.mode.loopGuard?.window ?? .zero
            return (.failed(URLTaskError.reactionLoop(reactor.component, runs: runs, window: window)), nil)
        case .startRun(let number):
            _ = runtime.react(reactor, to: outcome, body: body, of: task) { result in
                self.runFinished(reactor: index, run: number, result: result)
            }
            return (nil, number)
        }
    }

    private func runFinished(reactor index: Int, run number: Int, result: ReactorStorage.Outcome) {
        let (waiters, gated): ([TaskStorage], [TaskStorage]) = lock.withLock {
            var failure: (any Error)?
            if case .failed(let error) = result { failure = error }
            guard let end = machine.runFinished(reactor: index, run: number, succeeded: failure == nil) else { return ([], []) }
            lastFailures[index] = failure
            return (end.waiters.compactMap { runs[$0] }, end.gated.compactMap { runs[$0] })
        }
        for run in waiters { run.reactionFinished(reactor: index, outcome: result) }
        for run in gated {
            switch result {
            case .succeeded, .declined: run.gateOpened()
            case .failed(let error): run.failUnsent(error)
            }
        }
    }

    // MARK: For tests

    /// Hosts with a request in flight: 0 once every transfer ended and gave its slot back.
    var busyHosts: Int { lock.withLock { machine.busyHosts } }
    /// Tasks waiting for a slot.
    var waitingForSlot: Int { lock.withLock { machine.waitingForSlot } }
    /// Reactor runs going: 0 once every run ended.
    var runsGoing: Int { lock.withLock { machine.reactors.filter(\.isRunning).count } }
    /// Tasks admission still knows: 0 once every task completed.
    var taskCount: Int { lock.withLock { machine.taskCount } }

    // MARK: Internals

    /// Must be called with `lock` held.
    private func lastRunError(_ index: Int) -> any Error {
        lastFailures[index] ?? URLTaskError.delivered(CancellationError(), from: reactors[index].component, code: .reactorFailed)
    }

    /// Must be called with `lock` held.
    private func failure(for action: AdmissionStateMachine.SendAction) -> (any Error)? {
        if case .fail(let reactor) = action { return lastRunError(reactor) }
        return nil
    }

    /// Must be called with `lock` held.
    private func decisions(
        _ decided: [(URLTask.ID, AdmissionStateMachine.SendAction)]
    ) -> [(TaskStorage, AdmissionStateMachine.SendAction, (any Error)?)] {
        decided.compactMap { id, action in runs[id].map { ($0, action, failure(for: action)) } }
    }

    /// Tells tasks what was decided for them on another task's event, off the caller's thread
    /// (it may be the transport's delegate queue or a client callback).
    private func tell(_ decided: [(TaskStorage, AdmissionStateMachine.SendAction, (any Error)?)]) {
        for (run, action, error) in decided {
            runtime.async { run.admitted(action, failure: error) }
        }
    }
}
