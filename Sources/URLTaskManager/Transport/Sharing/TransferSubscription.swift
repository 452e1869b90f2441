import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One task's hold on a shared transfer: what its ``TaskStorage`` keeps as its transfer, and
/// the queue through which the transfer's events reach it, in order, one at a time.
///
/// A task that joins a transfer already on its way announces it in its own events first; a
/// response head that arrives meanwhile waits here, so the task never hears of an answer before
/// it said whose answer it is. The queue is drained by one thread at a time, never under the lock.
/// If the answer turns out not to be shareable with this task (its `Vary`), the task's own
/// request is sent alone and its events reach the task through the same queue.
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

    private struct State {
        var events: (any TransportEvents)?
        var queue: [Delivery]
        var live: Bool
        var draining = false
        /// The inner task of this task's own transfer, once its request was sent alone.
        var alone: (any TransferHandle)?
        var stopped = false
    }

    private let state: LockedState<State>

    /// A subscription whose queue starts with `queued` (the answer so far, replayed to a task
    /// that joins late): queued here, before anyone can deliver to it, so that the storage
    /// that makes it never takes this subscription's lock under its own.
    init(
        subscriber: Subscriber, transfer: Transfer, share: TransferShare, events: any TransportEvents, live: Bool,
        queued: [Delivery] = []
    ) {
        self.subscriber = subscriber
        self.transfer = transfer
        self.task = share.task
        self.request = share.request
        self.wire = share.wire
        self.announce = share.announce
        self.state = LockedState(State(events: events, queue: queued, live: live))
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
        let claimed: Bool = state.withLock { state in
            state.queue.append(delivery)
            if !state.live || state.draining { return false }
            state.draining = true
            return true
        }
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
        state.withLock { state in
            if state.stopped { return false }
            state.alone = transfer
            return true
        }
    }

    /// The task stops (its caller cancelled): returns its own transfer to stop, if it has one.
    func stop() -> (any TransferHandle)? {
        state.withLock { state in
            state.stopped = true
            // The task hears nothing more (its machine has ended the transfer), and the task and
            // this subscription no longer hold each other. A redirect still queued is answered
            // by the drain, which finds no task.
            state.events = nil
            return state.alone
        }
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
