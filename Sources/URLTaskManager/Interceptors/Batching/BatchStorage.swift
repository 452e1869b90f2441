import Foundation

/// Holds one interceptor's batch: the state machine under a lock, and the tasks it names.
final class BatchStorage: @unchecked Sendable {  // `machine` and `members` are guarded by `lock`.
    private let lock = NSLock()
    private var machine = BatchStateMachine()
    private var members: [URLTask.ID: TaskStorage] = [:]
    let interceptorIndex: Int
    /// Where its timers run.
    private let runtime: any PipelineRuntime

    init(interceptorIndex: Int, runtime: any PipelineRuntime) {
        self.interceptorIndex = interceptorIndex
        self.runtime = runtime
    }

    var count: Int { lock.withLock { machine.count } }

    /// The count an interceptor about to decide is told, and the flush count it decides under.
    var snapshot: (count: Int, flushes: Int) { lock.withLock { (machine.count, machine.flushes) } }

    /// - Parameter flushesSeen: The flush count of the ``snapshot`` the task's interceptor decided on.
    func hold(_ run: TaskStorage, maximumWait: Duration?, flushesSeen: Int? = nil) {
        let deadline = maximumWait.map { ContinuousClock.now.advanced(by: $0) }
        let action = lock.withLock {
            let action = machine.hold(run.id, deadline: deadline, flushesSeen: flushesSeen)
            if action != .releaseNow { members[run.id] = run }
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
    func release(with extra: TaskStorage? = nil) {
        let runs: [TaskStorage] = lock.withLock {
            if let extra { members[extra.id] = extra; _ = machine.hold(extra.id, deadline: nil) }
            return takeAll(machine.releaseAll())
        }
        for run in runs { run.batchReleased(index: interceptorIndex) }
    }

    /// Releases every held task, and every task deciding to hold right now (`flush()`).
    func flush() {
        let runs = lock.withLock { takeAll(machine.flush()) }
        for run in runs { run.batchReleased(index: interceptorIndex) }
    }

    func remove(_ run: TaskStorage) {
        lock.withLock {
            if machine.remove(run.id) { members[run.id] = nil }
        }
    }

    /// Empties the batch without releasing it (the manager is going away).
    func removeAll() -> [TaskStorage] {
        lock.withLock { takeAll(machine.releaseAll()) }
    }

    private func timerFired(generation: Int) {
        let runs = lock.withLock { takeAll(machine.timerFired(generation: generation)) }
        for run in runs { run.batchReleased(index: interceptorIndex) }
    }

    private func takeAll(_ ids: [URLTask.ID]) -> [TaskStorage] {
        ids.compactMap { members.removeValue(forKey: $0) }
    }
}
