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
// @unchecked Sendable: `queue`, `live`, `draining`, `events`, `alone` and `stopped` are guarded by `lock`.
final class TransferSubscription: TransferHandle, TransportEvents, @unchecked Sendable {
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
    /// Announces this task's part in its own events (``TransferShare/announce``).
    let announce: @Sendable (TransferShare.Role) -> Void
    private let lock = NSLock()
    private var events: (any TransportEvents)?
    private var queue: [Delivery] = []
    private var live: Bool
    private var draining = false
    /// The inner task of this task's own transfer, once its request was sent alone.
    private var alone: (any TransferHandle)?
    private var stopped = false

    init(
        subscriber: Subscriber, transfer: Transfer, share: TransferShare, events: any TransportEvents, live: Bool
    ) {
        self.subscriber = subscriber
        self.transfer = transfer
        self.task = share.task
        self.request = share.request
        self.announce = share.announce
        self.events = events
        self.live = live
    }

    /// The task announced its part: what arrived meanwhile is handed on.
    func goLive() {
        let claimed: Bool = lock.withLock {
            live = true
            if draining { return false }
            draining = true
            return true
        }
        if claimed { drain() }
    }

    /// Hands `delivery` on after everything before it.
    func deliver(_ delivery: Delivery) {
        let claimed: Bool = lock.withLock {
            queue.append(delivery)
            if !live || draining { return false }
            draining = true
            return true
        }
        if claimed { drain() }
    }

    private func drain() {
        while true {
            let next: (Delivery, (any TransportEvents)?)? = lock.withLock {
                guard !queue.isEmpty else {
                    draining = false
                    return nil
                }
                let delivery = queue.removeFirst()
                let target = events
                // The last event: the task no longer needs this subscription, nor it the task.
                if case .complete = delivery { events = nil }
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
        lock.withLock {
            if stopped { return false }
            alone = transfer
            return true
        }
    }

    /// The task stops (its caller cancelled): returns its own transfer to stop, if it has one.
    func stop() -> (any TransferHandle)? {
        lock.withLock {
            stopped = true
            // The task hears nothing more (its machine has ended the transfer), and the task and
            // this subscription no longer hold each other. A redirect still queued is answered
            // by the drain, which finds no task.
            events = nil
            return alone
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
