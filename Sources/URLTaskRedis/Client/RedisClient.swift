// SKELETON (branch i39-base): the API the fleet parts are written against. The client branch
// replaces every body; nothing here is meant to run.

import Foundation

/// A value in Redis's serialization protocol (RESP2, and the RESP3 types a server may answer
/// with after `HELLO 3`).
public enum RESPValue: Sendable, Equatable {
    case simpleString(String)
    /// A `-ERR ...` reply as a value (inside a pipeline's or a transaction's answers).
    case error(String)
    case integer(Int64)
    /// `nil` is RESP2's null bulk string.
    case bulkString(Data?)
    /// `nil` is RESP2's null array.
    case array([RESPValue]?)
    case null
    case boolean(Bool)
    case double(Double)
}

/// What went wrong talking to Redis. Never carries a password, a key's value or a credential.
public struct RedisError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The server answered with an error reply (`ERR`, `NOSCRIPT`, `WRONGPASS`, ...): its
        /// first word.
        case reply(code: String)
        /// No reply (or no connection) within the configured time.
        case timeout
        /// The connection closed, or could not be made.
        case connectionClosed
        /// The server's bytes were not RESP.
        case protocolViolation
    }

    public let kind: Kind
    /// What happened, without a secret.
    public let message: String

    public init(kind: Kind, message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

/// A script run with `EVALSHA`, loaded with `SCRIPT LOAD` the first time the server does not
/// know it (`NOSCRIPT`).
public struct RedisScript: Sendable, Hashable {
    public let source: String
    public let sha1: String

    public init(_ source: String) {
        self.source = source
        self.sha1 = ""
    }
}

/// A small Redis client over the platform's sockets.
public final class RedisClient: Sendable {
    public struct Configuration: Sendable {
        public enum Endpoint: Sendable, Equatable {
            case tcp(host: String, port: Int)
            case unixSocket(path: String)
        }

        public var endpoint: Endpoint
        public var username: String?
        public var password: String?
        public var database: Int
        public var connectTimeout: Duration
        public var replyTimeout: Duration
        /// The first wait before a reconnect, doubled up to `maximumReconnectDelay`.
        public var reconnectDelay: Duration
        public var maximumReconnectDelay: Duration

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
    }

    public let configuration: Configuration

    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// Sends one command (`["SET", "k", "v", "PX", "100"]`) and returns its reply; an error
    /// reply throws ``RedisError`` with kind `.reply`.
    public func send(_ arguments: [String]) async throws -> RESPValue {
        preconditionFailure("skeleton")
    }

    /// The same, with binary arguments.
    public func send(data arguments: [Data]) async throws -> RESPValue {
        preconditionFailure("skeleton")
    }

    /// Sends every command at once and reads the replies in order (an error reply is a
    /// `.error` value in its place, not a throw).
    public func pipeline(_ commands: [[String]]) async throws -> [RESPValue] {
        preconditionFailure("skeleton")
    }

    /// Runs `script` with `EVALSHA`, loading it once with `SCRIPT LOAD` when the server answers
    /// `NOSCRIPT` (after a restart, a `SCRIPT FLUSH`).
    public func run(_ script: RedisScript, keys: [String], arguments: [String]) async throws -> RESPValue {
        preconditionFailure("skeleton")
    }

    /// Messages published on `channel`, on a connection of their own (resubscribed after a
    /// reconnect); the stream ends when the task iterating it is cancelled or the client closes.
    public func subscribe(to channel: String) -> AsyncThrowingStream<Data, any Error> {
        preconditionFailure("skeleton")
    }

    /// Closes every connection; later calls throw `.connectionClosed`.
    public func close() {}
}
