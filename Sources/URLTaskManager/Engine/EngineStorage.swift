import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One manager's ``Engine`` under its one lock, and the I/O its actions for other tasks name.
///
/// Each method is one event, one lock section: it moves the engine and returns what the task
/// whose event it was performs (``TaskStorage``); what it decided for other tasks (a slot handed
/// over, a run ended) it performs itself once the lock is released, on another thread (the
/// caller may be URLSession's work queue or a client callback). The reactors' own code (which
/// outcome they take, the credential version they report) runs outside the lock, just before the
/// event it informs, and reaches the section as a value.
final class EngineStorage: Sendable {
    let reactors: [ReactorRunner]
    /// Requests per host handed to the transport at once for covered tasks; `nil`: no limit.
    let slotsPerHost: Int?
    /// Whether some reactor holds new tasks: only such reactors cover tasks.
    let holdsNewTasks: Bool
    /// Whether some reactor keeps a credential version of its own
    /// (``ReactorRunner/reportsCredentialVersions``): only then is one read as a transfer ends.
    let reportsCredentialVersions: Bool
    private let state: LockedState<Engine>
    /// Where decisions reach their tasks, and the reactors' runs run.
    private let runtime: any PipelineRuntime

    /// - Parameter slotsPerHost: See ``AdmissionStateMachine/init(reactors:slotsPerHost:)``.
    init(reactors: [ReactorRunner], slotsPerHost: Int?, runtime: any PipelineRuntime) {
        self.reactors = reactors
        self.runtime = runtime
        self.slotsPerHost = slotsPerHost
        self.holdsNewTasks = reactors.contains { $0.configuration.mode.holdsNewTasks }
        self.reportsCredentialVersions = reactors.contains(where: \.reportsCredentialVersions)
        self.state = LockedState(Engine(reactors: reactors, slotsPerHost: slotsPerHost))
    }

    // MARK: A task's events

    /// An index for a task about to be made (``Engine/TaskRef``).
    func reserveIndex() -> Int {
        state.withLock { $0.reserveIndex() }
    }

    func register(_ run: TaskStorage, machine: TaskStateMachine, traits: Engine.Traits) {
        state.withLock { $0.register(run, machine: machine, traits: traits) }
    }

    func proceed(_ ref: Engine.TaskRef, _ event: Engine.ProceedEvent) -> Engine.TaskAction {
        state.withLock { $0.proceed(ref, event) }
    }

    func fail(_ ref: Engine.TaskRef, _ event: Engine.FailureEvent) -> Engine.TaskAction {
        state.withLock { $0.fail(ref, event) }
    }

    func cancel(_ ref: Engine.TaskRef) -> TaskStateMachine.CancelAction {
        state.withLock { $0.cancel(ref) }
    }

    func wait(_ ref: Engine.TaskRef, _ event: Engine.WaitEvent) -> Engine.WaitAction {
        state.withLock { $0.wait(ref, event) }
    }

    func workStarted(_ ref: Engine.TaskRef, _ work: Task<Void, Never>) -> Task<Void, Never>? {
        state.withLock { $0.workStarted(ref, work) }
    }

    func isCompleted(_ ref: Engine.TaskRef) -> Bool {
        state.withLock { $0.isCompleted(ref) }
    }

    func observation(_ ref: Engine.TaskRef, _ event: Engine.ObservationEvent) -> Engine.ObservationAction {
        state.withLock { $0.observation(ref, event) }
    }

    func admission(_ ref: Engine.TaskRef, _ event: Engine.AdmissionEvent) -> Engine.TaskAction {
        let (action, decided) = state.withLock { $0.admission(ref, event) }
        tell(decided)
        return action
    }

    func transfer(_ ref: Engine.TaskRef, _ event: Engine.TransferEvent) -> Engine.TransferAction {
        let (action, decided) = state.withLock { $0.transfer(ref, event) }
        tell(decided)
        return action
    }

    /// The task completed or was cancelled: it leaves every queue, its slot is handed over in the
    /// same section, and its timers are cancelled.
    func finished(_ run: TaskStorage) {
        let (timers, decided) = state.withLock { $0.finished(run.ref) }
        for timer in timers { timer.cancel() }
        tell(decided)
    }

    // MARK: Tasks

    /// Every task the pipeline runs now, with its task as it stands (for code that runs outside
    /// the lock: ``URLTaskManager/failTasks(with:where:)``'s predicate).
    var liveTasks: [(TaskStorage, URLTask)] {
        state.withLock { $0.live }
    }

    /// Every task the pipeline runs now.
    var liveRuns: [TaskStorage] { state.withLock { $0.runs } }

    /// Per reactor name, the credential version `task`'s headers were decided under: the
    /// reactor's own (``URLTaskReactor/credentialVersion(of:)``) or, for a reactor that holds
    /// new tasks (a credential's), its successful runs. Reactors with neither (a retry) have none.
    /// For the task's `sent` event only.
    /// - Parameter stamped: The task's credential stamps per reactor
    ///   (``Engine/TaskAction/send(request:body:attempt:whole:task:)``).
    func credentialVersions(of task: URLTask, stamped: [Int: Int]) -> [String: Int] {
        guard !reactors.isEmpty else { return [:] }
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
    /// task that waited on it or at its gate (``Engine/runFinished(reactor:run:result:)``).
    private func runFinished(reactor index: Int, run number: Int, result: ReactorRunner.Outcome) {
        tell(state.withLock { $0.runFinished(reactor: index, run: number, result: result) })
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

    /// Performs, off the caller's thread, what sections decided for other tasks.
    private func tell(_ moved: [Engine.Decision]) {
        for decision in moved { runtime.async { decision.run.perform(decision.action) } }
    }
}
