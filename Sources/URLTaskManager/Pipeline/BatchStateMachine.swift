/// The batch of tasks one interceptor holds, without I/O.
///
/// Tasks join with an optional deadline ("release me no later than"). The batch keeps the
/// earliest deadline of its members and asks for a timer whenever that deadline moves
/// earlier; a timer that fires for an outdated generation is ignored, so no timer ever needs
/// cancelling. A release empties the batch and returns its members in arrival order.
struct BatchStateMachine {
    enum HoldAction: Equatable {
        case none
        case armTimer(deadline: ContinuousClock.Instant, generation: Int)
    }

    private enum State {
        case empty
        case holding(members: [URLTask.ID], earliestDeadline: ContinuousClock.Instant?)
    }

    private var state: State = .empty
    /// Bumped on every change of the earliest deadline and on every release.
    private var generation = 0

    var count: Int {
        if case .holding(let members, _) = state { return members.count }
        return 0
    }

    mutating func hold(_ id: URLTask.ID, deadline: ContinuousClock.Instant?) -> HoldAction {
        switch state {
        case .empty:
            state = .holding(members: [id], earliestDeadline: deadline)
            guard let deadline else { return .none }
            generation += 1
            return .armTimer(deadline: deadline, generation: generation)
        case .holding(var members, let earliest):
            members.append(id)
            if let deadline, earliest.map({ deadline < $0 }) ?? true {
                state = .holding(members: members, earliestDeadline: deadline)
                generation += 1
                return .armTimer(deadline: deadline, generation: generation)
            }
            state = .holding(members: members, earliestDeadline: earliest)
            return .none
        }
    }

    mutating func releaseAll() -> [URLTask.ID] {
        guard case .holding(let members, _) = state else { return [] }
        state = .empty
        generation += 1
        return members
    }

    /// A member left (cancelled, timed out). Returns whether it was here.
    mutating func remove(_ id: URLTask.ID) -> Bool {
        guard case .holding(var members, let earliest) = state, let index = members.firstIndex(of: id) else { return false }
        members.remove(at: index)
        state = members.isEmpty ? .empty : .holding(members: members, earliestDeadline: earliest)
        return true
    }

    mutating func timerFired(generation fired: Int) -> [URLTask.ID] {
        guard fired == generation else { return [] }
        return releaseAll()
    }
}
