import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One manager's ``Engine`` under its one lock, and the I/O its actions for other tasks name.
///
/// Every event goes through one funnel, ``withLock(_:)``: one lock section that moves the engine
/// and returns what the task whose event it was performs (``TaskRun``); what it decided for other
/// tasks (a slot handed over, a run ended) the funnel performs once the lock is released. The
/// reactors' own code (which outcome they take, the credential version they report: their
/// ``ReactorRunner``'s readings) runs outside the lock, just before the event it informs, and
/// reaches the section as a value.
final class EngineStorage: Sendable {
    let reactors: [ReactorRunner]
    /// Requests per host handed to the transport at once for covered tasks; `nil`: no limit.
    let slotsPerHost: Int?
    /// Whether some reactor holds new tasks: only such reactors cover tasks.
    let holdsNewTasks: Bool
    /// Whether some reactor keeps a credential version of its own
    /// (``ReactorRunner/reportsCredentialVersions``): only then is one read as a transfer ends.
    let reportsCredentialVersions: Bool
    /// What every task's machine knows of each reactor (``TaskStateMachine/ReactorTraits``): the
    /// same for every task of the manager, so made once.
    let taskTraits: [TaskStateMachine.ReactorTraits]
    private let state: LockedState<Engine>
    /// Where decisions reach their tasks, and the reactors' runs run.
    private let runtime: any PipelineRuntime

    /// - Parameter slotsPerHost: See ``AdmissionStateMachine/init(reactors:slotsPerHost:)``.
    init(reactors: [ReactorRunner], slotsPerHost: Int?, runtime: any PipelineRuntime) {
        self.reactors = reactors
        self.runtime = runtime
        self.slotsPerHost = slotsPerHost
        self.holdsNewTasks = reactors.contains(where: \.holdsNewTasks)
        self.reportsCredentialVersions = reactors.contains(where: \.reportsCredentialVersions)
        self.taskTraits = reactors.map {
            TaskStateMachine.ReactorTraits(
                component: $0.component, maximumReactions: $0.configuration.maximumReactionsPerTask,
                delivers: $0.afterwards == .deliverResponse, reportsVersions: $0.reportsCredentialVersions)
        }
        self.state = LockedState(Engine(reactors: reactors, slotsPerHost: slotsPerHost))
    }

    // MARK: The funnel

    /// The one way into the engine: `event` moves it in one lock section and returns what the
    /// task whose event it was performs (``TaskRun``); what the section decided for other tasks
    /// (a slot handed over, a run ended) is performed here once the lock is released, on another
    /// thread (the caller may be URLSession's work queue or a client callback). One funnel, as
    /// async-http-client's pool has `modifyStateAndRunActions`, so no event can forget the
    /// decisions it made for others.
    func withLock<Action>(_ event: (inout Engine) -> Action) -> Action {
        let (action, decided) = state.withLock { engine in
            let action = event(&engine)
            return (action, engine.takeDecisions())
        }
        for decision in decided { runtime.async { decision.run.perform(decision.action) } }
        return action
    }

    /// The task completed or was cancelled: it leaves every queue, its slot is handed over in the
    /// same section, and its timers are cancelled.
    func finished(_ run: TaskRun) {
        for timer in withLock({ $0.finished(run.ref) }) { timer.cancel() }
    }

    // MARK: Tasks

    /// Every live task, with its task as it stands (for code that runs outside the lock:
    /// ``URLTaskManager/failTasks(with:where:)``'s predicate).
    var liveTasks: [(TaskRun, URLTask)] { withLock { $0.live } }

    /// Every live task.
    var liveRuns: [TaskRun] { withLock { $0.runs } }

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
        withLock { $0.runFinished(reactor: index, run: number, result: result) }
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
}
