import Foundation
import URLTaskManager

/// One `subscribe(to:)` stream: a connection of its own on a thread of its own, which
/// subscribes, yields each message's payload, and on a lost connection reconnects with back-off
/// and subscribes again until stopped (the iterating task cancelled, or the client closed).
/// Messages published while it is reconnecting are lost (Redis pub/sub keeps none): a consumer
/// re-reads what it waits for after each `onSubscribed`.
final class RedisSubscription: Sendable {
    private struct State {
        var stopped = false
        var fd: Int32?
    }

    let channel: String
    private let configuration: RedisClient.Configuration
    private let continuation: AsyncThrowingStream<Data, any Error>.Continuation
    private let onSubscribed: @Sendable () -> Void
    private let onEnd: @Sendable (ObjectIdentifier) -> Void
    private let state = LockedState(State())
    private let wake: (reader: Int32, writer: Int32)?

    init(
        channel: String, configuration: RedisClient.Configuration, continuation: AsyncThrowingStream<Data, any Error>.Continuation,
        onSubscribed: @escaping @Sendable () -> Void, onEnd: @escaping @Sendable (ObjectIdentifier) -> Void
    ) {
        self.channel = channel
        self.configuration = configuration
        self.continuation = continuation
        self.onSubscribed = onSubscribed
        self.onEnd = onEnd
        self.wake = try? RedisSocket.makeWakePair()
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
            continuation.finish(throwing: RedisError.closed("could not create a wake socket"))
            return
        }
        var failures = 0
        while !isStopped {
            do {
                try session()
                failures = 0
            } catch {
                if case .reply = error.kind {
                    continuation.finish(throwing: error)
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
        continuation.finish()
    }

    /// One connection: subscribes and yields messages until the connection ends. Throws when
    /// the attempt failed before the subscription was confirmed.
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
        var parser = RESPParser()
        let replies = try RedisHandshake.exchange(fd, [["SUBSCRIBE", channel]], parser: &parser, timeout: configuration.replyTimeout)
        if case .error(let text) = replies[0] { throw RedisError.reply(text, command: "SUBSCRIBE") }
        guard case .array(let parts?) = replies[0], parts.first?.string?.lowercased() == "subscribe" else {
            throw .violation("SUBSCRIBE was not confirmed")
        }
        onSubscribed()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var lastHeard = ContinuousClock.now
        var pingSentAt: ContinuousClock.Instant?
        while true {
            while let value = try parser.next() {
                lastHeard = .now
                pingSentAt = nil
                handle(value)
            }
            guard let wake else { return }
            // Silent for the health-check interval: PING; no answer in the reply timeout: gone.
            let deadline = pingSentAt.map { $0 + configuration.replyTimeout } ?? lastHeard + configuration.subscriptionHealthCheckInterval
            let wait = RedisSocket.milliseconds(until: deadline)
            if wait == 0 {
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

    private func handle(_ value: RESPValue) {
        guard case .array(let parts?) = value, parts.count == 3, parts[0].string?.lowercased() == "message",
            let payload = parts[2].data
        else { return }
        continuation.yield(payload)
    }
}
