/// Holds one interceptor's batch: the state machine under a lock, and the tasks it names.
final class BatchStorage: @unchecked Sendable {  // `machine` and `members` are guarded by `lock`.
    private let lock = NSLock()
    private var machine = BatchStateMachine()
    private var members: [URLTask.ID: TaskRun] = [:]
    let interceptorIndex: Int

    init(interceptorIndex: Int) {
        self.interceptorIndex = interceptorIndex
    }

    var count: Int { lock.withLock { machine.count } }

    func hold(_ run: TaskRun, maximumWait: Duration?) {
        let deadline = maximumWait.map { ContinuousClock.now.advanced(by: $0) }
        let action = lock.withLock {
            members[run.id] = run
            return machine.hold(run.id, deadline: deadline)
        }
        if case .armTimer(let deadline, let generation) = action {
            let delay = ContinuousClock.now.duration(to: deadline)
            let nanoseconds = max(0, delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000)
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: nanoseconds))) { [weak self] in
                self?.timerFired(generation: generation)
            }
        }
    }

    /// Releases every held task (and `extra`, the task that asked for the release, last).
    func release(with extra: TaskRun? = nil) {
        let runs: [TaskRun] = lock.withLock {
            if let extra { members[extra.id] = extra; _ = machine.hold(extra.id, deadline: nil) }
            return takeAll(machine.releaseAll())
        }
        for run in runs { run.batchReleased(index: interceptorIndex) }
    }

    func remove(_ run: TaskRun) {
        lock.withLock {
            if machine.remove(run.id) { members[run.id] = nil }
        }
    }

    /// Empties the batch without releasing it (the manager is going away).
    func removeAll() -> [TaskRun] {
        lock.withLock { takeAll(machine.releaseAll()) }
    }

    private func timerFired(generation: Int) {
        let runs = lock.withLock { takeAll(machine.timerFired(generation: generation)) }
        for run in runs { run.batchReleased(index: interceptorIndex) }
    }

    private func takeAll(_ ids: [URLTask.ID]) -> [TaskRun] {
        ids.compactMap { members.removeValue(forKey: $0) }
    }
}
