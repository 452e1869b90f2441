import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One manager's shared transfers (`CoalescingInterceptor`): its
/// ``SharedTransferStateMachine`` under a lock, each task's ``TransferSubscription``, and the
/// fan-out of every transfer's events to the tasks listening to it.
///
/// Sharing happens at the send, after every interceptor and every gate: each caller's task is
/// an ordinary task to every other part (its own policy, reactors, validation, events and
/// cancellation); only the bytes on the wire are shared. Nothing is started, stopped or handed
/// on while the lock is held.
final class SharedTransfers: Sendable {
    typealias Machine = SharedTransferStateMachine<SharingKey>
    typealias Transfer = Machine.Transfer

    /// What is known of one transfer beyond who listens.
    private struct Record {
        /// The task that sent it, and the headers it sent (what a `Vary` is judged against).
        let leader: URLTask.ID
        var sentHeaders: [String: String]
        let method: String
        var inner: (any TransferHandle)?
        var status = 0
        var bytes = 0
        /// The answer so far, kept for a request that joins after it began (while the machine
        /// says the transfer is replayable).
        var head: URLResponse?
        var chunks: [Data] = []
        /// Who still has to answer the redirect the transfer waits on, and the transfer's own answer.
        var redirect: (waiting: Set<Machine.Subscriber>, decide: @Sendable (URLRequest?) -> Void)?
    }

    /// How a task arrived.
    private enum Arrival {
        /// It sends; `events` is what the inner task must report to.
        case lead(TransferSubscription, events: any TransportEvents)
        /// It listens to the transfer `leader` sent.
        case join(TransferSubscription, leader: URLTask.ID)
        /// The answer already under way may not be shared with it (its `Vary`): it sends its
        /// own request, outside sharing.
        case alone
    }

    let configuration: TransferSharing.Configuration
    /// What makes two requests identical, worked out once from `configuration`.
    let rules: SharingRules
    /// The inner session's cookies, which a request's wire headers include (``WireHeaders``).
    let cookies: CookieJar
    /// The inner session's `timeoutIntervalForRequest`: a request's timeout where it sets none.
    let sessionTimeout: TimeInterval
    /// Where the listeners' idle timers run.
    let runtime: any PipelineRuntime
    let decisions: DecisionEvents<TransferSharing.Event>

    /// The timeout a shared transfer's request is sent with (about 31 years): none, in effect.
    /// With the sender's own, the transfer would fail for every listener when the sender's time
    /// ran out, and a caller with a longer `timeoutInterval` could never share it. Each listener,
    /// the sender included, is timed by its own timeout instead (``TransferSubscription``); the
    /// last one to leave stops the transfer. Finite: corelibs converts it to whole milliseconds.
    static let innerTimeout: TimeInterval = 1_000_000_000

    /// The machine, and what the storage keeps beside it for each subscriber and transfer.
    private struct State {
        var machine = Machine()
        var subscriptions: [Machine.Subscriber: TransferSubscription] = [:]
        var records: [Transfer: Record] = [:]
        var lastSubscriber: UInt64 = 0

        /// `subscriber` answered (or left) the redirect `transfer` waits on; returns the
        /// transfer's own decision to call, once the lock is released, when nobody else has to answer.
        mutating func redirectAnswered(_ transfer: Transfer, by subscriber: Machine.Subscriber) -> (@Sendable (URLRequest?) -> Void)? {
            guard var pending = records[transfer]?.redirect, pending.waiting.remove(subscriber) != nil else { return nil }
            if pending.waiting.isEmpty {
                records[transfer]?.redirect = nil
                return pending.decide
            }
            records[transfer]?.redirect = pending
            return nil
        }
    }

    private let state = LockedState(State())

    init(
        configuration: TransferSharing.Configuration, cookies: CookieJar, sessionTimeout: TimeInterval = 60,
        runtime: any PipelineRuntime, decisions: DecisionEvents<TransferSharing.Event>
    ) {
        self.configuration = configuration
        self.rules = SharingRules(configuration)
        self.cookies = cookies
        self.sessionTimeout = sessionTimeout
        self.runtime = runtime
        self.decisions = decisions
    }

    /// Transfers that can still be joined or are being answered.
    var transferCount: Int { state.withLock { $0.machine.transferCount } }

    /// A task is about to send `share.request`: it leads a new transfer or joins one on its way.
    /// The caller announces the role, then calls ``TransferSubscription/goLive()``.
    private func arrive(_ share: TransferShare, events: any TransportEvents, starter: any SharedTransferStarter) -> Arrival {
        let idleTimeout = Platform.idleTimeout(of: share.request, sessionDefault: sessionTimeout)
        let runtime = runtime
        let arrival: Arrival = state.withLock { state in
            state.lastSubscriber += 1
            let subscriber = Machine.Subscriber(rawValue: state.lastSubscriber)
            switch state.machine.arrived(subscriber, key: share.key) {
            case .lead(let transfer):
                let subscription = TransferSubscription(
                    subscriber: subscriber, transfer: transfer, share: share, events: events, live: false,
                    idleTimeout: idleTimeout, runtime: runtime)
                state.subscriptions[subscriber] = subscription
                state.records[transfer] = Record(leader: share.task, sentHeaders: share.wire.fields, method: share.key.method)
                return .lead(subscription, events: FanOut(transfer: transfer, storage: self, starter: starter))
            case .join(let transfer, let replay):
                guard let record = state.records[transfer] else { preconditionFailure("a joinable transfer has a record") }
                if replay, let http = record.head as? HTTPURLResponse,
                    !Self.mayShare(http, sentHeaders: record.sentHeaders, with: share.wire)
                {
                    // Others listen, so leaving never stops the transfer here.
                    _ = state.machine.left(subscriber, of: transfer)
                    return .alone
                }
                // The answer so far, queued before it can hear anything live (it is not live
                // yet, so nothing is handed on here, under the lock), and made part of the new
                // subscription (whose lock is not taken under this one).
                var replayed: [TransferSubscription.Delivery] = []
                if replay, let head = record.head {
                    replayed.append(.response(head))
                    replayed += record.chunks.map { .data($0) }
                }
                let subscription = TransferSubscription(
                    subscriber: subscriber, transfer: transfer, share: share, events: events, live: false, queued: replayed,
                    idleTimeout: idleTimeout, runtime: runtime)
                state.subscriptions[subscriber] = subscription
                return .join(subscription, leader: record.leader)
            }
        }
        switch arrival {
        case .lead:
            decisions.emit(.started(task: share.task, method: share.key.method, url: URLTaskEvent.redacted(share.request.url)))
        case .join:
            decisions.emit(.joined(task: share.task, method: share.key.method, url: URLTaskEvent.redacted(share.request.url)))
        case .alone:
            decisions.emit(.notShared(tasks: [share.task], reason: "the answer under way varies on a header this request does not share"))
        }
        return arrival
    }

    /// Starts `share`'s transfer: it joins an identical one on its way, or sends, its inner task
    /// made by `startInner` with the request to send and the events it must report to. The task's
    /// role is announced before any of the transfer's events reach it. Returns what the task
    /// keeps as its transfer.
    func start(
        _ share: TransferShare, events: any TransportEvents, starter: any SharedTransferStarter,
        startInner: (URLRequest, any TransportEvents) -> any TransferHandle
    ) -> any TransferHandle {
        switch arrive(share, events: events, starter: starter) {
        case .alone:
            share.announce(.sends)
            return startInner(share.request, events)
        case .join(let subscription, let leader):
            share.announce(.joins(leader: leader))
            watchIdleness(of: subscription, starter: starter)
            subscription.goLive()
            return subscription
        case .lead(let subscription, let fanOut):
            share.announce(.sends)
            // Without the sender's timeout: each listener keeps its own (``innerTimeout``).
            var request = share.request
            request.timeoutInterval = Self.innerTimeout
            let inner = startInner(request, fanOut)
            if started(subscription.transfer, inner: inner, predicted: share.wire) { starter.stopTransfer(inner) }
            watchIdleness(of: subscription, starter: starter)
            subscription.goLive()
            return subscription
        }
    }

    /// Times `subscription` by its own timeout: when it passes, the task leaves the transfer with
    /// the error the inner session would have failed its own request with; the transfer goes on
    /// for the others, and is stopped if nobody else listens.
    private func watchIdleness(of subscription: TransferSubscription, starter: any SharedTransferStarter) {
        subscription.watchIdleness { [weak self, weak starter] in
            guard let self else { return }
            let (listening, inner, decide): (Bool, (any TransferHandle)?, (@Sendable (URLRequest?) -> Void)?) = state.withLock {
                state in
                // Answered, stopped or sent alone meanwhile: its own end reaches it.
                guard state.subscriptions.removeValue(forKey: subscription.subscriber) != nil else { return (false, nil, nil) }
                let action = state.machine.left(subscription.subscriber, of: subscription.transfer)
                let decide = state.redirectAnswered(subscription.transfer, by: subscription.subscriber)
                var inner: (any TransferHandle)?
                if action == .cancelTransfer { inner = state.records.removeValue(forKey: subscription.transfer)?.inner }
                return (true, inner, decide)
            }
            guard listening else { return }
            decide?(nil)
            decisions.emit(.left(task: subscription.task, sharedCancelled: inner != nil))
            subscription.deliver(.complete(Platform.idleTimeoutError(url: subscription.request.url)))
            if let inner { starter?.stopTransfer(inner) }
        }
    }

    /// The inner task of `transfer` exists: returns `true` if it must be stopped at once
    /// (everybody left meanwhile).
    ///
    /// The session put the stored cookies on the request as it made the task; if the storage
    /// changed between the key and that moment, the `Cookie` sent is not the one `predicted`. The
    /// record then holds the one sent, so that no listener whose own differs is handed the answer
    /// (each is judged by ``mayShare(_:sentHeaders:with:)`` as the answer begins).
    private func started(_ transfer: Transfer, inner: any TransferHandle, predicted: WireHeaders) -> Bool {
        var sentCookie: String??
        if let task = inner as? URLSessionTask, case .sent(let cookie) = Platform.cookieHeaderSent(by: task),
            cookie != predicted.fields["cookie"]
        {
            sentCookie = .some(cookie)
        }
        return state.withLock { state in
            state.records[transfer]?.inner = inner
            if let sentCookie { state.records[transfer]?.sentHeaders["cookie"] = sentCookie }
            return state.machine.started(transfer) == .cancel
        }
    }

    /// The task of `subscription` stops listening (its caller cancelled, or the manager aborted
    /// it). Returns the transfers to stop: the shared one if nobody else listens, and the task's
    /// own if its request had been sent alone.
    func stop(_ subscription: TransferSubscription) -> [any TransferHandle] {
        var stops: [any TransferHandle] = []
        if let alone = subscription.stop() { stops.append(alone) }
        let (action, inner, decide): (Machine.LeaveAction, (any TransferHandle)?, (@Sendable (URLRequest?) -> Void)?) = state.withLock {
            state in
            state.subscriptions[subscription.subscriber] = nil
            let action = state.machine.left(subscription.subscriber, of: subscription.transfer)
            let decide = state.redirectAnswered(subscription.transfer, by: subscription.subscriber)
            var inner: (any TransferHandle)?
            if action == .cancelTransfer { inner = state.records.removeValue(forKey: subscription.transfer)?.inner }
            return (action, inner, decide)
        }
        decide?(nil)
        if action != .none { decisions.emit(.left(task: subscription.task, sharedCancelled: action == .cancelTransfer)) }
        if let inner { stops.append(inner) }
        return stops
    }

    // MARK: The transfer's events (from the inner session's delegate queue)

    /// The answer's head: nobody joins from now on; a task the answer may not be shared with
    /// (its `Vary`) is returned, to be sent alone.
    fileprivate func answerBegan(
        _ transfer: Transfer, response: URLResponse
    ) -> (separated: [TransferSubscription], stop: (any TransferHandle)?) {
        let http = response as? HTTPURLResponse
        // What came so far is kept for late listeners only while it may stay small.
        let limit = configuration.lateJoinLimit
        let replayable = limit > 0 && (response.expectedContentLength < 0 || response.expectedContentLength <= Int64(limit))
        let (listening, separated, inner): ([TransferSubscription], [TransferSubscription], (any TransferHandle)?) = state.withLock {
            state in
            let subscribers = state.machine.answerBegan(transfer, replayable: replayable)
            guard var record = state.records[transfer] else { return ([], [], nil) }
            record.status = http?.statusCode ?? 0
            if replayable { record.head = response }
            state.records[transfer] = record
            var listening: [TransferSubscription] = []
            var separated: [TransferSubscription] = []
            for subscriber in subscribers {
                guard let subscription = state.subscriptions[subscriber] else { continue }
                if subscription.task != record.leader, let http,
                    !Self.mayShare(http, sentHeaders: record.sentHeaders, with: subscription.wire)
                {
                    separated.append(subscription)
                } else {
                    listening.append(subscription)
                }
            }
            var inner: (any TransferHandle)?
            for subscription in separated {
                state.subscriptions[subscription.subscriber] = nil
                if state.machine.left(subscription.subscriber, of: transfer) == .cancelTransfer {
                    inner = state.records.removeValue(forKey: transfer)?.inner
                }
            }
            return (listening, separated, inner)
        }
        if !separated.isEmpty {
            decisions.emit(.notShared(tasks: separated.map(\.task), reason: "the answer varies on a header these requests do not share"))
        }
        for subscription in listening { subscription.deliver(.response(response)) }
        return (separated, inner)
    }

    fileprivate func received(_ transfer: Transfer, data: Data) {
        let limit = configuration.lateJoinLimit
        let listening: [TransferSubscription] = state.withLock { state in
            guard var record = state.records[transfer] else { return [] }
            record.bytes += data.count
            if state.machine.isReplayable(transfer) {
                if record.bytes <= limit {
                    record.chunks.append(data)
                } else {
                    state.machine.stopReplaying(transfer)
                    record.chunks = []
                    record.head = nil
                }
            }
            state.records[transfer] = record
            return state.machine.subscribers(of: transfer).compactMap { state.subscriptions[$0] }
        }
        for subscription in listening { subscription.deliver(.data(data)) }
    }

    fileprivate func completed(_ transfer: Transfer, error: (any Error)?) {
        let (listening, record): ([TransferSubscription], Record?) = state.withLock { state in
            let listening = state.machine.completed(transfer).compactMap { state.subscriptions.removeValue(forKey: $0) }
            return (listening, state.records.removeValue(forKey: transfer))
        }
        guard !listening.isEmpty else { return }
        if let error {
            decisions.emit(.failed(tasks: listening.map(\.task), error: error))
        } else {
            decisions.emit(.answered(tasks: listening.map(\.task), status: record?.status ?? 0, bodyBytes: record?.bytes ?? 0))
        }
        for subscription in listening { subscription.deliver(.complete(error)) }
    }

    fileprivate func redirect(
        _ transfer: Transfer, response: HTTPURLResponse, to request: URLRequest, decide: @escaping @Sendable (URLRequest?) -> Void
    ) {
        // The head of a redirect is the start of the answer too: nobody joins from now on.
        let listening: [TransferSubscription] = state.withLock { state in
            let subscribers = state.machine.answerBegan(transfer, replayable: false)
            let listening = subscribers.compactMap { state.subscriptions[$0] }
            state.records[transfer]?.redirect = (Set(listening.map(\.subscriber)), decide)
            return listening
        }
        // Each task decides through its own delegate; the transfer goes on when all have.
        guard !listening.isEmpty else { return decide(nil) }
        for subscription in listening {
            subscription.deliver(
                .redirect(
                    response, request,
                    decide: { [self] _ in
                        let answer = state.withLock { $0.redirectAnswered(transfer, by: subscription.subscriber) }
                        answer?(nil)
                    }))
        }
    }

    // MARK: Whether an answer may be shared

    /// Whether `response`, answering a request sent with `sentHeaders`, may be handed to a task
    /// whose own request goes on the wire with `wire`: never if it varies (`Vary`) on a header
    /// whose value differs between the two (`Vary: *` on any), nor if their credentials differ
    /// (``WireHeaders/isCredential(_:)``: their keys tell such requests apart, so this holds when
    /// the session's cookie storage changed between a key and its send), whatever the answer's
    /// `Cache-Control` says.
    static func mayShare(_ response: HTTPURLResponse, sentHeaders: [String: String], with wire: WireHeaders) -> Bool {
        let own = wire.fields
        if let vary = response.value(forHTTPHeaderField: "Vary") {
            for name in vary.split(separator: ",") {
                let field = name.trimmingCharacters(in: .whitespaces).lowercased()
                if field.isEmpty { continue }
                if field == "*" || own[field] != sentHeaders[field] { return false }
            }
        }
        for (name, value) in own where sentHeaders[name] != value && WireHeaders.isCredential(name) { return false }
        for name in sentHeaders.keys where own[name] == nil && WireHeaders.isCredential(name) { return false }
        return true
    }

    /// What the inner task of one shared transfer reports to: every event goes to every task
    /// listening, in order (the inner session's delegate queue is serial).
    private final class FanOut: TransportEvents, Sendable {
        let transfer: Transfer
        let storage: SharedTransfers
        let starter: any SharedTransferStarter

        init(transfer: Transfer, storage: SharedTransfers, starter: any SharedTransferStarter) {
            self.transfer = transfer
            self.storage = storage
            self.starter = starter
        }

        func transportDidReceive(response: URLResponse) {
            let (separated, stop) = storage.answerBegan(transfer, response: response)
            if let stop { starter.stopTransfer(stop) }
            for subscription in separated { starter.sendAlone(subscription) }
        }

        func transportDidReceive(data: Data) {
            storage.received(transfer, data: data)
        }

        func transportDidComplete(error: (any Error)?) {
            storage.completed(transfer, error: error)
        }

        func transportDidSendBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {}

        func transportWillRedirect(_ response: HTTPURLResponse, to request: URLRequest, decide: @escaping @Sendable (URLRequest?) -> Void) {
            storage.redirect(transfer, response: response, to: request, decide: decide)
        }
    }
}

/// Who starts and stops the inner tasks of shared transfers: the pipeline.
protocol SharedTransferStarter: AnyObject, Sendable {
    /// Sends the request of a task the answer may not be shared with, on its own.
    func sendAlone(_ subscription: TransferSubscription)
    /// Stops an inner task.
    func stopTransfer(_ transfer: any TransferHandle)
}
