/// Which transfers identical requests may share, and who listens to each: pure, no locks, no I/O.
///
/// ```
///  arrived(key) ──no transfer joinable for key──> starting(key, [s]) ──started──> joinable(key, [s, ...])
///        └──────one is joinable──> join it        │ all left: abandoned (started: cancel)   │
///                                                 └──────────────head──────────────────────> answering([...])
///  any state ──completed──> gone (its subscribers hear the end)
/// ```
/// A transfer is joinable until its answer begins (its response head or a redirect): a
/// subscriber that joins later would have missed bytes, so it sends its own. A subscriber that
/// leaves (its caller cancelled) never stops the transfer while another listens; the last one
/// to leave stops it, or, before the inner task exists, has it stopped as it starts.
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
        /// Its inner task is being created; identical requests may join.
        case starting(key: Key, subscribers: [Subscriber])
        /// Every subscriber left before the inner task existed: stop it as it starts.
        case abandoned
        /// On the wire, no answer yet; identical requests may join.
        case joinable(key: Key, subscribers: [Subscriber])
        /// The answer has begun: nobody else joins. `started`: the inner task's creation was
        /// reported (its answer may begin before).
        case answering(subscribers: [Subscriber], started: Bool)
    }

    private var transfers: [Transfer: State] = [:]
    private var joinableByKey: [Key: Transfer] = [:]
    private var lastTransfer: UInt64 = 0

    /// What a subscriber's arrival does.
    enum ArriveAction: Equatable {
        /// No identical transfer is joinable: the subscriber sends, as `transfer`'s first.
        case lead(Transfer)
        /// It listens to `transfer`, already on its way.
        case join(Transfer)
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
        /// It left; others still listen, or the inner task does not exist yet.
        case left
        /// It was the last: stop the transfer, nobody wants its answer.
        case cancelTransfer
    }

    /// Transfers on the wire that can still be joined or are being answered.
    var transferCount: Int { transfers.count }

    mutating func arrived(_ subscriber: Subscriber, key: Key) -> ArriveAction {
        if let transfer = joinableByKey[key] {
            switch transfers[transfer] {
            case .starting(let key, var subscribers):
                subscribers.append(subscriber)
                transfers[transfer] = .starting(key: key, subscribers: subscribers)
                return .join(transfer)
            case .joinable(let key, var subscribers):
                subscribers.append(subscriber)
                transfers[transfer] = .joinable(key: key, subscribers: subscribers)
                return .join(transfer)
            case .abandoned, .answering, nil:
                preconditionFailure("a transfer listed as joinable is not")
            }
        }
        lastTransfer += 1
        let transfer = Transfer(rawValue: lastTransfer)
        transfers[transfer] = .starting(key: key, subscribers: [subscriber])
        joinableByKey[key] = transfer
        return .lead(transfer)
    }

    /// The inner task of `transfer` exists and was resumed.
    mutating func started(_ transfer: Transfer) -> StartAction {
        switch transfers[transfer] {
        case .starting(let key, let subscribers):
            transfers[transfer] = .joinable(key: key, subscribers: subscribers)
            return .none
        case .abandoned:
            transfers[transfer] = nil
            return .cancel
        case .answering(let subscribers, false):
            // Its answer began before its creation was reported.
            transfers[transfer] = .answering(subscribers: subscribers, started: true)
            return .none
        case .joinable, .answering(_, true):
            preconditionFailure("a transfer starts once")
        case nil:
            return .none  // it already ended (the session was invalidated as it started)
        }
    }

    /// The answer begins (a response head, or a redirect): nobody joins any more. Returns who
    /// listens, in arrival order (the first is the one that sent it, if it is still there).
    mutating func answerBegan(_ transfer: Transfer) -> [Subscriber] {
        switch transfers[transfer] {
        case .starting(let key, let subscribers):
            if joinableByKey[key] == transfer { joinableByKey[key] = nil }
            transfers[transfer] = .answering(subscribers: subscribers, started: false)
            return subscribers
        case .joinable(let key, let subscribers):
            if joinableByKey[key] == transfer { joinableByKey[key] = nil }
            transfers[transfer] = .answering(subscribers: subscribers, started: true)
            return subscribers
        case .answering(let subscribers, _):
            return subscribers
        case .abandoned, nil:
            return []
        }
    }

    /// Who listens to `transfer` now.
    func subscribers(of transfer: Transfer) -> [Subscriber] {
        switch transfers[transfer] {
        case .starting(_, let subscribers), .joinable(_, let subscribers), .answering(let subscribers, _): subscribers
        case .abandoned, nil: []
        }
    }

    /// `subscriber` stops listening: its caller cancelled, or its own request must go alone.
    mutating func left(_ subscriber: Subscriber, of transfer: Transfer) -> LeaveAction {
        switch transfers[transfer] {
        case .starting(let key, var subscribers):
            guard let index = subscribers.firstIndex(of: subscriber) else { return .none }
            subscribers.remove(at: index)
            if subscribers.isEmpty {
                joinableByKey[key] = nil
                transfers[transfer] = .abandoned
            } else {
                transfers[transfer] = .starting(key: key, subscribers: subscribers)
            }
            return .left
        case .joinable(let key, var subscribers):
            guard let index = subscribers.firstIndex(of: subscriber) else { return .none }
            subscribers.remove(at: index)
            if subscribers.isEmpty {
                joinableByKey[key] = nil
                transfers[transfer] = nil
                return .cancelTransfer
            }
            transfers[transfer] = .joinable(key: key, subscribers: subscribers)
            return .left
        case .answering(var subscribers, let started):
            guard let index = subscribers.firstIndex(of: subscriber) else { return .none }
            subscribers.remove(at: index)
            if subscribers.isEmpty {
                guard started else {
                    transfers[transfer] = .abandoned
                    return .left
                }
                transfers[transfer] = nil
                return .cancelTransfer
            }
            transfers[transfer] = .answering(subscribers: subscribers, started: started)
            return .left
        case .abandoned, nil:
            return .none
        }
    }

    /// The transfer ended (answered, failed or stopped): returns who still listened.
    mutating func completed(_ transfer: Transfer) -> [Subscriber] {
        guard let state = transfers.removeValue(forKey: transfer) else { return [] }
        switch state {
        case .starting(let key, let subscribers), .joinable(let key, let subscribers):
            if joinableByKey[key] == transfer { joinableByKey[key] = nil }
            return subscribers
        case .answering(let subscribers, _):
            return subscribers
        case .abandoned:
            return []  // it ended on its own: nothing to stop as its creation is reported
        }
    }
}
