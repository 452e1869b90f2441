/// Which task may go to the network, and when, for one manager, without I/O.
///
/// Admission is everything between a task's interceptors and its transfer that depends on
/// other tasks: the reactors' runs and their gates, the credential stamp each task's headers
/// were decided under, the check that those headers are still current when the task is about
/// to leave, and the per-host connection slots. It is one machine, under one lock, so a check
/// and the act it allows are one transition (no window in which a refresh can start between
/// "no refresh is running" and "the request is handed to URLSession").
///
/// **Coverage.** A reactor touches only the tasks it does not exempt
/// (``URLTaskReactorConfiguration/exempts``): its runs gate them, its stamps and failures
/// judge them, and only they count for it. A task is *covered* by the reactors that hold new
/// tasks and do not exempt it; it takes a connection slot only when some reactor covers it.
/// With two backends, one backend's failed refresh never fails the other backend's requests.
///
/// **Credential stamps.** Each reactor counts its successful runs (its version: the credential
/// version) and its failed runs. When a task's headers are decided it records both, per
/// reactor (``ReactorRunStateMachine/Stamp``). When it is about to be sent:
/// - a covering reactor's run is going: the task waits at its gate, then is intercepted again;
/// - a covering reactor's run succeeded since: its headers are stale, it is intercepted again;
/// - only failed runs ended since: it fails with that run's error, as it would on the network.
///
/// **Accepted answers.** When a task's transfer ends with an answer no reactor needed, each
/// loop-guarded reactor it is stamped for hears of it (``ReactorRunStateMachine/outcomeAccepted(sentUnder:)``):
/// its loop guard counts only runs whose product was never accepted.
///
/// Events return actions for the tasks they decide; the ``Engine`` turns them into the tasks'
/// actions in the same section, and ``EngineStorage`` performs them with its lock released.
struct AdmissionStateMachine {
    typealias TaskID = URLTask.ID

    /// What happens to a task that wants to be sent, or that was waiting for a slot.
    enum SendAction: Equatable {
        /// Send it now (it holds its host's slot if it needs one).
        case send
        /// Every slot of its host is taken: it waits. A timer for generation `generation` bounds
        /// the wait by the request's timeout (``slotWaitExpired(_:generation:)``).
        case waitForSlot(generation: Int)
        /// A covering reactor's run is going: it waits at that reactor's gate.
        case waitAtGate(reactor: Int)
        /// Its headers predate a successful run of a covering reactor: intercept it again.
        case reintercept
        /// Its headers predate only failed runs of covering reactor `reactor`: fail it with that
        /// run's error.
        case fail(reactor: Int)
    }

    /// What happens to a task whose headers are about to be decided (its interceptors begin).
    enum DecideAction: Equatable {
        /// Go on: its stamps are recorded.
        case proceed
        /// A covering reactor's run is going: it waits at that reactor's gate.
        case waitAtGate(reactor: Int)
    }

    private enum Slot: Equatable {
        case none
        case waiting(host: String, generation: Int)
        case holding(host: String)
    }

    private struct Record {
        /// Reactors that do not exempt the task: their stamps are recorded for it.
        var relevant: [Int]
        /// Relevant reactors that hold new tasks: their gates, stamps and failures judge it.
        var covering: [Int]
        /// Stamps by reactor, taken when its headers were last decided.
        var stamps: [Int: ReactorRunStateMachine.Stamp] = [:]
        var slot = Slot.none
        /// Whether it goes through the per-host queue.
        var usesSlots: Bool { !covering.isEmpty }
    }

    private(set) var reactors: [ReactorRunStateMachine]
    private let holdsNewTasks: [Bool]
    /// Whether any reactor has a loop guard: only then does an accepted answer need a look.
    private let guardsLoops: Bool
    private var slots: ConnectionSlotsStateMachine?
    private var records: [TaskID: Record] = [:]
    private var slotGeneration = 0

    /// - Parameters:
    ///   - reactors: Each reactor's mode: its loop guard, and whether it holds new tasks
    ///     (``URLTaskReactorConfiguration/Mode/refresh(loopGuard:)``).
    ///   - slotsPerHost: Requests per host handed to the transport at once for covered tasks;
    ///     `nil` for no limit.
    init(reactors: [URLTaskReactorConfiguration.Mode], slotsPerHost: Int?) {
        self.reactors = reactors.map { ReactorRunStateMachine(loopGuard: $0.loopGuard) }
        self.holdsNewTasks = reactors.map(\.holdsNewTasks)
        self.guardsLoops = self.reactors.contains(where: \.guardsLoops)
        self.slots = slotsPerHost.map(ConnectionSlotsStateMachine.init(limit:))
    }

    /// Tasks admission knows (registered and not finished).
    var taskCount: Int { records.count }
    /// How many tasks the table has room for (for tests: a burst's room goes back after it).
    var taskRoom: Int { records.capacity }
    /// ``ConnectionSlotsStateMachine/hostRoom``, 0 without slots.
    var hostRoom: Int { slots?.hostRoom ?? 0 }
    /// Hosts with a request in flight or waiting.
    var busyHosts: Int { slots?.busyHosts ?? 0 }
    /// Tasks waiting for a slot.
    var waitingForSlot: Int { records.values.filter { if case .waiting = $0.slot { true } else { false } }.count }

    // MARK: Task events

    /// A task enters the pipeline. `exemptedBy` says, per reactor, whether that reactor exempts it.
    mutating func register(_ id: TaskID, exemptedBy: [Bool]) {
        precondition(exemptedBy.count == reactors.count)
        let relevant = reactors.indices.filter { !exemptedBy[$0] }
        let covering = relevant.filter { holdsNewTasks[$0] }
        assert(records[id] == nil, "task \(id) registered twice")
        records[id] = Record(relevant: relevant, covering: covering)
    }

    /// The version (successful runs) of each reactor the task's headers were last stamped
    /// under, by reactor index: what its events report.
    func stampedVersions(_ id: TaskID) -> [Int: Int] {
        records[id]?.stamps.mapValues(\.version) ?? [:]
    }

    /// The task's interceptors are about to run (first time, or again after a requeue).
    mutating func headersWillBeDecided(_ id: TaskID) -> DecideAction {
        guard let found = records[id] else { return .proceed }
        if let reactor = gatingReactor(for: id, found) { return .waitAtGate(reactor: reactor) }
        // In place: the record's stamps stay uniquely referenced (no copy on every attempt).
        for reactor in found.relevant { records[id]!.stamps[reactor] = reactors[reactor].stamp }
        return .proceed
    }

    /// The task is ready to leave for `host`.
    /// - Parameters:
    ///   - restamp: Its headers were not decided by the interceptors this attempt (a requeue
    ///     without them): they are stamped now instead of judged.
    ///   - reported: By reactor index, what the covering reactors that keep a credential version
    ///     of their own reported of the task as it is about to leave: recorded in its stamps
    ///     (a slot handed over later judges it by them) and judged with them.
    mutating func wantsToSend(
        _ id: TaskID, host: String, restamp: Bool, reported: [Int: ReactorRunStateMachine.ReportedVersion] = [:]
    ) -> SendAction {
        guard let found = records[id] else { return .send }
        if case .holding = found.slot {
            assertionFailure("task \(id) wants to send before its previous transfer gave its slot back")
        }
        if restamp {
            if let reactor = gatingReactor(for: id, found) { return .waitAtGate(reactor: reactor) }
            // In place: the record's stamps stay uniquely referenced (no copy on every send).
            for reactor in found.relevant { records[id]!.stamps[reactor] = reactors[reactor].stamp }
        }
        record(reported, of: id)
        let action = judge(id, records[id]!)
        guard action == .send else { return action }
        return acquireSlot(id, host: host)
    }

    /// Task `id` was handed a slot on another task's event, and has read what its covering
    /// reactors report since (their code runs outside the lock): it is judged again with those
    /// readings, holding the slot. If it may not go after all, the slot passes on.
    mutating func slotHandedOver(
        _ id: TaskID, reported: [Int: ReactorRunStateMachine.ReportedVersion]
    ) -> (SendAction, handedOver: [(TaskID, SendAction)]) {
        guard let found = records[id], case .holding(let host) = found.slot else { return (.send, []) }
        record(reported, of: id)
        let action = judge(id, records[id]!)
        guard action != .send else { return (.send, []) }
        records[id]!.slot = .none
        return (action, handOver(host: host))
    }

    /// The task's transfer ended (or it was not sent after all, or it completed): its slot, if
    /// it held one, goes to the next task waiting for that host. Returns what that task does.
    /// - Parameter answered: The transfer ended with an answer that no reactor needed (the
    ///   caller gets it as is): each loop-guarded reactor whose current version the task's
    ///   headers were decided under counts it as accepted
    ///   (``ReactorRunStateMachine/outcomeAccepted(sentUnder:)``).
    mutating func transferEnded(_ id: TaskID, answered: Bool = false) -> [(TaskID, SendAction)] {
        guard let record = records[id] else { return [] }
        if answered, guardsLoops {
            for reactor in record.relevant {
                guard let stamp = record.stamps[reactor] else { continue }
                reactors[reactor].outcomeAccepted(sentUnder: stamp)
            }
        }
        guard case .holding(let host) = record.slot else { return [] }
        records[id]!.slot = .none
        return handOver(host: host)
    }

    /// The task completed or was cancelled: it leaves every queue, and its slot is handed over.
    mutating func finished(_ id: TaskID) -> [(TaskID, SendAction)] {
        guard let record = records.removeValueShrinking(forKey: id) else { return [] }
        for reactor in reactors.indices { _ = reactors[reactor].remove(id) }
        switch record.slot {
        case .none:
            return []
        case .waiting(let host, _):
            _ = slots?.remove(id, host: host)
            return []
        case .holding(let host):
            return handOver(host: host)
        }
    }

    /// The timer of a slot wait fired. Returns `true` if the task still waits in that
    /// generation: it leaves the queue and fails with `URLError.timedOut`.
    mutating func slotWaitExpired(_ id: TaskID, generation: Int) -> Bool {
        guard var record = records[id], case .waiting(let host, generation) = record.slot else { return false }
        _ = slots?.remove(id, host: host)
        record.slot = .none
        records[id] = record
        return true
    }

    // MARK: Reactor events

    /// The task's transfer ended with an outcome that needs single-flight reactor `reactor` (see
    /// ``ReactorRunStateMachine/taskNeedsReaction(_:sentUnder:alreadyRequeued:now:)``), judged
    /// against the stamp its headers were decided under. One transition: the run is started or
    /// joined before the task's slot is handed over, so the task that gets the slot finds the
    /// run going and waits instead of leaving with a stale token; and the slot is free before
    /// the task can be sent again.
    /// - Parameter reported: What the reactor reported of the task as sent, if it keeps a
    ///   credential version of its own.
    mutating func transferEndedNeedingReaction(
        _ id: TaskID, reactor: Int, alreadyRequeued: Bool, reported: ReactorRunStateMachine.ReportedVersion? = nil,
        now: ContinuousClock.Instant
    ) -> (need: ReactorRunStateMachine.NeedAction, handedOver: [(TaskID, SendAction)]) {
        let stamp = records[id]?.stamps[reactor] ?? ReactorRunStateMachine.Stamp()
        let need = reactors[reactor].taskNeedsReaction(
            id, sentUnder: stamp, alreadyRequeued: alreadyRequeued, reported: reported, now: now)
        return (need, transferEnded(id))
    }

    /// Run `run` of reactor `reactor` ended.
    mutating func runFinished(reactor: Int, run: Int, succeeded: Bool) -> ReactorRunStateMachine.RunEnd? {
        reactors[reactor].runFinished(run: run, succeeded: succeeded)
    }

    /// The stamp task `id`'s headers were decided under for `reactor` (for tests and the model).
    func stamp(of id: TaskID, reactor: Int) -> ReactorRunStateMachine.Stamp? { records[id]?.stamps[reactor] }

    /// The reactors covering task `id`.
    func covering(_ id: TaskID) -> [Int] { records[id]?.covering ?? [] }

    /// Whether reactor `reactor` covers task `id` (for tests and the model).
    func covers(_ id: TaskID, reactor: Int) -> Bool { records[id]?.covering.contains(reactor) ?? false }

    // MARK: Internals

    /// Records in task `id`'s stamps what its reactors reported (``ReactorRunStateMachine/record(_:in:)``).
    private mutating func record(_ reported: [Int: ReactorRunStateMachine.ReportedVersion], of id: TaskID) {
        for (reactor, reading) in reported {
            let stamp = records[id]!.stamps[reactor] ?? ReactorRunStateMachine.Stamp()
            records[id]!.stamps[reactor] = reactors[reactor].record(reading, in: stamp)
        }
    }

    /// A covering reactor whose run is going, after recording the task at its gate.
    private mutating func gatingReactor(for id: TaskID, _ record: Record) -> Int? {
        for reactor in record.covering where reactors[reactor].gate(id) {
            return reactor
        }
        return nil
    }

    /// Whether headers stamped in `record` may still be sent: each covering reactor's
    /// ``ReactorRunStateMachine/lateness(of:)`` decides; a success anywhere wins over failures.
    private mutating func judge(_ id: TaskID, _ record: Record) -> SendAction {
        if let reactor = gatingReactor(for: id, record) { return .waitAtGate(reactor: reactor) }
        var failed: Int?
        for reactor in record.covering {
            switch reactors[reactor].lateness(of: record.stamps[reactor] ?? ReactorRunStateMachine.Stamp()) {
            case .succeededSince: return .reintercept
            case .failedSince: failed = failed ?? reactor
            case .current: break
            }
        }
        return failed.map { .fail(reactor: $0) } ?? .send
    }

    private mutating func acquireSlot(_ id: TaskID, host: String) -> SendAction {
        guard var record = records[id], record.usesSlots, slots != nil else { return .send }
        switch slots!.acquire(id, host: host) {
        case .send:
            record.slot = .holding(host: host)
            records[id] = record
            return .send
        case .wait:
            slotGeneration += 1
            record.slot = .waiting(host: host, generation: slotGeneration)
            records[id] = record
            return .waitForSlot(generation: slotGeneration)
        }
    }

    /// A slot of `host` is free: the first waiting task takes it and is judged again; if it may
    /// not go after all, the slot passes on.
    private mutating func handOver(host: String) -> [(TaskID, SendAction)] {
        var decided: [(TaskID, SendAction)] = []
        while let next = slots?.release(host: host) {
            guard var record = records[next] else { continue }
            record.slot = .holding(host: host)
            records[next] = record
            let action = judge(next, record)
            decided.append((next, action))
            if action == .send { break }
            record.slot = .none
            records[next] = record
        }
        return decided
    }
}
