import Foundation
import URLTaskManager

/// One open connection for commands: writes are serialised (the order of the bytes on the wire is
/// the order of the queue) and replies are matched to the queue in order (FIFO) by a reader thread
/// of its own, which also enforces the reply timeout. A connection is used once: when it fails
/// (closed, timed out, bytes that are not RESP) every command in flight fails with it and the
/// client makes a new one; no command is ever sent twice.
final class RedisConnection: Sendable {
    private struct Pending {
        let command: String
        let expected: Int
        var replies: [RESPValue]
        let sentAt: ContinuousClock.Instant
        let continuation: CheckedContinuation<[RESPValue], any Error>
    }

    private struct State {
        var open = true
        var pending: [Pending] = []
        var head = 0
        var lastProgress = ContinuousClock.now

        var hasPending: Bool { head < pending.count }

        mutating func takeAll() -> [Pending] {
            let all = Array(pending[head...])
            pending.removeAll()
            head = 0
            return all
        }
    }

    private let fd: Int32
    private let wakeReader: Int32
    private let wakeWriter: Int32
    private let replyTimeout: Duration
    /// The limits of the replies the reader reads (``RedisClient/Configuration/maximumReplyDepth``
    /// and ``RedisClient/Configuration/maximumReplySize``).
    private let maximumReplyDepth: Int
    private let maximumReplySize: Int
    private let state = LockedState(State())
    /// Held while a command is queued and written: the wire order is the queue order. A plain
    /// mutex held across the socket write (never a continuation), always taken before `state`'s.
    private let writeLock = LockedState(())
    private let onClose: @Sendable (RedisConnection) -> Void

    /// Takes over `fd` (connected, authenticated) and starts its reader thread, which reads
    /// replies within `configuration`'s timeout and limits.
    init(
        fd: Int32, configuration: RedisClient.Configuration, onClose: @escaping @Sendable (RedisConnection) -> Void
    ) throws(RedisError) {
        let pair = try RedisSocket.makeWakePair()
        self.fd = fd
        self.wakeReader = pair.reader
        self.wakeWriter = pair.writer
        self.replyTimeout = configuration.replyTimeout
        self.maximumReplyDepth = configuration.maximumReplyDepth
        self.maximumReplySize = configuration.maximumReplySize
        self.onClose = onClose
        RedisSocket.setSendTimeout(fd, configuration.replyTimeout)
        let thread = Thread { [self] in readLoop() }
        thread.name = "URLTaskRedis reader"
        thread.start()
    }

    deinit {
        RedisSocket.closeDescriptor(fd)
        RedisSocket.closeDescriptor(wakeReader)
        RedisSocket.closeDescriptor(wakeWriter)
    }

    /// Whether the connection can still take commands.
    var isOpen: Bool { state.withLock { $0.open } }

    /// Thrown by ``request(_:expected:command:)`` when the connection had closed before the
    /// command was written: nothing was sent, so the client may send it on a new connection
    /// (that is no resend).
    struct NotSent: Error {}

    /// Writes `bytes` (one or more encoded commands) and returns the next `expected` replies.
    func request(_ bytes: [UInt8], expected: Int, command: String) async throws -> [RESPValue] {
        try await withCheckedThrowingContinuation { continuation in
            let written: Result<Void, RedisError>? = writeLock.withLock { _ in
                let (refused, wasIdle): (Bool, Bool) = state.withLock { state in
                    guard state.open else { return (true, false) }
                    let wasIdle = !state.hasPending
                    if wasIdle { state.lastProgress = .now }
                    state.pending.append(
                        Pending(command: command, expected: expected, replies: [], sentAt: .now, continuation: continuation))
                    return (false, wasIdle)
                }
                if refused { return nil }
                // The reader polls without a deadline while nothing is in flight: give it one.
                if wasIdle { RedisSocket.wake(wakeWriter) }
                do throws(RedisError) {
                    try RedisSocket.sendAll(fd, bytes)
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }
            switch written {
            case nil:
                continuation.resume(throwing: NotSent())
            case .success?:
                break
            case .failure(let error)?:
                fail(first: error, rest: .closed("the connection failed while \(command) was written"))
            }
        }
    }

    /// Fails every command in flight with `.connectionClosed` and stops the reader.
    func close() {
        fail(first: .closed("the client was closed"), rest: .closed("the client was closed"))
    }

    /// Ends the connection: the oldest command in flight fails with `first`, the others with
    /// `rest`, and the client is told (it reconnects on the next command).
    private func fail(first: RedisError, rest: RedisError) {
        let victims: [Pending]? = state.withLock { state in
            guard state.open else { return nil }
            state.open = false
            return state.takeAll()
        }
        guard let victims else { return }
        RedisSocket.shutdownBoth(fd)
        RedisSocket.wake(wakeWriter)
        // The client first, so that a caller whose command fails here and who sends another at
        // once finds the connection gone (and reconnects) rather than this dead one.
        onClose(self)
        for (index, victim) in victims.enumerated() {
            victim.continuation.resume(throwing: index == 0 ? first : rest)
        }
    }

    private func readLoop() {
        var parser = RESPParser(maximumDepth: maximumReplyDepth, maximumSize: maximumReplySize)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 1)
        defer { buffer.deallocate() }
        while true {
            let now = ContinuousClock.now
            let wait: (timeout: Int32, command: String)? = state.withLock { state in
                guard state.open else { return nil }
                guard state.hasPending else { return (-1, "") }
                let head = state.pending[state.head]
                let deadline = max(head.sentAt, state.lastProgress) + replyTimeout
                return (deadline <= now ? 0 : RedisSocket.milliseconds(until: deadline), head.command)
            }
            guard let wait else { return }
            if wait.timeout == 0 {
                fail(
                    first: .timeout("no reply to \(wait.command) within \(replyTimeout)"),
                    rest: .closed("the connection was closed after a reply timed out"))
                return
            }
            let ready = RedisSocket.waitReadable(fd, wake: wakeReader, timeout: wait.timeout)
            if ready.wake { RedisSocket.drain(wakeReader) }
            guard ready.socket else { continue }
            let count = RedisSocket.receive(fd, into: buffer)
            if count <= 0 {
                let midReply = parser.isMidReply
                fail(
                    first: .closed(midReply ? "the connection closed in the middle of a reply" : "the server closed the connection"),
                    rest: .closed("the server closed the connection"))
                return
            }
            parser.append(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            var values: [RESPValue] = []
            var violation: RedisError?
            do {
                while let value = try parser.next() { values.append(value) }
            } catch {
                violation = error
            }
            if !values.isEmpty && !deliver(values) {
                violation = .violation("the server sent a reply no command was waiting for")
            }
            if let violation {
                fail(first: violation, rest: .closed("the connection was closed after the server sent a reply the client could not read"))
                return
            }
        }
    }

    /// Hands replies to the commands in order; `false` when a reply had no command.
    private func deliver(_ values: [RESPValue]) -> Bool {
        let (finished, matched): ([(CheckedContinuation<[RESPValue], any Error>, [RESPValue])], Bool) = state.withLock { state in
            var finished: [(CheckedContinuation<[RESPValue], any Error>, [RESPValue])] = []
            state.lastProgress = .now
            for value in values {
                guard state.hasPending else { return (finished, false) }
                state.pending[state.head].replies.append(value)
                if state.pending[state.head].replies.count == state.pending[state.head].expected {
                    finished.append((state.pending[state.head].continuation, state.pending[state.head].replies))
                    state.head += 1
                }
            }
            if state.head == state.pending.count {
                state.pending.removeAll(keepingCapacity: true)
                state.head = 0
            } else if state.head > 1024 {
                state.pending.removeFirst(state.head)
                state.head = 0
            }
            return (finished, true)
        }
        for (continuation, replies) in finished { continuation.resume(returning: replies) }
        return matched
    }
}

/// The synchronous exchanges of a new connection (`AUTH`, `SELECT`, `SUBSCRIBE`), before any
/// reader thread exists; run on the connecting thread.
enum RedisHandshake {
    /// Connects to the configured endpoint, authenticates and selects the database: a socket
    /// ready for commands, or a typed error (the socket closed).
    static func open(_ configuration: RedisClient.Configuration) throws(RedisError) -> Int32 {
        let fd = try RedisSocket.connect(to: configuration.endpoint, timeout: configuration.connectTimeout)
        var commands: [[String]] = []
        if let password = configuration.password {
            if let username = configuration.username {
                commands.append(["AUTH", username, password])
            } else {
                commands.append(["AUTH", password])
            }
        }
        if configuration.database != 0 { commands.append(["SELECT", String(configuration.database)]) }
        guard !commands.isEmpty else { return fd }
        do throws(RedisError) {
            var parser = RESPParser(limitsOf: configuration)
            let replies = try exchange(fd, commands, parser: &parser, timeout: configuration.replyTimeout)
            for (command, reply) in zip(commands, replies) {
                if case .error(let text) = reply { throw RedisError.reply(text, command: command[0]) }
            }
            return fd
        } catch {
            RedisSocket.closeDescriptor(fd)
            throw error
        }
    }

    /// Sends `commands` and reads one reply to each, within `timeout` of the last progress.
    static func exchange(_ fd: Int32, _ commands: [[String]], parser: inout RESPParser, timeout: Duration) throws(RedisError) -> [RESPValue]
    {
        var bytes: [UInt8] = []
        for command in commands { RESPEncoder.append(command, to: &bytes) }
        RedisSocket.setSendTimeout(fd, timeout)
        try RedisSocket.sendAll(fd, bytes)
        var replies: [RESPValue] = []
        var deadline = ContinuousClock.now + timeout
        var buffer = [UInt8](repeating: 0, count: 4096)
        let name = RedisError.commandName(commands.first?.first)
        while replies.count < commands.count {
            while replies.count < commands.count, let value = try parser.next() {
                replies.append(value)
                deadline = .now + timeout
            }
            if replies.count == commands.count { break }
            let wait = RedisSocket.milliseconds(until: deadline)
            if wait == 0 { throw .timeout("no reply to \(name) within \(timeout)") }
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&entry, 1, wait) <= 0 { continue }
            let count = buffer.withUnsafeMutableBytes { RedisSocket.receive(fd, into: $0) }
            if count <= 0 { throw .closed("the server closed the connection during \(name)") }
            parser.append(buffer[0..<count])
        }
        return replies
    }
}
