import Foundation
import URLTaskManager

/// One `subscribe(to:)` stream: a connection of its own on a thread of its own, which
/// subscribes, hands each message's payload to ``messages``, and on a lost connection reconnects
/// with back-off and subscribes again until stopped (the iterating task cancelled, the stream
/// released, or the client closed). Messages published while it is reconnecting are lost (Redis
/// pub/sub keeps none): a consumer re-reads what it waits for after each `onSubscribed`. Each
/// message is read within the client's reply limits and, once it has begun, within the reply
/// timeout; while ``messages`` holds its budget of unread messages, the thread stops reading.
final class RedisSubscription: Sendable {
    private struct State {
        var stopped = false
        var fd: Int32?
    }

    let channel: String
    /// The messages received and not yet read: what the stream's reader takes.
    let messages: SubscriptionMessages
    private let configuration: RedisClient.Configuration
    private let onSubscribed: @Sendable () -> Void
    private let onEnd: @Sendable (ObjectIdentifier) -> Void
    private let state = LockedState(State())
    private let wake: (reader: Int32, writer: Int32)?

    init(
        channel: String, configuration: RedisClient.Configuration, onSubscribed: @escaping @Sendable () -> Void,
        onEnd: @escaping @Sendable (ObjectIdentifier) -> Void
    ) {
        self.channel = channel
        self.configuration = configuration
        self.onSubscribed = onSubscribed
        self.onEnd = onEnd
        let wake = try? RedisSocket.makeWakePair()
        self.wake = wake
        // The wake pair lives as long as this subscription, which its messages' reader holds.
        let writer = wake?.writer
        self.messages = SubscriptionMessages(budget: configuration.maximumReplySize) {
            if let writer { RedisSocket.wake(writer) }
        }
    }

    deinit {
        if let wake {
            RedisSocket.closeDescriptor(wake.reader)
            RedisSocket.closeDescriptor(wake.writer)
        }
    }

    /// Starts the subscription's thread.
    func start() {
        let thread = Thread { [self] in run() }
        thread.name = "URLTaskRedis subscriber"
        thread.start()
    }

    /// Ends the stream (without an error) and the connection.
    func stop() {
        let fd: Int32? = state.withLock { state in
            state.stopped = true
            return state.fd
        }
        if let fd { RedisSocket.shutdownBoth(fd) }
        if let wake { RedisSocket.wake(wake.writer) }
    }

    private var isStopped: Bool { state.withLock { $0.stopped } }

    private func run() {
        defer { onEnd(ObjectIdentifier(self)) }
        guard let wake else {
            messages.finish(throwing: RedisError.closed("could not create a wake socket"))
            return
        }
        var failures = 0
        while !isStopped {
            do {
                try session()
                failures = 0
            } catch {
                if case .reply = error.kind {
                    messages.finish(throwing: error)
                    return
                }
                failures += 1
            }
            if isStopped { break }
            // Back off only after a failed attempt; a session that ran (server restarted) is
            // followed by an immediate attempt.
            if failures > 0 {
                let until =
                    ContinuousClock.now
                    + ConnectionLifecycle<RedisSubscription, Never>.delay(
                        afterFailures: failures, first: configuration.reconnectDelay, maximum: configuration.maximumReconnectDelay)
                while !isStopped {
                    let left = RedisSocket.milliseconds(until: until)
                    if left == 0 { break }
                    var entry = pollfd(fd: wake.reader, events: Int16(POLLIN), revents: 0)
                    _ = poll(&entry, 1, left)
                    RedisSocket.drain(wake.reader)
                }
            }
        }
        messages.finish()
    }

    /// One connection: subscribes and hands over messages until the connection ends. Throws
    /// when the attempt failed before the subscription was confirmed, and when the connection
    /// is given up for a message: not RESP, past a reply limit, or not whole within the reply
    /// timeout (the caller backs off before the next attempt, as after a failed one).
    private func session() throws(RedisError) {
        let fd = try RedisHandshake.open(configuration)
        let registered = state.withLock { state in
            guard !state.stopped else { return false }
            state.fd = fd
            return true
        }
        defer {
            state.withLock { $0.fd = nil }
            RedisSocket.closeDescriptor(fd)
        }
        guard registered else { return }
        var parser = RESPParser(limitsOf: configuration)
        let replies = try RedisHandshake.exchange(fd, [["SUBSCRIBE", channel]], parser: &parser, timeout: configuration.replyTimeout)
        if case .error(let text) = replies[0] { throw RedisError.reply(text, command: "SUBSCRIBE") }
        guard case .array(let parts?) = replies[0], parts.first?.string?.lowercased() == "subscribe" else {
            throw .violation("SUBSCRIBE was not confirmed")
        }
        onSubscribed()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var lastHeard = ContinuousClock.now
        var pingSentAt: ContinuousClock.Instant?
        /// When the bytes of a message still incomplete began to arrive.
        var messageBegan: ContinuousClock.Instant?
        while true {
            var heard = false
            while let value = try parser.next() {
                heard = true
                handle(value)
            }
            if heard {
                lastHeard = .now
                pingSentAt = nil
            }
            // A message that has begun arrives whole within the reply timeout, as a reply does.
            if !parser.isMidReply {
                messageBegan = nil
            } else if messageBegan == nil || heard {
                messageBegan = .now
            }
            guard let wake else { return }
            if messages.isProducerPaused {
                // The reader is a budget behind: read nothing until it has taken some.
                waitForRoom(wake: wake.reader)
                if isStopped { return }
                // The time spent waiting was the reader's, not the server's.
                lastHeard = .now
                pingSentAt = nil
                if messageBegan != nil { messageBegan = .now }
                continue
            }
            // Silent for the health-check interval: PING; no answer in the reply timeout: gone.
            let healthDeadline =
                pingSentAt.map { $0 + configuration.replyTimeout } ?? lastHeard + configuration.subscriptionHealthCheckInterval
            let messageDeadline = messageBegan.map { $0 + configuration.replyTimeout }
            let wait = RedisSocket.milliseconds(until: min(healthDeadline, messageDeadline ?? healthDeadline))
            if wait == 0 {
                if let messageDeadline, messageDeadline <= .now {
                    throw .timeout("a message on a subscription did not arrive whole within \(configuration.replyTimeout)")
                }
                if pingSentAt != nil { return }
                var ping: [UInt8] = []
                RESPEncoder.append(["PING"], to: &ping)
                try RedisSocket.sendAll(fd, ping)
                pingSentAt = .now
                continue
            }
            let ready = RedisSocket.waitReadable(fd, wake: wake.reader, timeout: wait)
            if ready.wake { RedisSocket.drain(wake.reader) }
            if isStopped { return }
            guard ready.socket else { continue }
            let count = buffer.withUnsafeMutableBytes { RedisSocket.receive(fd, into: $0) }
            if count <= 0 { return }
            parser.append(buffer[0..<count])
        }
    }

    /// Waits on the wake socket until the reader has made room (or the subscription stops).
    private func waitForRoom(wake reader: Int32) {
        while messages.isProducerPaused, !isStopped {
            var entry = pollfd(fd: reader, events: Int16(POLLIN), revents: 0)
            _ = poll(&entry, 1, -1)
            RedisSocket.drain(reader)
        }
    }

    private func handle(_ value: RESPValue) {
        guard case .array(let parts?) = value, parts.count == 3, parts[0].string?.lowercased() == "message",
            let payload = parts[2].data
        else { return }
        _ = messages.deliver(payload)
    }
}
