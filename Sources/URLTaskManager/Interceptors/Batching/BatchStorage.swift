import Foundation

/// Holds one interceptor's batch: the state machine under a lock, and the tasks it names.
final class BatchStorage: Sendable {
    /// The machine, and the tasks it names.
    private struct State {
        var machine = BatchStateMachine()
        var members: [URLTask.ID: TaskRun] = [:]

        mutating func takeAll(_ ids: [URLTask.ID]) -> [TaskRun] {
            ids.compactMap { members.removeValue(forKey: $0) }
        }
    }

    private let state = LockedState(State())
    let interceptorIndex: Int
    /// Where its timers run.
    private let runtime: any PipelineRuntime

    init(interceptorIndex: Int, runtime: any PipelineRuntime) {
        self.interceptorIndex = interceptorIndex
        self.runtime = runtime
    }

    var count: Int { state.withLock { $0.machine.count } }

    /// The count an interceptor about to decide is told, and the flush count it decides under.
    var snapshot: (count: Int, flushes: Int) { state.withLock { ($0.machine.count, $0.machine.flushes) } }

    /// - Parameter flushesSeen: The flush count of the ``snapshot`` the task's interceptor decided on.
    func hold(_ run: TaskRun, maximumWait: Duration?, flushesSeen: Int? = nil) {
        let deadline = maximumWait.map { ContinuousClock.now.advanced(by: $0) }
        let action = state.withLock { state in
            let action = state.machine.hold(run.id, deadline: deadline, flushesSeen: flushesSeen)
            if action != .releaseNow { state.members[run.id] = run }
            return action
        }
        switch action {
        case .none:
            break
        case .armTimer(let deadline, let generation):
            let delay = ContinuousClock.now.duration(to: deadline)
            runtime.at(runtime.now + delay.dispatchInterval) { [weak self] in
                self?.timerFired(generation: generation)
            }
        case .releaseNow:
            run.batchReleased(index: interceptorIndex)
        }
    }

    /// Releases every held task (and `extra`, the task that asked for the release, last).
    func release(with extra: TaskRun? = nil) {
        let runs: [TaskRun] = state.withLock { state in
            if let extra { state.members[extra.id] = extra; _ = state.machine.hold(extra.id, deadline: nil) }
            return state.takeAll(state.machine.releaseAll())
        }
        for run in runs { run.batchReleased(index: interceptorIndex) }
    }

    /// Releases every held task, and every task deciding to hold right now (`flush()`).
    func flush() {
        let runs = state.withLock { $0.takeAll($0.machine.flush()) }
        for run in runs { run.batchReleased(index: interceptorIndex) }
    }

    func remove(_ run: TaskRun) {
        state.withLock { state in
            if state.machine.remove(run.id) { state.members[run.id] = nil }
        }
    }

    /// Empties the batch without releasing it (the manager is going away).
    func removeAll() -> [TaskRun] {
        state.withLock { $0.takeAll($0.machine.releaseAll()) }
    }

    private func timerFired(generation: Int) {
        let runs = state.withLock { $0.takeAll($0.machine.timerFired(generation: generation)) }
        for run in runs { run.batchReleased(index: interceptorIndex) }
    }
}
