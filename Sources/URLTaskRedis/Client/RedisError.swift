/// What went wrong talking to Redis. Never carries a password, a key's value or a credential.
public struct RedisError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The four ways a call can fail, each handled differently by callers: a reply error is the
    /// server's verdict (do not retry as is), the other three say Redis could not be reached in
    /// time (fall back, or try again later).
    public enum Kind: Sendable, Equatable {
        /// The server answered with an error reply (`ERR`, `NOSCRIPT`, `WRONGPASS`, ...): its
        /// first word.
        case reply(code: String)
        /// No reply (or no connection) within the configured time.
        case timeout
        /// The connection closed, or could not be made.
        case connectionClosed
        /// The server's bytes were not RESP, or a reply passed the client's limits
        /// (`RedisClient.Configuration.maximumReplyDepth`, `maximumReplySize`: the message says
        /// which, and how to raise it). The connection was closed.
        case protocolViolation
    }

    /// Which of the four failures this is: what a caller switches on.
    public let kind: Kind
    /// What happened, without a secret.
    public let message: String

    /// Makes an error (the client makes them; public so that tests and fakes can too).
    public init(kind: Kind, message: String) {
        self.kind = kind
        self.message = message
    }

    /// The message: safe to log, it names the command and never an argument.
    public var description: String { message }
}

extension RedisError {
    /// The first word of a command, upper-cased, letters only: the one part of a command an error
    /// may name (its arguments may be secrets).
    static func commandName(_ first: String?) -> String {
        guard let first else { return "(empty command)" }
        let name = String(first.uppercased().prefix(24).filter { $0.isASCII && ($0.isLetter || $0 == "_") })
        return name.isEmpty ? "(command)" : name
    }

    /// An error reply's code (its first word, letters only), without the rest of its text: the
    /// text can quote arguments (`ERR unknown command 'x', with args beginning with: 'secret'`).
    static func replyCode(_ text: String) -> String {
        let first = text.prefix { $0 != " " && $0 != "\r" && $0 != "\n" }
        let code = String(first.prefix(32).filter { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") })
        return code.isEmpty ? "ERR" : code
    }

    static func reply(_ text: String, command: String) -> RedisError {
        let code = replyCode(text)
        return RedisError(kind: .reply(code: code), message: "Redis answered \(command) with an error reply (\(code))")
    }

    static func closed(_ why: String) -> RedisError {
        RedisError(kind: .connectionClosed, message: why)
    }

    static func timeout(_ why: String) -> RedisError {
        RedisError(kind: .timeout, message: why)
    }

    static func violation(_ why: String) -> RedisError {
        RedisError(kind: .protocolViolation, message: why)
    }
}
