import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The engine of one manager under its one lock: admission (``AdmissionStateMachine``: the
/// reactors' runs and gates, credential stamps, connection slots), every live task, and every
/// task's own machine.
///
/// **One lock section per event.** A ``TaskStorage`` keeps its machine here, guarded by this
/// storage's ``LockedState``: an event of a task is one section in which its machine and
/// admission both move (a gate checked and waited at, a slot taken and the request let go, a
/// transfer's end and its slot handed over). An event of the engine is one section too: a slot
/// handed over moves the task that gets it (``TaskStorage/admitted(_:in:)``); a run that ends
/// moves every task that waited on it. So no decision is made in one section and acted on in
/// another, and no branch exists to ignore "the other section won the race". What a section
/// decides is performed once the lock is released; a decision for another task is performed on
/// another thread (the caller may be URLSession's work queue or a client callback).
///
/// The reactors' own code (which outcome they take, the credential version they report) runs
/// outside the lock, just before the event it informs, and reaches the section as a value.
final class EngineStorage: Sendable {
    /// What the lock guards, besides each live task's machine.
    struct State {
        var admission: AdmissionStateMachine
        /// Every task the pipeline runs now: where a decision made on another task's event (a
        /// slot handed over, a run ended) finds the task it is for.
        var tasks: [URLTask.ID: TaskStorage] = [:]
        /// Per reactor, the error of its last failed run: what tasks late for it fail with.
        var lastFailures: [(any Error)?]
    }

    let reactors: [ReactorRunner]
    /// Requests per host handed to the transport at once for covered tasks; `nil`: no limit.
    let slotsPerHost: Int?
    /// Whether some reactor holds new tasks: only such reactors cover tasks.
    let holdsNewTasks: Bool
    /// Whether some reactor keeps a credential version of its own
    /// (``ReactorRunner/reportsCredentialVersions``): only then is one read as a transfer ends.
    let reportsCredentialVersions: Bool
    private let state: LockedState<State>
    /// Where decisions reach their tasks, and the reactors' runs run.
    private let runtime: any PipelineRuntime

    /// - Parameter slotsPerHost: See ``AdmissionStateMachine/init(reactors:slotsPerHost:)``.
    init(reactors: [ReactorRunner], slotsPerHost: Int?, runtime: any PipelineRuntime) {
        self.reactors = reactors
        self.runtime = runtime
        self.slotsPerHost = slotsPerHost
        self.holdsNewTasks = reactors.contains { $0.configuration.mode.holdsNewTasks }
        self.reportsCredentialVersions = reactors.contains(where: \.reportsCredentialVersions)
        self.state = LockedState(
            State(
                admission: AdmissionStateMachine(reactors: reactors.map(\.configuration.mode), slotsPerHost: slotsPerHost),
                lastFailures: Array(repeating: nil, count: reactors.count)))
    }

    /// One lock section: for a task's event (``TaskStorage``), which moves its own machine and
    /// admission together. No user code, continuation or client callback inside.
    @inline(__always)
    func withLock<Result>(_ body: (inout State) -> Result) -> Result {
        state.withLock(body)
    }

    // MARK: Tasks

    func register(_ run: TaskStorage) {
        let admits = !reactors.isEmpty
        state.withLock {
            // Without reactors admission has nothing to decide (no gate, stamp or slot): a task it
            // does not know is let go at once by every event, without a record to keep.
            if admits { $0.admission.register(run.id, exemptedBy: run.exemptedBy) }
            $0.tasks[run.id] = run
        }
    }

    /// Every task the pipeline runs now.
    var liveRuns: [TaskStorage] { state.withLock { Array($0.tasks.values) } }

    /// The task completed or was cancelled: it leaves every queue, and its slot is handed over
    /// in the same section.
    func finished(_ run: TaskStorage) {
        let decided = state.withLock {
            $0.tasks[run.id] = nil
            return Self.admit($0.admission.finished(run.id), in: &$0)
        }
        tell(decided)
    }

    /// Per reactor name, the credential version `task`'s headers were decided under: the
    /// reactor's own (``URLTaskReactor/credentialVersion(of:)``) or, for a reactor that holds
    /// new tasks (a credential's), its successful runs. Reactors with neither (a retry) have none.
    /// For the task's `sent` event only.
    func credentialVersions(of run: TaskStorage, task: URLTask) -> [String: Int] {
        guard !reactors.isEmpty else { return [:] }
        let stamped = state.withLock { $0.admission.stampedVersions(run.id) }
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

    /// What reactors `indices` report of `task` as it is about to leave
    /// (``ReactorRunStateMachine/ReportedVersion``), when its headers carry an older version than
    /// the current one: their code, so called without the lock, just before the event the
    /// readings inform. Headers of the current version need no record (on a send, the common
    /// case, nothing is built); a task judged later on another task's event reads again
    /// (``TaskStorage``'s `confirmSlot`).
    func outdatedVersions(of task: URLTask, by indices: [Int]) -> [Int: ReactorRunStateMachine.ReportedVersion] {
        var readings: [Int: ReactorRunStateMachine.ReportedVersion] = [:]
        for index in indices {
            if let reading = reportedVersion(of: task, by: index), reading.isOutdated { readings[index] = reading }
        }
        return readings
    }

    /// What reactor `index` reports of `task`, if it keeps a credential version of its own.
    func reportedVersion(of task: URLTask, by index: Int) -> ReactorRunStateMachine.ReportedVersion? {
        let reactor = reactors[index].reactor
        guard let current = reactor.currentCredentialVersion(), let sent = reactor.credentialVersion(of: task) else { return nil }
        return .init(sent: sent, current: current)
    }

    // MARK: Reactor runs

    /// Starts run `number` of reactor `index` on the outcome of the task that needs it; its end
    /// is one section (``runFinished(reactor:run:result:)``).
    func startRun(reactor index: Int, number: Int, outcome: URLTaskOutcome, body: Data, task: URLTask) {
        _ = runtime.react(reactors[index], to: outcome, body: body, of: task) { result in
            self.runFinished(reactor: index, run: number, result: result)
        }
    }

    /// Run `number` of reactor `index` ended: one section ends it in admission and moves every
    /// task that waited on it or at its gate (``TaskStorage/runEnded(reactor:outcome:in:)``).
    private func runFinished(reactor index: Int, run number: Int, result: ReactorRunner.Outcome) {
        let moved: [(TaskStorage, TaskStorage.RunEndAction)] = state.withLock { state in
            var failure: (any Error)?
            if case .failed(let error) = result { failure = error }
            guard let end = state.admission.runFinished(reactor: index, run: number, succeeded: failure == nil) else { return [] }
            state.lastFailures[index] = failure
            var moved: [(TaskStorage, TaskStorage.RunEndAction)] = []
            for id in end.waiters {
                guard let task = state.tasks[id] else { continue }
                moved.append((task, task.reactionFinished(reactor: index, outcome: result, in: &state)))
            }
            for id in end.gated {
                guard let task = state.tasks[id] else { continue }
                moved.append((task, task.gateOpened(by: result, in: &state)))
            }
            return moved
        }
        for (task, action) in moved { runtime.async { task.perform(action) } }
    }

    // MARK: For tests

    /// Hosts with a request in flight: 0 once every transfer ended and gave its slot back.
    var busyHosts: Int { state.withLock { $0.admission.busyHosts } }
    /// Tasks waiting for a slot.
    var waitingForSlot: Int { state.withLock { $0.admission.waitingForSlot } }
    /// Reactor runs going: 0 once every run ended.
    var runsGoing: Int { state.withLock { $0.admission.reactors.filter(\.isRunning).count } }
    /// Tasks admission still knows: 0 once every task completed.
    var taskCount: Int { state.withLock { $0.admission.taskCount } }

    // MARK: Decisions for other tasks

    /// With the lock held: moves each task admission decided for (a slot handed over) in the same
    /// section, and every task its move hands a slot to in turn. Returns what each must do.
    static func admit(
        _ decided: [(URLTask.ID, AdmissionStateMachine.SendAction)], in state: inout State
    ) -> [(TaskStorage, TaskStorage.AdmittedAction)] {
        guard !decided.isEmpty else { return [] }
        var pending = decided[...]
        var moved: [(TaskStorage, TaskStorage.AdmittedAction)] = []
        while let (id, decision) = pending.popFirst() {
            guard let task = state.tasks[id] else { continue }
            let (action, handedOver) = task.admitted(decision, in: &state)
            moved.append((task, action))
            pending.append(contentsOf: handedOver)
        }
        return moved
    }

    /// With the lock held: the error a task late for reactor `index`'s failed runs fails with.
    static func lastRunError(_ index: Int, in state: State, reactors: [ReactorRunner]) -> any Error {
        state.lastFailures[index] ?? URLTaskError.delivered(CancellationError(), from: reactors[index].component, code: .reactorFailed)
    }

    /// Performs, off the caller's thread, what sections decided for other tasks.
    func tell(_ moved: [(TaskStorage, TaskStorage.AdmittedAction)]) {
        for (task, action) in moved { runtime.async { task.perform(action) } }
    }
}
