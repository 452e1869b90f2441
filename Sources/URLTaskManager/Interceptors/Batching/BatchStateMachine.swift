/// The batch of tasks one interceptor holds, without I/O.
///
/// Tasks join with an optional deadline ("release me no later than"). The batch keeps the
/// earliest deadline of its members and asks for a timer whenever that deadline moves
/// earlier; a timer that fires for an outdated generation is ignored, so no timer ever needs
/// cancelling. A release empties the batch and returns its members in arrival order.
///
/// A flush releases the members and also every task whose interceptor was deciding while
/// it happened: such a task's hold lands after the flush, and is released at once instead
/// of waiting for a release that was meant to include it.
struct BatchStateMachine {
    enum HoldAction: Equatable {
        case none
        case armTimer(deadline: ContinuousClock.Instant, generation: Int)
        /// Release this task at once: the batch was flushed while it was deciding to join.
        case releaseNow
    }

    private enum State {
        case empty
        case holding(members: [URLTask.ID], earliestDeadline: ContinuousClock.Instant?)
    }

    private var state: State = .empty
    /// Bumped on every change of the earliest deadline and on every release.
    private var generation = 0
    /// How many times the batch was flushed.
    private(set) var flushes = 0

    var count: Int {
        if case .holding(let members, _) = state { return members.count }
        return 0
    }

    /// - Parameter flushesSeen: ``flushes`` when the task's interceptor began deciding, if known.
    mutating func hold(_ id: URLTask.ID, deadline: ContinuousClock.Instant?, flushesSeen: Int? = nil) -> HoldAction {
        if let flushesSeen, flushesSeen != flushes { return .releaseNow }
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

    /// Releases every member, and (see ``hold(_:deadline:flushesSeen:)``) every task that is
    /// deciding to join right now.
    mutating func flush() -> [URLTask.ID] {
        flushes += 1
        return releaseAll()
    }

    /// A member left (cancelled, timed out). Returns whether it was here.
    mutating func remove(_ id: URLTask.ID) -> Bool {
        guard case .holding(var members, let earliest) = state, let index = members.firstIndex(of: id) else { return false }
        members.remove(at: index)
        if members.isEmpty {
            state = .empty
            generation += 1  // its timer must not release the next batch
        } else {
            state = .holding(members: members, earliestDeadline: earliest)
        }
        return true
    }

    mutating func timerFired(generation fired: Int) -> [URLTask.ID] {
        guard fired == generation else { return [] }
        return releaseAll()
    }
}
