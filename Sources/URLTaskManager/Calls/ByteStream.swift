import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One ``URLTaskManager/bytes(for:)`` body: its ``ByteStreamStateMachine`` under a lock, the
/// spill file, and the I/O and wake-ups its actions name, performed with the lock released.
final class ByteStream: Sendable {
    typealias Consumer = CheckedContinuation<ByteStreamWake, Never>

    /// What memory holds of a body its reader has not taken yet before the rest waits in a
    /// temporary file: 1 MiB.
    static let memoryLimit = 1 << 20

    private let machine: LockedState<ByteStreamStateMachine<Consumer>>
    private let spill: SpillFile
    /// The URL the caller asked for, which a cancellation names.
    private let url: URL?

    /// `spillLimit`: the most unread bytes the temporary file holds
    /// (``URLTaskManager/Options/maximumSpilledBodySize``).
    init(url: URL?, memoryLimit: Int = ByteStream.memoryLimit, spillLimit: Int) {
        self.url = url
        self.machine = LockedState(ByteStreamStateMachine(memoryLimit: memoryLimit, spillLimit: spillLimit))
        self.spill = SpillFile(capacity: spillLimit)
    }

    /// What the temporary file takes on disk now (the tests check it stays within the limit).
    var spillFileSize: Int { spill.size }

    // MARK: The transfer's side

    func attach(_ handle: any PipelineTaskHandle) {
        machine.withLock { $0.attach(handle) }?.cancel()
    }

    func received(_ data: Data) {
        switch machine.withLock({ $0.received(data) }) {
        case .none:
            return
        case .deliver(let consumer, let data):
            consumer.resume(returning: .chunk(data))
        case .limitReached(let stop):
            // Nothing more is read off the network; the reader gets the error after what was kept.
            stop?.cancel()
        case .spill(let data, let offset):
            let result = Result { try spill.write(data, at: offset) }
            switch machine.withLock({ $0.spillWritten(result) }) {
            case .none:
                return
            case .wake(let consumer, let wake):
                consumer.resume(returning: wake)
            case .fail(let consumer, let error, let stop):
                stop?.cancel()
                consumer?.resume(returning: .end(error))
            }
        }
    }

    /// The manager was invalidated and cancelled: the body ends with `cancelled`, and a transfer
    /// still running is stopped.
    func cancelledByManager() {
        let (action, stop) = machine.withLock { $0.cancelledByManager(URLError.cancelled(url: url)) }
        stop?.cancel()
        if case .wake(let consumer, let wake) = action { consumer.resume(returning: wake) }
    }

    func ended(_ error: (any Error)?) {
        if case .wake(let consumer, let wake) = machine.withLock({ $0.ended(error) }) { consumer.resume(returning: wake) }
    }

    // MARK: The consumer's side

    /// The next piece of the body, `nil` at its end; throws the transfer's error,
    /// `URLError.cancelled` if the calling task is cancelled, or
    /// ``URLTaskError/Code-swift.struct/alreadyBeingRead`` (changing nothing) if another task's
    /// read is under way.
    func next() async throws -> Data? {
        var action = machine.withLock { $0.next(cancelled: Task.isCancelled) }
        while true {
            switch action {
            case .alreadyBeingRead:
                throw URLTaskError.alreadyBeingRead
            case .left(let leave):
                perform(leave)
                throw URLError.cancelled(url: url)
            case .chunk(let data):
                return data
            case .readSpill(let offset, let count):
                let read = Result { try spill.read(at: offset, count: count) }
                machine.withLock { $0.spillRead(count: count) }
                return try read.get()
            case .end(let error):
                spill.discard()
                if let error { throw error }
                return nil
            case .mustWait:
                let wake = await withTaskCancellationHandler {
                    await withCheckedContinuation { (consumer: Consumer) in
                        if case .now(let consumer, let wake) = machine.withLock({ $0.wait(consumer) }) { consumer.resume(returning: wake) }
                    }
                } onCancel: {
                    consumerLeft()
                }
                switch wake {
                case .chunk(let data): return data
                case .retry: action = machine.withLock { $0.retry(cancelled: Task.isCancelled) }
                case .end(let error):
                    spill.discard()
                    if let error { throw error }
                    return nil
                }
            }
        }
    }

    /// The reading task was cancelled, or every copy of the byte sequence was let go.
    func consumerLeft() {
        perform(machine.withLock { $0.consumerLeft() })
    }

    private func perform(_ leave: ByteStreamStateMachine<Consumer>.LeaveAction) {
        guard case .close(let stop, let waiting) = leave else { return }
        stop?.cancel()
        spill.discard()
        waiting?.resume(returning: .end(URLError.cancelled(url: url)))
    }
}

/// Ends the stream's reading when the last copy of its byte sequence and iterators is gone.
@usableFromInline
final class ByteStreamReader: Sendable {
    let stream: ByteStream

    init(_ stream: ByteStream) {
        self.stream = stream
    }

    deinit {
        stream.consumerLeft()
    }
}

/// The sink of a ``URLTaskManager/bytes(for:)`` call: the response head ends the call, with a
/// byte sequence reading the ``ByteStream`` the body goes to.
final class ByteStreamSink: CallSink, AnswersChallengesFromStorage, Sendable {
    private let call: Call<(URLTaskManager.AsyncBytes, URLResponse)>
    let stream: ByteStream

    init(call: Call<(URLTaskManager.AsyncBytes, URLResponse)>, stream: ByteStream) {
        self.call = call
        self.stream = stream
    }

    func receive(response: URLResponse) {
        // If the caller was cancelled meanwhile, the reader is let go here, which stops the task.
        call.end(.success((URLTaskManager.AsyncBytes(reader: ByteStreamReader(stream)), response)))
    }

    func receive(data: Data) {
        stream.received(data)
    }

    func finish() {
        // Every task delivers its response before it finishes; if not, the call ends here.
        call.end(.failure(URLError(.badServerResponse)))
        stream.ended(nil)
    }

    func fail(_ error: any Error) {
        call.end(.failure(error))
        stream.ended(error)
    }

    /// Before the head: the caller gets `cancelled`; after it, the reader does, where the body
    /// breaks off.
    func cancelCall() {
        call.cancel()
        stream.cancelledByManager()
    }

    var delivery: TransferDelivery { .streamedApart }
}
