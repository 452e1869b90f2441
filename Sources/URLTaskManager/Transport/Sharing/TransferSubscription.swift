import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One task's hold on a shared transfer: what its ``TaskRun`` keeps as its transfer, and
/// the queue through which the transfer's events reach it, in order, one at a time.
///
/// A task that joins a transfer already on its way announces it in its own events first; a
/// response head that arrives meanwhile waits here, so the task never hears of an answer before
/// it said whose answer it is. The queue is drained by one thread at a time, never under the lock.
/// If the answer turns out not to be shareable with this task (its `Vary`), the task's own
/// request is sent alone and its events reach the task through the same queue.
///
/// It also keeps the task's own timeout. A shared transfer is sent with no timeout of its own
/// (``SharedTransfers/innerTimeout``): the sender's would end it for listeners that are willing
/// to wait longer. Each subscription, the sender's included, is timed instead as the inner
/// session would time its own request (``PlatformSupport/idleTimeout(of:sessionDefault:)``: an
/// idle time, counted again from every head, chunk or redirect that reaches it); when it passes,
/// the task leaves the transfer with the `URLError.timedOut` the inner session gives, and the
/// transfer goes on for the others (the last to leave stops it).
final class TransferSubscription: TransferHandle, TransportEvents, Sendable {
    typealias Subscriber = SharedTransferStateMachine<SharingKey>.Subscriber
    typealias Transfer = SharedTransferStateMachine<SharingKey>.Transfer

    /// One event of the transfer, to hand on.
    enum Delivery {
        case response(URLResponse)
        case data(Data)
        case complete((any Error)?)
        case redirect(HTTPURLResponse, URLRequest, decide: @Sendable (URLRequest?) -> Void)
    }

    let subscriber: Subscriber
    let transfer: Transfer
    /// The task this subscription belongs to, as events name it.
    let task: URLTask.ID
    /// The request exactly as this task would send it: compared with the answer's `Vary`, and
    /// sent alone if the answer cannot be shared with it.
    let request: URLRequest
    /// Its headers as they go on the wire (``WireHeaders``): what an answer is judged against.
    let wire: WireHeaders
    /// Announces this task's part in its own events (``TransferShare/announce``).
    let announce: @Sendable (TransferShare.Role) -> Void
    /// How long the task may go without hearing from the transfer, or `nil` for ever.
    let idleTimeout: Duration?
    private let runtime: any PipelineRuntime

    private struct State {
        var events: (any TransportEvents)?
        var queue: [Delivery]
        var live: Bool
        var draining = false
        /// The inner task of this task's own transfer, once its request was sent alone.
        var alone: (any TransferHandle)?
        var stopped = false
        /// When the task last heard from the transfer (its arrival, a head, a chunk, a redirect).
        var lastHeard: DispatchTime
        /// The idle timer, and what it calls when the idle time passed; `idleOver` once the task
        /// no longer needs them (it ended, left, timed out, or its request went alone).
        var timer: (any PipelineTimer)?
        var expired: (@Sendable () -> Void)?
        var idleOver = false

        /// The idle timer is no longer needed: returns it, to be cancelled outside the lock.
        mutating func endIdleness() -> (any PipelineTimer)? {
            idleOver = true
            expired = nil
            defer { timer = nil }
            return timer
        }
    }

    private let state: LockedState<State>

    /// A subscription whose queue starts with `queued` (the answer so far, replayed to a task
    /// that joins late): queued here, before anyone can deliver to it, so that the storage
    /// that makes it never takes this subscription's lock under its own.
    init(
        subscriber: Subscriber, transfer: Transfer, share: TransferShare, events: any TransportEvents, live: Bool,
        queued: [Delivery] = [], idleTimeout: Duration?, runtime: any PipelineRuntime
    ) {
        self.subscriber = subscriber
        self.transfer = transfer
        self.task = share.task
        self.request = share.request
        self.wire = share.wire
        self.announce = share.announce
        self.idleTimeout = idleTimeout
        self.runtime = runtime
        self.state = LockedState(State(events: events, queue: queued, live: live, lastHeard: runtime.now))
    }

    // MARK: The task's own timeout

    /// Starts the idle timer: `expired` is called once if the task goes ``idleTimeout`` without
    /// hearing from the transfer while it still listens.
    func watchIdleness(_ expired: @escaping @Sendable () -> Void) {
        guard let idleTimeout else { return }
        let deadline = state.withLock { state -> DispatchTime? in
            guard !state.idleOver else { return nil }
            state.expired = expired
            return state.lastHeard + idleTimeout.dispatchInterval
        }
        if let deadline { arm(deadline) }
    }

    private func arm(_ deadline: DispatchTime) {
        let timer = runtime.at(deadline) { [weak self] in self?.idleTimerFired() }
        let unneeded: Bool = state.withLock { state in
            if state.idleOver { return true }
            state.timer = timer
            return false
        }
        if unneeded { timer.cancel() }
    }

    /// One timer at a time: when it fires, it is armed again for the idle time counted from the
    /// last event heard (cheaper than a new timer for every chunk, as corelibs makes).
    private func idleTimerFired() {
        guard let idleTimeout else { return }
        let now = runtime.now
        let (rearm, expired): (DispatchTime?, (@Sendable () -> Void)?) = state.withLock { state in
            guard !state.idleOver else { return (nil, nil) }
            let due = state.lastHeard + idleTimeout.dispatchInterval
            if now < due { return (due, nil) }
            let expired = state.expired
            _ = state.endIdleness()
            return (nil, expired)
        }
        if let rearm { arm(rearm) }
        expired?()
    }

    private func stopWatching(_ body: (inout State) -> Void = { _ in }) {
        let timer = state.withLock { state in
            body(&state)
            return state.endIdleness()
        }
        timer?.cancel()
    }

    /// The task announced its part: what arrived meanwhile is handed on.
    func goLive() {
        let claimed: Bool = state.withLock { state in
            state.live = true
            if state.draining { return false }
            state.draining = true
            return true
        }
        if claimed { drain() }
    }

    /// Hands `delivery` on after everything before it.
    func deliver(_ delivery: Delivery) {
        let now: DispatchTime? = idleTimeout == nil ? nil : runtime.now
        let (claimed, timer): (Bool, (any PipelineTimer)?) = state.withLock { state in
            if let now { state.lastHeard = now }
            // The last event: the task's timeout no longer applies.
            var timer: (any PipelineTimer)?
            if case .complete = delivery { timer = state.endIdleness() }
            state.queue.append(delivery)
            if !state.live || state.draining { return (false, timer) }
            state.draining = true
            return (true, timer)
        }
        timer?.cancel()
        if claimed { drain() }
    }

    private func drain() {
        while true {
            let next: (Delivery, (any TransportEvents)?)? = state.withLock { state in
                guard !state.queue.isEmpty else {
                    state.draining = false
                    return nil
                }
                let delivery = state.queue.removeFirst()
                let target = state.events
                // The last event: the task no longer needs this subscription, nor it the task.
                if case .complete = delivery { state.events = nil }
                return (delivery, target)
            }
            guard let (delivery, events) = next else { return }
            guard let events else {
                // The task is gone; a redirect must still be answered, or the transfer waits.
                if case .redirect(_, _, let decide) = delivery { decide(nil) }
                continue
            }
            switch delivery {
            case .response(let response): events.transportDidReceive(response: response)
            case .data(let data): events.transportDidReceive(data: data)
            case .complete(let error): events.transportDidComplete(error: error)
            case .redirect(let response, let request, let decide): events.transportWillRedirect(response, to: request, decide: decide)
            }
        }
    }

    /// This task's own request was sent alone, as `transfer`: stopping this subscription stops it.
    /// Returns `false` if the task was stopped meanwhile (the caller must stop `transfer`).
    func sentAlone(_ transfer: any TransferHandle) -> Bool {
        var sent = false
        // The inner session times the request sent alone by its own timeout.
        stopWatching { state in
            guard !state.stopped else { return }
            state.alone = transfer
            sent = true
        }
        return sent
    }

    /// The task stops (its caller cancelled): returns its own transfer to stop, if it has one.
    func stop() -> (any TransferHandle)? {
        var alone: (any TransferHandle)?
        stopWatching { state in
            state.stopped = true
            // The task hears nothing more (its machine has ended the transfer), and the task and
            // this subscription no longer hold each other. A redirect still queued is answered
            // by the drain, which finds no task.
            state.events = nil
            alone = state.alone
        }
        return alone
    }

    // MARK: Events of this task's own transfer (after its request was sent alone)

    func transportDidReceive(response: URLResponse) { deliver(.response(response)) }
    func transportDidReceive(data: Data) { deliver(.data(data)) }
    func transportDidComplete(error: (any Error)?) { deliver(.complete(error)) }
    func transportDidSendBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {}
    func transportWillRedirect(_ response: HTTPURLResponse, to request: URLRequest, decide: @escaping @Sendable (URLRequest?) -> Void) {
        deliver(.redirect(response, request, decide: decide))
    }
}
