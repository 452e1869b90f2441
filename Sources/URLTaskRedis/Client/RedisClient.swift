import Foundation
import URLTaskManager

/// A script run with `EVALSHA`, loaded with `SCRIPT LOAD` the first time the server does not
/// know it (`NOSCRIPT`).
public struct RedisScript: Sendable, Hashable {
    /// The Lua source, sent only when the server does not have the script (`SCRIPT LOAD`).
    public let source: String
    /// The SHA-1 of `source` in lower-case hex: the name `EVALSHA` runs it by, so a call sends the
    /// 40-character digest rather than the whole script.
    public let sha1: String

    /// Computes the script's SHA-1 once, here, so every run costs no hashing.
    public init(_ source: String) {
        self.source = source
        self.sha1 = SHA1.hex(Array(source.utf8))
    }
}

/// A small Redis client over the platform's sockets.
///
/// Commands share one connection and are answered in order (FIFO), so concurrent callers
/// pipeline naturally. The connection is made on the first command, authenticated (`AUTH`) and
/// switched to the configured database (`SELECT`). When it closes, the commands in flight fail
/// with `.connectionClosed` (none is ever sent again on its own: the caller knows whether its
/// command may be repeated) and the next command reconnects. A failed attempt starts a back-off
/// (``Configuration/reconnectDelay``, doubled to ``Configuration/maximumReconnectDelay``) during
/// which commands fail at once with the failed attempt's error (`.connectionClosed` for a refused
/// connection, `.timeout`, or the `AUTH` reply such as `WRONGPASS`), so a caller falls back
/// without waiting on an unreachable server. A reply that does not come within
/// ``Configuration/replyTimeout`` fails its command with `.timeout` and closes the connection
/// (the replies after it could no longer be matched to their commands).
///
/// Subscriptions (``subscribe(to:)``) each have a connection of their own. Blocking commands
/// (`BLPOP` ...) longer than the reply timeout, `SUBSCRIBE` and `MONITOR` are not for ``send(_:)``.
/// Reads and connection attempts run on threads of the client's own (one reader per connection,
/// one per connection attempt, one per subscription), never blocking the concurrency pool's
/// threads; a command is written by its caller (a blocked write gives up after the reply
/// timeout). Cancelling a caller's task does not withdraw a command already written: the reply
/// timeout bounds the wait. RESP3 push messages (`CLIENT TRACKING`) are not supported on the
/// command connection.
///
/// A reply's bytes come from the network, so each reply is bounded: nested at most
/// ``Configuration/maximumReplyDepth`` deep (32 by default) and holding at most
/// ``Configuration/maximumReplySize`` while it is read (16 MiB by default). A reply past either
/// fails its command with `.protocolViolation`, whose message names the setting to raise, and
/// closes the connection as bytes that are not RESP do (the next command reconnects); a peer
/// announcing gigabytes is refused at the header, before its bytes are read.
public final class RedisClient: Sendable {
    /// Where Redis is and how to talk to it: one value per client, fixed at creation.
    public struct Configuration: Sendable {
        /// The server's address: TCP for a shared Redis, a Unix socket for one on the same host
        /// (no TCP stack, file permissions as access control).
        public enum Endpoint: Sendable, Equatable {
            /// A host name or address and a port (every address the name resolves to is tried).
            case tcp(host: String, port: Int)
            /// The path of the server's `unixsocket`.
            case unixSocket(path: String)
        }

        /// Where to connect.
        public var endpoint: Endpoint
        /// The ACL user (`AUTH username password`); `nil` with a password is `AUTH password`
        /// (the `default` user, or `requirepass`).
        public var username: String?
        /// Sent once per connection, never logged nor put in an error.
        public var password: String?
        /// The database `SELECT`ed on every new connection (0: no `SELECT`).
        public var database: Int
        /// How long a connection attempt may take (TCP's own timeout is minutes).
        public var connectTimeout: Duration
        /// How long each reply may take after its command was sent (or the reply before it came).
        public var replyTimeout: Duration
        /// The first wait before a reconnect, doubled up to `maximumReconnectDelay`.
        public var reconnectDelay: Duration
        /// The longest wait between attempts while Redis is unreachable.
        public var maximumReconnectDelay: Duration
        /// How long a subscription's connection may stay silent before it sends `PING`; no
        /// answer within `replyTimeout` and it reconnects (a server gone without closing the
        /// connection, a network partition, is otherwise never noticed by a subscriber).
        public var subscriptionHealthCheckInterval: Duration = .seconds(15)
        /// The deepest nesting of arrays (maps, sets, pushes) a reply may have: 32 by default,
        /// at most 128 (a larger setting counts as 128, values below 1 as 1). Redis's own
        /// replies are a few levels deep (`XREAD`'s are 5) and the fleet's scripts answer flat
        /// arrays; a peer that nests deeper is not Redis, and a value nested 100,000 deep
        /// overflowed the stack of the thread that released it. A deeper reply fails its
        /// command with `.protocolViolation`, whose message names this setting, and closes the
        /// connection (the stream cannot be resynchronised).
        public var maximumReplyDepth: Int = Configuration.defaultMaximumReplyDepth
        /// The most memory one reply may hold while it is read: 16 MiB by default (as
        /// `URLTaskManager.Options.maximumHeldBodySize`). Counted are the bytes of its strings,
        /// as their headers announce them, and the storage of its arrays (about 24 bytes an
        /// element), so a reply announcing more is refused at its header, before its bytes are
        /// read, and an endless one once it holds the limit; either fails its command with
        /// `.protocolViolation`, whose message names this setting, and closes the connection.
        /// The fleet's records and answers are a few hundred bytes; raise it to `GET` larger
        /// values (Redis's own limit on a string is 512 MB, `proto-max-bulk-len`, which stays
        /// the limit on a bulk string whatever this says). A subscription's connection reads
        /// each message under the same limit and holds at most this much of messages its
        /// reader has not taken (see ``RedisClient/subscribe(to:onSubscribed:)``).
        public var maximumReplySize: Int = Configuration.defaultMaximumReplySize

        /// ``maximumReplyDepth``'s default.
        static let defaultMaximumReplyDepth = 32
        /// ``maximumReplySize``'s default.
        static let defaultMaximumReplySize = 16 * 1024 * 1024
        /// The deepest ``maximumReplyDepth`` can be set to: a value this deep is still compared,
        /// printed, dumped and released on a thread with a 512 KiB stack (`RESPLimitTests`);
        /// printing and `dump(_:)` recurse through reflection, about 2.5 KB of stack a level in a
        /// debug build, and gave out at about 200 levels there.
        static let maximumReplyDepthCeiling = 128

        /// Every setting but the endpoint has a default fit for a Redis on the same network.
        public init(
            endpoint: Endpoint, username: String? = nil, password: String? = nil, database: Int = 0,
            connectTimeout: Duration = .seconds(2), replyTimeout: Duration = .seconds(2),
            reconnectDelay: Duration = .milliseconds(50), maximumReconnectDelay: Duration = .seconds(2)
        ) {
            self.endpoint = endpoint
            self.username = username
            self.password = password
            self.database = database
            self.connectTimeout = connectTimeout
            self.replyTimeout = replyTimeout
            self.reconnectDelay = reconnectDelay
            self.maximumReconnectDelay = maximumReconnectDelay
        }

        /// Reads the usual Redis URL, so a fleet's processes can share one setting (an
        /// environment variable): `redis://[user[:password]@]host[:port][/database]` (port 6379
        /// by default; `redis://:password@host` for a password alone) or `unix:///path/to/redis.sock[?db=N]`, user and password
        /// percent-decoded. `nil` for any other scheme (`rediss://` included: TLS is not
        /// supported; put a TLS proxy such as stunnel in front on the client's side). The other
        /// settings keep their defaults.
        public init?(url: URL) {
            guard let components = URLComponents(url: url, resolvingAgainstBaseURL: false), let scheme = components.scheme?.lowercased()
            else { return nil }
            let database: Int
            switch scheme {
            case "redis":
                guard let host = components.host, !host.isEmpty else { return nil }
                let path = components.path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
                guard let number = path.isEmpty ? 0 : Int(path), number >= 0 else { return nil }
                database = number
                let bracketless = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
                self.init(endpoint: .tcp(host: bracketless, port: components.port ?? 6379), database: database)
            case "unix":
                guard !components.path.isEmpty else { return nil }
                let db = components.queryItems?.first { $0.name == "db" }?.value
                guard let number = db.map({ Int($0) }) ?? 0, number >= 0 else { return nil }
                database = number
                self.init(endpoint: .unixSocket(path: components.path), database: database)
            default:
                return nil
            }
            if let user = components.percentEncodedUser, !user.isEmpty { username = user.removingPercentEncoding ?? user }
            if let secret = components.percentEncodedPassword { password = secret.removingPercentEncoding ?? secret }
        }
    }

    private typealias Waiter = CheckedContinuation<RedisConnection, any Error>

    private struct State {
        var lifecycle: ConnectionLifecycle<RedisConnection, Waiter>
        var subscriptions: [ObjectIdentifier: RedisSubscription] = [:]
        var closed = false
        /// Why the last connection attempt failed: what a command refused during the back-off
        /// is told (a wrong password stays a `WRONGPASS`, not a vague "unreachable").
        var lastConnectError: RedisError?
    }

    /// The settings this client was made with.
    public let configuration: Configuration
    private let state: LockedState<State>

    /// Makes a client; nothing connects until the first command (or subscription).
    public init(configuration: Configuration) {
        self.configuration = configuration
        self.state = LockedState(
            State(
                lifecycle: ConnectionLifecycle(
                    reconnectDelay: configuration.reconnectDelay, maximumReconnectDelay: configuration.maximumReconnectDelay)))
    }

    deinit {
        close()
    }

    /// Sends one command (`["SET", "k", "v", "PX", "100"]`) and returns its reply; an error
    /// reply throws ``RedisError`` with kind `.reply`.
    public func send(_ arguments: [String]) async throws -> RESPValue {
        try await send(data: arguments.map { Data($0.utf8) })
    }

    /// The same, with binary arguments.
    public func send(data arguments: [Data]) async throws -> RESPValue {
        guard let first = arguments.first else {
            throw RedisError(kind: .reply(code: "ERR"), message: "an empty command was not sent")
        }
        let name = RedisError.commandName(String(decoding: first.prefix(32), as: UTF8.self))
        var bytes: [UInt8] = []
        RESPEncoder.append(arguments, to: &bytes)
        let replies = try await request(bytes, expected: 1, command: name)
        if case .error(let text) = replies[0] { throw RedisError.reply(text, command: name) }
        return replies[0]
    }

    /// Sends every command at once and reads the replies in order (an error reply is a
    /// `.error` value in its place, not a throw).
    public func pipeline(_ commands: [[String]]) async throws -> [RESPValue] {
        guard !commands.isEmpty else { return [] }
        var bytes: [UInt8] = []
        for command in commands {
            guard !command.isEmpty else {
                throw RedisError(kind: .reply(code: "ERR"), message: "a pipeline with an empty command was not sent")
            }
            RESPEncoder.append(command, to: &bytes)
        }
        let name = "a pipeline of \(commands.count) commands beginning with \(RedisError.commandName(commands[0].first))"
        return try await request(bytes, expected: commands.count, command: name)
    }

    /// Runs `script` with `EVALSHA`, loading it once with `SCRIPT LOAD` when the server answers
    /// `NOSCRIPT` (after a restart, a `SCRIPT FLUSH`).
    public func run(_ script: RedisScript, keys: [String], arguments: [String]) async throws -> RESPValue {
        let evalsha = ["EVALSHA", script.sha1, String(keys.count)] + keys + arguments
        do {
            return try await send(evalsha)
        } catch let error as RedisError where error.kind == .reply(code: "NOSCRIPT") {
            // One round trip: the load and the second run are pipelined.
            let replies = try await pipeline([["SCRIPT", "LOAD", script.source], evalsha])
            if case .error(let text) = replies[0] { throw RedisError.reply(text, command: "SCRIPT") }
            if case .error(let text) = replies[1] { throw RedisError.reply(text, command: "EVALSHA") }
            return replies[1]
        }
    }

    /// Messages published on `channel`, on a connection of their own (resubscribed after a
    /// reconnect); the stream ends when the task iterating it is cancelled, when it is released,
    /// or when the client closes.
    public func subscribe(to channel: String) -> AsyncThrowingStream<Data, any Error> {
        subscribe(to: channel, onSubscribed: {})
    }

    /// The same, calling `onSubscribed` each time the server confirms the subscription: first,
    /// and again after every reconnect (on the subscription's thread: keep it short). Messages published before it (or during a reconnect) are
    /// not delivered, so a waiter re-reads the state it waits on after each call. The stream
    /// throws (and ends) when the server refuses the subscription (`NOPERM`, `WRONGPASS`);
    /// an unreachable server is retried with back-off, without ending the stream, and so is a
    /// connection closed because a message was not RESP, passed the reply limits
    /// (``Configuration/maximumReplyDepth``, ``Configuration/maximumReplySize``) or did not
    /// arrive whole within ``Configuration/replyTimeout`` once begun.
    ///
    /// Messages the stream's reader has not taken yet are kept up to
    /// ``Configuration/maximumReplySize`` bytes; past it the subscription reads nothing more
    /// from its connection until the reader catches up, so that a flood nobody reads holds
    /// bounded memory and the client drops no message. Redis then keeps the messages in its
    /// output buffer, and closes a subscriber that is too far behind (its
    /// `client-output-buffer-limit pubsub`): the subscription reconnects and `onSubscribed` is
    /// called, as after any lost connection.
    public func subscribe(to channel: String, onSubscribed: @escaping @Sendable () -> Void) -> AsyncThrowingStream<Data, any Error> {
        let subscription = RedisSubscription(
            channel: channel, configuration: configuration, onSubscribed: onSubscribed,
            onEnd: { [weak self] id in
                self?.state.withLock { _ = $0.subscriptions.removeValue(forKey: id) }
            })
        let reader = SubscriptionReader(subscription)
        // Pulled, not pushed: a message is read off the connection only while the reader keeps
        // up (within the budget), and the stream's end (its task cancelled, the stream
        // released) releases `reader`, which stops the subscription.
        let stream = AsyncThrowingStream<Data, any Error> { try await reader.next() }
        let accepted = state.withLock { state in
            guard !state.closed else { return false }
            state.subscriptions[ObjectIdentifier(subscription)] = subscription
            return true
        }
        guard accepted else {
            subscription.messages.finish(throwing: RedisError.closed("the client was closed"))
            return stream
        }
        subscription.start()
        return stream
    }

    /// Closes every connection; later calls throw `.connectionClosed`.
    public func close() {
        let (closing, subscriptions) = state.withLock { state in
            state.closed = true
            let subscriptions = Array(state.subscriptions.values)
            state.subscriptions = [:]
            return (state.lifecycle.close(), subscriptions)
        }
        closing.connection?.close()
        for waiter in closing.waiters { waiter.resume(throwing: RedisError.closed("the client was closed")) }
        for subscription in subscriptions { subscription.stop() }
    }

    // MARK: - The command connection

    private var endpointName: String {
        switch configuration.endpoint {
        case .tcp(let host, let port): return "\(host):\(port)"
        case .unixSocket(let path): return path
        }
    }

    /// Sends on the command connection; when the connection turns out closed before the bytes
    /// were written (it died a moment ago), once more on a new one: nothing had been sent.
    private func request(_ bytes: [UInt8], expected: Int, command: String) async throws -> [RESPValue] {
        for _ in 0..<2 {
            let connection = try await connection()
            do {
                return try await connection.request(bytes, expected: expected, command: command)
            } catch is RedisConnection.NotSent {
                state.withLock { $0.lifecycle.lost(connection) }
            }
        }
        throw RedisError.closed("the connection closed before \(command) could be sent")
    }

    /// The open command connection, made (or waited for) if there is none.
    private func connection() async throws -> RedisConnection {
        let connection = try await connectionHandedOver()
        // A connection made on the connect thread reaches this task through the continuation;
        // taking the lock the connect thread registered it under orders its construction before
        // its first use in a way the thread sanitizer sees (it does not see the Swift runtime's
        // hand-over on Linux, and reported the connection's fields as raced).
        state.withLock { _ in }
        return connection
    }

    private func connectionHandedOver() async throws -> RedisConnection {
        try await withCheckedThrowingContinuation { (waiter: Waiter) in
            let (action, lastError) = state.withLock { ($0.lifecycle.acquire(waiter, now: .now), $0.lastConnectError) }
            switch action {
            case .use(let connection):
                waiter.resume(returning: connection)
            case .wait:
                break
            case .failClosed:
                waiter.resume(throwing: RedisError.closed("the client was closed"))
            case .failBackingOff(let remaining):
                let milliseconds = remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000
                let why = lastError?.message ?? "Redis at \(endpointName) could not be reached"
                waiter.resume(
                    throwing: RedisError(
                        kind: lastError?.kind ?? .connectionClosed, message: "\(why); the next attempt is in \(milliseconds) ms"))
            case .connect:
                let configuration = self.configuration
                Thread.detachNewThread { [self] in
                    let result: Result<Int32, RedisError>
                    do throws(RedisError) {
                        result = .success(try RedisHandshake.open(configuration))
                    } catch {
                        result = .failure(error)
                    }
                    finishConnecting(result)
                }
            }
        }
    }

    private func finishConnecting(_ result: Result<Int32, RedisError>) {
        let outcome = result.flatMap { fd -> Result<RedisConnection, RedisError> in
            do throws(RedisError) {
                return .success(
                    try RedisConnection(fd: fd, configuration: configuration) { [weak self] connection in
                        self?.state.withLock { $0.lifecycle.lost(connection) }
                    })
            } catch {
                RedisSocket.closeDescriptor(fd)
                return .failure(error)
            }
        }
        switch outcome {
        case .success(let connection):
            let waiters = state.withLock { state in
                state.lastConnectError = nil
                return state.lifecycle.connected(connection)
            }
            guard let waiters else {
                connection.close()
                return
            }
            // The connection may have closed before it was registered: its `onClose` found
            // nothing to clear.
            if !connection.isOpen { state.withLock { $0.lifecycle.lost(connection) } }
            for waiter in waiters { waiter.resume(returning: connection) }
        case .failure(let error):
            let waiters = state.withLock { state in
                state.lastConnectError = error
                return state.lifecycle.connectFailed(now: .now)
            }
            for waiter in waiters { waiter.resume(throwing: error) }
        }
    }
}
