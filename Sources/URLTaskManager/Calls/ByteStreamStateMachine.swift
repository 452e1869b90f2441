import Foundation

/// The body of one ``URLTaskManager/bytes(for:)`` call between the transfer that writes it and
/// the one consumer that reads it.
///
/// corelibs has no flow control (its `suspend()` sends the request again), so a transfer cannot
/// be slowed to its reader's pace. What the reader has not taken yet stays in memory up to
/// `memoryLimit`; past it, chunks wait in a temporary file (the spill) until the reader gets to
/// them, and once the file is read to its end the body goes to memory again. Memory therefore
/// stays bounded whatever the reader's pace, and the transfer never waits. Order is kept: while
/// the spill has unread bytes every new chunk goes after them, into the file.
///
/// The spill holds at most `spillLimit` unread bytes (so the file, which reuses the space its
/// reader has passed, never grows past it): a chunk that would take it beyond ends the body
/// there, with ``URLTaskError/Code-swift.struct/spillLimitReached`` after what was kept, and
/// stops the transfer, so that a reader that holds the body without reading it costs a bounded
/// disk, not one that grows at the network's pace. Offsets here count every byte spilled
/// since the reader last caught up; ``SpillFile`` maps them into its `spillLimit` bytes.
///
/// One read at a time: a read is under way from ``next(cancelled:)`` to the piece or the end it
/// hands over (through a spill read or a wait); a ``next(cancelled:)`` meanwhile, from another
/// task, is refused (``NextAction/alreadyBeingRead``) and changes nothing, so the reader that
/// came first reads on as if alone.
///
/// The file's I/O runs outside the lock: an action names the write or the read, and its end is
/// an event of its own (``spillWritten(_:)``, ``spillRead(count:)``). The transfer writes one
/// chunk at a time (its callbacks are serial); the reader reads one piece at a time.
///
/// `Consumer` is a continuation in the library and a plain value in the tests.
struct ByteStreamStateMachine<Consumer> {
    /// What is buffered, in memory and in the spill file.
    struct Buffer {
        /// Chunks not read yet, oldest first from `head`.
        var chunks: [Data] = []
        var head = 0
        var memoryBytes = 0
        /// Bytes written to the spill file, and read back from it.
        var spilled = 0
        var read = 0
        /// A write of the spill is under way (at most one: the transfer's callbacks are serial).
        var writing = false
        /// A read of the spill is under way (at most one: one read at a time).
        var reading = false

        /// While the spill holds unread bytes (or is being written), new chunks go after them.
        var spillActive: Bool { writing || read < spilled }
        var hasMemory: Bool { head < chunks.count }

        mutating func popMemory() -> Data {
            let chunk = chunks[head]
            chunks[head] = Data()
            head += 1
            memoryBytes -= chunk.count
            if head == chunks.count {
                chunks.removeAll(keepingCapacity: true)
                head = 0
            }
            return chunk
        }
    }

    typealias Wake = ByteStreamWake

    private enum State {
        /// The body is arriving.
        case open(Buffer, waiting: Consumer?)
        /// The transfer ended (`error` `nil`: the whole body came); what is buffered is still to
        /// be read.
        case ended(Buffer, error: (any Error)?)
        /// Nothing more is kept: the consumer read the end, stopped, or was cancelled.
        case closed
    }

    private var state = State.open(Buffer(), waiting: nil)
    /// The pipeline task's handle, until the transfer ends or is stopped.
    private var handle: (any PipelineTaskHandle)?
    /// Whether the transfer ended (so that nothing is left to stop).
    private var transferEnded = false
    /// Whether the transfer is to be stopped but its handle has not arrived: it is stopped when
    /// it does.
    private var stopWhenStarted = false
    /// A consumer's read is under way, from ``next(cancelled:)`` to what it hands over.
    private var readInProgress = false
    let memoryLimit: Int
    /// The most unread bytes the spill holds (zero: nothing is spilled).
    let spillLimit: Int
    /// The most the consumer reads from the spill at once.
    let readSize: Int

    init(memoryLimit: Int, spillLimit: Int = .max, readSize: Int = 64 * 1024) {
        self.memoryLimit = memoryLimit
        self.spillLimit = max(0, spillLimit)
        self.readSize = readSize
    }

    // MARK: The transfer's side

    /// The pipeline task's handle arrived: returned to be stopped if the consumer already left.
    mutating func attach(_ handle: any PipelineTaskHandle) -> (any PipelineTaskHandle)? {
        if stopWhenStarted {
            stopWhenStarted = false
            return transferEnded ? nil : handle
        }
        if !transferEnded { self.handle = handle }
        return nil
    }

    enum ReceiveAction {
        case none
        /// Hand the chunk straight to the waiting consumer.
        case deliver(Consumer, Data)
        /// Append the chunk to the spill file at `offset`, then report ``spillWritten(_:)``.
        case spill(Data, offset: Int)
        /// The spill is full: the body ended before this chunk (the consumer gets
        /// ``URLTaskError/Code-swift.struct/spillLimitReached`` after what was kept); stop the
        /// transfer (`nil`: it is stopped when its handle arrives).
        case limitReached(stop: (any PipelineTaskHandle)?)
    }

    /// A chunk of the body arrived.
    mutating func received(_ data: Data) -> ReceiveAction {
        guard case .open(var buffer, let waiting) = state else { return .none }  // the consumer left
        if data.isEmpty { return .none }
        if let waiting {
            // A consumer waits only when nothing is buffered and no spill write is on.
            precondition(!buffer.hasMemory && !buffer.spillActive, "a consumer waits only on an empty buffer")
            state = .open(buffer, waiting: nil)
            readInProgress = false
            return .deliver(waiting, data)
        }
        if !buffer.spillActive && (buffer.memoryBytes == 0 || buffer.memoryBytes + data.count <= memoryLimit) {
            state = .closed  // keep the buffer uniquely referenced while it grows
            buffer.chunks.append(data)
            buffer.memoryBytes += data.count
            state = .open(buffer, waiting: nil)
            return .none
        }
        precondition(!buffer.writing, "the transfer writes one chunk at a time")
        // What the spill holds unread never passes the limit (so `spillLimit - unread` is >= 0).
        if data.count > spillLimit - (buffer.spilled - buffer.read) {
            state = .ended(buffer, error: URLTaskError.spillLimitReached(limit: spillLimit))
            return .limitReached(stop: takeHandleToStop())
        }
        buffer.writing = true
        let offset = buffer.spilled
        state = .open(buffer, waiting: nil)
        return .spill(data, offset: offset)
    }

    enum SpillWrittenAction {
        case none
        /// Wake the consumer that waited for the write.
        case wake(Consumer, Wake)
        /// The spill could not be written: stop the transfer; the waiting consumer, if any, is
        /// woken with the error (otherwise it gets it after what was buffered).
        case fail(Consumer?, any Error, stop: (any PipelineTaskHandle)?)
    }

    /// A write of the spill ended: `count` bytes written, or the error that stopped it.
    mutating func spillWritten(_ result: Result<Int, any Error>) -> SpillWrittenAction {
        switch state {
        case .open(var buffer, let waiting):
            buffer.writing = false
            switch result {
            case .success(let count):
                buffer.spilled += count
                state = .open(buffer, waiting: nil)
                if let waiting { return .wake(waiting, .retry) }
                return .none
            case .failure(let error):
                // The body cannot be kept: it ends here with the error, after what was buffered.
                let stop = takeHandleToStop()
                if let waiting {
                    state = .closed
                    readInProgress = false
                    return .fail(waiting, error, stop: stop)
                }
                state = .ended(buffer, error: error)
                return .fail(nil, error, stop: stop)
            }
        case .ended, .closed:
            return .none
        }
    }

    enum EndAction {
        case none
        /// Tell the waiting consumer the body ended.
        case wake(Consumer, Wake)
    }

    /// The transfer ended: `error` `nil` once the whole body came.
    mutating func ended(_ error: (any Error)?) -> EndAction {
        transferEnded = true
        handle = nil
        guard case .open(let buffer, let waiting) = state else { return .none }
        if let waiting {
            state = .closed
            readInProgress = false
            return .wake(waiting, .end(error))
        }
        state = .ended(buffer, error: error)
        return .none
    }

    /// The manager was invalidated and cancelled: the body ends with `error` (after what was
    /// buffered), and the handle of a transfer still running is returned to be stopped.
    mutating func cancelledByManager(_ error: any Error) -> (EndAction, stop: (any PipelineTaskHandle)?) {
        let stop = transferEnded ? nil : handle
        return (ended(error), stop)
    }

    // MARK: The consumer's side

    enum NextAction {
        /// The next chunk, from memory.
        case chunk(Data)
        /// Read `count` bytes of the spill at `offset`, then report ``spillRead(count:)``.
        case readSpill(offset: Int, count: Int)
        /// The body ended: `nil` after all of it, or the transfer's error. Nothing is kept now;
        /// a spill file is to be discarded.
        case end((any Error)?)
        /// Nothing to read yet: wait (``wait(_:)``).
        case mustWait
        /// Another read is under way (another task's): refuse this one with
        /// ``URLTaskError/Code-swift.struct/alreadyBeingRead``; nothing changed.
        case alreadyBeingRead
        /// The reading task was cancelled: it left (``consumerLeft()``'s action to perform);
        /// throw `cancelled`.
        case left(LeaveAction)
    }

    /// A consumer starts a read: it asks for the next piece of the body, its task cancelled or
    /// not.
    mutating func next(cancelled: Bool = false) -> NextAction {
        if readInProgress { return .alreadyBeingRead }
        readInProgress = true
        return advance(cancelled: cancelled)
    }

    /// The read under way was woken with ``ByteStreamWake/retry`` (or told to by ``wait(_:)``):
    /// it asks again, as the same read.
    mutating func retry(cancelled: Bool = false) -> NextAction {
        readInProgress = true
        return advance(cancelled: cancelled)
    }

    private mutating func advance(cancelled: Bool) -> NextAction {
        if cancelled { return .left(consumerLeft()) }
        switch state {
        case .open(var buffer, let waiting):
            precondition(waiting == nil && !buffer.reading, "a consumer waits, or reads the spill, only inside a read")
            state = .closed  // keep the buffer uniquely referenced while a chunk is taken
            let action = take(&buffer)
            state = .open(buffer, waiting: nil)
            return action ?? .mustWait
        case .ended(var buffer, let error):
            precondition(!buffer.reading, "a consumer reads the spill only inside a read")
            state = .closed
            if let action = take(&buffer) {
                state = .ended(buffer, error: error)
                return action
            }
            readInProgress = false  // read to its end: it stays closed
            return .end(error)
        case .closed:
            readInProgress = false
            return .end(nil)
        }
    }

    /// Memory first (older than any spill), then the spill. A chunk ends the read; a spill read
    /// ends it in ``spillRead(count:)``.
    private mutating func take(_ buffer: inout Buffer) -> NextAction? {
        if buffer.hasMemory {
            readInProgress = false
            return .chunk(buffer.popMemory())
        }
        if buffer.read < buffer.spilled {
            buffer.reading = true
            return .readSpill(offset: buffer.read, count: min(buffer.spilled - buffer.read, readSize))
        }
        return nil
    }

    /// The consumer read `count` bytes of the spill: its read ends.
    mutating func spillRead(count: Int) {
        readInProgress = false
        func advance(_ buffer: inout Buffer) {
            buffer.reading = false
            buffer.read += count
            if !buffer.writing && buffer.read == buffer.spilled {
                // Read to its end: the file is written from its start again next time.
                buffer.read = 0
                buffer.spilled = 0
            }
        }
        switch state {
        case .open(var buffer, let waiting):
            advance(&buffer)
            state = .open(buffer, waiting: waiting)
        case .ended(var buffer, let error):
            advance(&buffer)
            state = .ended(buffer, error: error)
        case .closed:
            break
        }
    }

    enum WaitAction {
        /// The consumer waits; it is woken by the next event.
        case waiting
        /// Do not wait: `wake` at once.
        case now(Consumer, Wake)
    }

    /// The consumer found nothing to read (``NextAction/mustWait``) and waits with `consumer`.
    mutating func wait(_ consumer: Consumer) -> WaitAction {
        switch state {
        case .open(let buffer, let waiting):
            precondition(waiting == nil, "one read at a time waits")
            if buffer.hasMemory || buffer.read < buffer.spilled { return .now(consumer, .retry) }
            state = .open(buffer, waiting: consumer)
            return .waiting
        case .ended, .closed:
            return .now(consumer, .retry)
        }
    }

    enum LeaveAction {
        case none
        /// Stop the transfer (if any), wake the waiting consumer (if any) with `cancelled`, and
        /// discard the spill.
        case close(stop: (any PipelineTaskHandle)?, waiting: Consumer?)
    }

    /// The reading task was cancelled (in its read: a task refused with
    /// ``NextAction/alreadyBeingRead`` never gets here), or every copy of the byte sequence was
    /// let go: nothing more is read, so nothing more is kept, and a transfer still running is
    /// stopped.
    mutating func consumerLeft() -> LeaveAction {
        var waiting: Consumer?
        var wasClosed = false
        switch state {
        case .open(_, let consumer): waiting = consumer
        case .ended: break
        case .closed: wasClosed = true
        }
        state = .closed
        readInProgress = false
        let stop = takeHandleToStop()
        if wasClosed && stop == nil { return .none }
        return .close(stop: stop, waiting: waiting)
    }

    // MARK: Both sides

    /// The handle of a transfer still running, to be stopped; if it has not arrived yet, it is
    /// stopped when it does. (The handle is let go as the transfer ends: one still here belongs
    /// to a running transfer.)
    private mutating func takeHandleToStop() -> (any PipelineTaskHandle)? {
        let stop = handle
        handle = nil
        if stop == nil && !transferEnded { stopWhenStarted = true }
        return stop
    }
}

/// What a consumer waiting on a ``ByteStreamStateMachine`` is woken with.
enum ByteStreamWake: Sendable {
    case chunk(Data)
    /// Something changed (a spill write ended): ask again.
    case retry
    /// The body ended: `nil` after all of it, or the transfer's error.
    case end((any Error)?)
}
