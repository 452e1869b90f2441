/// Which transfers identical requests may share, and who listens to each: pure, no locks, no I/O.
///
/// ```
///  arrived(key) ──none joinable──> awaitingAnswer(key, [s]) ──answerBegan──> answering(key, [...], replayable)
///       └──one is joinable──> join it (replayed what came so far if it is answering)   │ stopReplaying
///  all left before the inner task exists: abandoned (stopped as it starts)             v
///  any state ──completed──> gone (its subscribers hear the end)          answering(..., not replayable)
/// ```
/// A transfer is joinable until its answer begins, and after that for as long as what came so
/// far can be handed to a late listener (the storage keeps it up to a limit, and says when it no
/// longer does). A subscriber that leaves (its caller cancelled) never stops the transfer while
/// another listens; the last one to leave stops it, or, before the inner task exists, has it
/// stopped as it starts.
struct SharedTransferStateMachine<Key: Hashable> {
    /// One task's place on a transfer.
    struct Subscriber: Hashable, Sendable {
        let rawValue: UInt64
    }

    /// One transfer on the wire.
    struct Transfer: Hashable, Sendable {
        let rawValue: UInt64
    }

    private enum State {
        /// No answer yet; identical requests may join. `started`: the inner task's creation was
        /// reported.
        case awaitingAnswer(key: Key, subscribers: [Subscriber], started: Bool)
        /// The answer has begun (it may begin before the creation is reported). While
        /// `replayable`, a late identical request may still join: it is handed what came so far.
        case answering(key: Key, subscribers: [Subscriber], started: Bool, replayable: Bool)
        /// Every subscriber left before the inner task's creation was reported: stop it then.
        case abandoned
    }

    private var transfers: [Transfer: State] = [:]
    private var joinableByKey: [Key: Transfer] = [:]
    private var lastTransfer: UInt64 = 0

    /// What a subscriber's arrival does.
    enum ArriveAction: Equatable {
        /// No identical transfer is joinable: the subscriber sends, as `transfer`'s first.
        case lead(Transfer)
        /// It listens to `transfer`; `replay`: the answer has begun, hand it what came so far first.
        case join(Transfer, replay: Bool)
    }

    /// What the inner task's creation does.
    enum StartAction: Equatable {
        case none
        /// Everybody left meanwhile: stop it.
        case cancel
    }

    /// What a subscriber's departure does.
    enum LeaveAction: Equatable {
        /// It was not listening any more (the transfer had ended): an expected race.
        case none
        /// It left; others still listen, or the inner task's creation is not reported yet.
        case left
        /// It was the last: stop the transfer, nobody wants its answer.
        case cancelTransfer
    }

    /// Transfers on the wire, joinable or not.
    var transferCount: Int { transfers.count }

    mutating func arrived(_ subscriber: Subscriber, key: Key) -> ArriveAction {
        if let transfer = joinableByKey[key] {
            switch transfers[transfer] {
            case .awaitingAnswer(let key, var subscribers, let started):
                subscribers.append(subscriber)
                transfers[transfer] = .awaitingAnswer(key: key, subscribers: subscribers, started: started)
                return .join(transfer, replay: false)
            case .answering(let key, var subscribers, let started, true):
                subscribers.append(subscriber)
                transfers[transfer] = .answering(key: key, subscribers: subscribers, started: started, replayable: true)
                return .join(transfer, replay: true)
            case .answering(_, _, _, false), .abandoned, nil:
                preconditionFailure("a transfer listed as joinable is not")
            }
        }
        lastTransfer += 1
        let transfer = Transfer(rawValue: lastTransfer)
        transfers[transfer] = .awaitingAnswer(key: key, subscribers: [subscriber], started: false)
        joinableByKey[key] = transfer
        return .lead(transfer)
    }

    /// The inner task of `transfer` exists and was resumed.
    mutating func started(_ transfer: Transfer) -> StartAction {
        switch transfers[transfer] {
        case .awaitingAnswer(let key, let subscribers, false):
            transfers[transfer] = .awaitingAnswer(key: key, subscribers: subscribers, started: true)
            return .none
        case .answering(let key, let subscribers, false, let replayable):
            // Its answer began before its creation was reported.
            transfers[transfer] = .answering(key: key, subscribers: subscribers, started: true, replayable: replayable)
            return .none
        case .abandoned:
            transfers[transfer] = nil
            return .cancel
        case .awaitingAnswer(_, _, true), .answering(_, _, true, _):
            preconditionFailure("a transfer starts once")
        case nil:
            return .none  // it already ended (it failed, or the session was invalidated, as it started)
        }
    }

    /// The answer begins (a response head, or a redirect). `replayable`: a late identical request
    /// may still join, handed what came so far. Returns who listens, in arrival order (the first
    /// is the one that sent it, if it is still there).
    mutating func answerBegan(_ transfer: Transfer, replayable: Bool) -> [Subscriber] {
        switch transfers[transfer] {
        case .awaitingAnswer(let key, let subscribers, let started):
            if !replayable, joinableByKey[key] == transfer { joinableByKey[key] = nil }
            transfers[transfer] = .answering(key: key, subscribers: subscribers, started: started, replayable: replayable)
            return subscribers
        case .answering(_, let subscribers, _, _):
            return subscribers
        case .abandoned, nil:
            return []
        }
    }

    /// What came so far is no longer kept (it grew past the limit): late requests send their own.
    mutating func stopReplaying(_ transfer: Transfer) {
        guard case .answering(let key, let subscribers, let started, true) = transfers[transfer] else { return }
        if joinableByKey[key] == transfer { joinableByKey[key] = nil }
        transfers[transfer] = .answering(key: key, subscribers: subscribers, started: started, replayable: false)
    }

    /// Who listens to `transfer` now.
    func subscribers(of transfer: Transfer) -> [Subscriber] {
        switch transfers[transfer] {
        case .awaitingAnswer(_, let subscribers, _), .answering(_, let subscribers, _, _): subscribers
        case .abandoned, nil: []
        }
    }

    /// Whether a late listener could still join `transfer` (what came so far is kept for it).
    func isReplayable(_ transfer: Transfer) -> Bool {
        if case .answering(_, _, _, true) = transfers[transfer] { return true }
        return false
    }

    /// `subscriber` stops listening: its caller cancelled, or its own request must go alone.
    mutating func left(_ subscriber: Subscriber, of transfer: Transfer) -> LeaveAction {
        let key: Key
        var subscribers: [Subscriber]
        let started: Bool
        switch transfers[transfer] {
        case .awaitingAnswer(let k, let s, let st):
            (key, subscribers, started) = (k, s, st)
        case .answering(let k, let s, let st, _):
            (key, subscribers, started) = (k, s, st)
        case .abandoned, nil:
            return .none
        }
        guard let index = subscribers.firstIndex(of: subscriber) else { return .none }
        subscribers.remove(at: index)
        guard subscribers.isEmpty else {
            switch transfers[transfer] {
            case .awaitingAnswer: transfers[transfer] = .awaitingAnswer(key: key, subscribers: subscribers, started: started)
            case .answering(_, _, _, let replayable):
                transfers[transfer] = .answering(key: key, subscribers: subscribers, started: started, replayable: replayable)
            case .abandoned, nil: break
            }
            return .left
        }
        if joinableByKey[key] == transfer { joinableByKey[key] = nil }
        guard started else {
            transfers[transfer] = .abandoned
            return .left
        }
        transfers[transfer] = nil
        return .cancelTransfer
    }

    /// The transfer ended (answered, failed or stopped): returns who still listened.
    mutating func completed(_ transfer: Transfer) -> [Subscriber] {
        guard let state = transfers.removeValue(forKey: transfer) else { return [] }
        switch state {
        case .awaitingAnswer(let key, let subscribers, _), .answering(let key, let subscribers, _, _):
            if joinableByKey[key] == transfer { joinableByKey[key] = nil }
            return subscribers
        case .abandoned:
            return []  // it ended on its own: nothing to stop as its creation is reported
        }
    }
}
