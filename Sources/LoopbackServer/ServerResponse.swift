import Foundation

/// What a route handler answers with: a status, headers and a body, plus the misbehaviours
/// (delays, dropped connections) that client code must be tested against.
public struct ServerResponse: Sendable {
    /// The status code, e.g. 200.
    public var status: Int
    /// Header fields to send. The server adds `Content-Length` or `Transfer-Encoding` for the body
    /// (and `Connection: close` when closing) unless you set them yourself, which lets a test send
    /// deliberately wrong framing.
    public var headers: HTTPFields
    /// The body and how it is framed on the wire.
    public var body: Body
    /// Wait this long before sending the status line, to exercise client timeouts and cancellation.
    public var delay: Duration?
    /// Send the head and this many body bytes (as they go on the wire, so including chunk framing
    /// for chunked bodies), then close the connection without finishing the message, like a server
    /// dying mid-response. `0` closes right after the head. See `dropStyle` for how it closes.
    public var dropAfterBodyBytes: Int?
    /// Send only this many bytes of the head (the status line and header fields as they go on the
    /// wire), then close the connection as `dropStyle` says: a server dying before its response
    /// is whole, which clients must report as an error and never mistake for a response.
    public var dropAfterHeadBytes: Int?
    /// Whether a dropped response resets the connection (the default) or closes it in an orderly way.
    public var dropStyle: DropStyle
    /// Send `Connection: close` and close the connection after this response.
    public var closeConnection: Bool
    /// Interim (1xx) responses sent, head only, before this one: `[103]` sends
    /// `103 Early Hints` first, as a server pushing preload hints does.
    public var informational: [Int]
    /// Called on the server thread once the response has been written, or once writing it
    /// failed or was cut short: a test learns that a client stopped reading (a write failed
    /// with a broken pipe or a reset) as an event, and how much of the body got out first.
    public var onSent: (@Sendable (SendOutcome) -> Void)?

    /// How the writing of a response ended, as ``onSent`` reports it.
    public struct SendOutcome: Sendable {
        /// Body bytes handed to the socket (as they go on the wire, chunk framing included)
        /// before the response was complete or the writing stopped.
        public let bodyBytesSent: Int
        /// Whether the whole response was written; `false` when a write failed (the client
        /// closed the connection) or the response was dropped on purpose.
        public let completed: Bool
    }

    /// A response; the defaults are an empty `200 OK`.
    public init(status: Int = 200, headers: HTTPFields = [:], body: Body = .empty) {
        self.status = status
        self.headers = headers
        self.body = body
        self.delay = nil
        self.dropAfterBodyBytes = nil
        self.dropAfterHeadBytes = nil
        self.dropStyle = .reset
        self.closeConnection = false
        self.informational = []
        self.onSent = nil
    }

    /// A UTF-8 `text/plain` response.
    public static func text(_ string: String, status: Int = 200) -> ServerResponse {
        ServerResponse(
            status: status,
            headers: ["Content-Type": "text/plain; charset=utf-8"],
            body: .data(Data(string.utf8))
        )
    }

    /// An `application/json` response from an `Encodable` value (sorted keys, so bodies are stable);
    /// an encoding failure becomes a 500 whose body names the error, rather than a crash.
    public static func json(_ object: some Encodable, status: Int = 200) -> ServerResponse {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        do {
            return json(try encoder.encode(object), status: status)
        } catch {
            return text("JSON encoding failed: \(error)", status: 500)
        }
    }

    /// An `application/json` response from bytes that are already encoded.
    public static func json(_ data: Data, status: Int = 200) -> ServerResponse {
        ServerResponse(status: status, headers: ["Content-Type": "application/json"], body: .data(data))
    }

    /// A redirect with a `Location` header (relative or absolute) and an empty body.
    public static func redirect(to location: String, status: Int = 302) -> ServerResponse {
        ServerResponse(status: status, headers: ["Location": location])
    }

    /// A bare status with an empty body.
    public static func status(_ code: Int) -> ServerResponse {
        ServerResponse(status: code)
    }

    /// A copy changed by `modify`, so canned responses can be adjusted inline:
    /// `.text("hi").with { $0.delay = .milliseconds(200) }`.
    public func with(_ modify: (inout ServerResponse) -> Void) -> ServerResponse {
        var copy = self
        modify(&copy)
        return copy
    }
}
