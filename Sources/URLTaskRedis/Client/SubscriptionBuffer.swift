import Foundation
import URLTaskManager

/// The messages a subscription has received and its reader has not taken, as a pure state
/// machine (no I/O, no lock): at most `budget` bytes of them. Past it the subscription's thread
/// is told to stop reading its connection until the reader has taken it below half the budget
/// (back-pressure: the bytes wait in the kernel's buffers, then in Redis's, which closes a
/// subscriber past its `client-output-buffer-limit pubsub`; the subscription then reconnects),
/// so that a flood of messages nobody reads holds a bounded amount of memory and none is
/// dropped by the client.
struct SubscriptionBuffer<Waiter> {
    private enum State {
        /// Messages flow; `waiter` is the reader's `next()` waiting for one (the queue is then
        /// empty).
        case open(waiter: Waiter?)
        /// The subscription ended, with `error` or without: the reader gets the messages left,
        /// then the end (the error once).
        case ended(error: (any Error)?)
        /// The reader is gone: nothing more is kept.
        case cancelled
    }

    /// What the subscription's thread does after a message arrived.
    enum ArrivalAction {
        /// Hand the message to the waiting reader.
        case resume(Waiter)
        /// Kept; go on reading.
        case buffered
        /// Kept, and the budget is used up: stop reading until woken (``TakeAction/deliver(_:wakeProducer:)``).
        case pause
        /// Nobody will read it (the reader left, or the stream ended): dropped.
        case drop
    }

    /// What the reader's `next()` does.
    enum TakeAction {
        /// Return this message; wake the subscription's thread when `wakeProducer` (it paused,
        /// and there is room again).
        case deliver(Data, wakeProducer: Bool)
        /// The waiter was stored: a message or the end will resume it.
        case wait
        /// The stream is over: throw `error`, or return `nil` without one.
        case finish(error: (any Error)?)
    }

    private var state: State = .open(waiter: nil)
    private var messages: [Data] = []
    private var head = 0
    private var bytes = 0
    private var producerPaused = false
    /// The most bytes of unread messages kept before the thread pauses.
    let budget: Int

    init(budget: Int) {
        self.budget = max(1, budget)
    }

    /// Whether the subscription's thread should not read now.
    var isProducerPaused: Bool { producerPaused }

    /// The bytes of the messages held (their payloads and a slot each).
    var heldBytes: Int { bytes }

    /// A message arrived on the subscription.
    mutating func messageArrived(_ message: Data) -> ArrivalAction {
        guard case .open(let waiter) = state else { return .drop }
        if let waiter {
            state = .open(waiter: nil)
            return .resume(waiter)
        }
        messages.append(message)
        bytes += Self.cost(of: message)
        guard bytes >= budget else { return .buffered }
        producerPaused = true
        return .pause
    }

    /// The reader asks for the next message.
    mutating func nextRequested(_ waiter: Waiter) -> TakeAction {
        if head < messages.count {
            let message = messages[head]
            messages[head] = Data()
            head += 1
            bytes -= Self.cost(of: message)
            if head == messages.count {
                messages.removeAll(keepingCapacity: messages.count <= 1024)
                head = 0
            } else if head > 1024 && head * 2 > messages.count {
                messages.removeFirst(head)
                head = 0
            }
            let wake = producerPaused && bytes < budget / 2
            if wake { producerPaused = false }
            return .deliver(message, wakeProducer: wake)
        }
        switch state {
        case .open(nil):
            state = .open(waiter: waiter)
            return .wait
        case .open(.some):
            // Two readers at once: the stream's iterator is not to be shared.
            return .finish(error: RedisError.closed("a subscription's stream was read by two tasks at once"))
        case .ended(let error):
            state = .ended(error: nil)
            return .finish(error: error)
        case .cancelled:
            return .finish(error: nil)
        }
    }

    /// The subscription ended (`error`: why, if it is to be thrown): the waiting reader to
    /// resume with the end, if one waits.
    mutating func ended(_ error: (any Error)?) -> (waiter: Waiter, error: (any Error)?)? {
        guard case .open(let waiter) = state else { return nil }
        guard let waiter else {
            state = .ended(error: error)
            return nil
        }
        state = .ended(error: nil)
        return (waiter, error)
    }

    /// The reader left (its task cancelled, the stream released): the messages are dropped;
    /// the waiting reader, if any, to resume with `nil`.
    mutating func cancelled() -> Waiter? {
        defer {
            state = .cancelled
            messages = []
            head = 0
            bytes = 0
            producerPaused = false
        }
        if case .open(let waiter) = state { return waiter }
        return nil
    }

    /// A message's payload and its slot, as counted against the budget.
    static func cost(of message: Data) -> Int {
        message.count + MemoryLayout<Data>.stride + RESPParser.allocationOverhead
    }
}

/// A subscription's messages between its thread and its reader: the ``SubscriptionBuffer``
/// under a lock, the reader's `next()` suspended on a continuation resumed outside it.
final class SubscriptionMessages: Sendable {
    private typealias Waiter = CheckedContinuation<Data?, any Error>

    private let buffer: LockedState<SubscriptionBuffer<Waiter>>
    /// Wakes the subscription's thread when it paused and there is room again.
    private let wakeProducer: @Sendable () -> Void

    init(budget: Int, wakeProducer: @escaping @Sendable () -> Void) {
        self.buffer = LockedState(SubscriptionBuffer(budget: budget))
        self.wakeProducer = wakeProducer
    }

    /// Whether the subscription's thread should not read its connection now.
    var isProducerPaused: Bool { buffer.withLock { $0.isProducerPaused } }

    /// Hands a message over (the subscription's thread); `false` when the thread should stop
    /// reading until woken.
    func deliver(_ message: Data) -> Bool {
        switch buffer.withLock({ $0.messageArrived(message) }) {
        case .resume(let waiter):
            waiter.resume(returning: message)
            return true
        case .buffered, .drop:
            return true
        case .pause:
            return false
        }
    }

    /// The stream ends: after the messages left, with `error` (thrown once) or without.
    func finish(throwing error: (any Error)? = nil) {
        guard let (waiter, error) = buffer.withLock({ $0.ended(error) }) else { return }
        if let error {
            waiter.resume(throwing: error)
        } else {
            waiter.resume(returning: nil)
        }
    }

    /// The reader left: the messages are dropped, a waiting `next()` returns `nil`.
    func cancel() {
        let (wasPaused, waiter) = buffer.withLock { buffer -> (Bool, Waiter?) in (buffer.isProducerPaused, buffer.cancelled()) }
        waiter?.resume(returning: nil)
        if wasPaused { wakeProducer() }
    }

    /// The next message, or `nil` at the end; throws the error the subscription ended with.
    func next() async throws -> Data? {
        try await withCheckedThrowingContinuation { (waiter: Waiter) in
            switch buffer.withLock({ $0.nextRequested(waiter) }) {
            case .deliver(let message, let wake):
                waiter.resume(returning: message)
                if wake { wakeProducer() }
            case .wait:
                break
            case .finish(let error?):
                waiter.resume(throwing: error)
            case .finish(nil):
                waiter.resume(returning: nil)
            }
        }
    }
}

/// What a subscription's stream pulls its messages through. It stops the subscription when
/// the reading task is cancelled and when the stream lets it go (released, or finished).
final class SubscriptionReader: Sendable {
    private let subscription: RedisSubscription

    init(_ subscription: RedisSubscription) {
        self.subscription = subscription
    }

    deinit {
        subscription.messages.cancel()
        subscription.stop()
    }

    /// The next message, `nil` at the end (the reader's task cancelled included).
    func next() async throws -> Data? {
        try await withTaskCancellationHandler {
            try await subscription.messages.next()
        } onCancel: { [subscription] in
            subscription.messages.cancel()
            subscription.stop()
        }
    }
}
