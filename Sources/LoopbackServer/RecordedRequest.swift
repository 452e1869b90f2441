import Foundation

/// One request exactly as the server received it, kept so tests can assert on what the client sent
/// (method, target, headers, body fingerprint, which connection carried it, and when).
public struct RecordedRequest: Sendable {
    /// The request method as sent, e.g. `GET`.
    public let method: String
    /// The path part of the request-target, without the query, not percent-decoded.
    public let path: String
    /// The query after `?` (without the `?`), or nil when the target had none.
    public let query: String?
    /// The raw request-target from the request line, e.g. `/a?b=1`.
    public let target: String
    /// The HTTP version from the request line, e.g. `HTTP/1.1`.
    public let version: String
    /// Header fields in wire order, with case-insensitive lookup.
    public let headers: HTTPFields
    /// The body bytes, up to the server's `bodyRecordLimit`; see `isBodyTruncated`.
    public let body: Data
    /// Total body bytes received (after removing chunked framing), even beyond the record limit.
    public let bodyLength: Int
    /// Lowercase hex SHA-256 of the whole body, computed while streaming, so huge uploads can be verified.
    public let bodySHA256: String
    /// Whether the body arrived with `Transfer-Encoding: chunked`.
    public let wasChunked: Bool
    /// Which TCP connection carried the request (1-based per server), to assert connection reuse.
    public let connectionID: Int
    /// Arrival order across the whole server (1-based), counted when the body was fully read.
    public let sequence: Int
    /// When the body was fully read.
    public let arrivedAt: ContinuousClock.Instant

    /// Whether `body` holds less than `bodyLength` bytes because the record limit was hit.
    public var isBodyTruncated: Bool { body.count < bodyLength }

    /// The recorded body decoded as UTF-8 (lossy), handy for text and JSON assertions.
    public var bodyText: String { String(decoding: body, as: UTF8.self) }

    /// Builds a record; public so handlers can be unit-tested without a socket.
    public init(
        method: String,
        target: String,
        version: String = "HTTP/1.1",
        headers: HTTPFields = [:],
        body: Data = Data(),
        bodyLength: Int? = nil,
        bodySHA256: String? = nil,
        wasChunked: Bool = false,
        connectionID: Int = 0,
        sequence: Int = 0,
        arrivedAt: ContinuousClock.Instant = .now
    ) {
        let (path, query) = RecordedRequest.split(target: target)
        self.method = method
        self.path = path
        self.query = query
        self.target = target
        self.version = version
        self.headers = headers
        self.body = body
        self.bodyLength = bodyLength ?? body.count
        self.bodySHA256 = bodySHA256 ?? SHA256.hex(body)
        self.wasChunked = wasChunked
        self.connectionID = connectionID
        self.sequence = sequence
        self.arrivedAt = arrivedAt
    }

    /// Splits a request-target into path and query; absolute-form targets lose their scheme and authority.
    static func split(target: String) -> (path: String, query: String?) {
        var rest = Substring(target)
        // Absolute-form (`http://host/path`) only: an origin-form target starts with `/`, and
        // its query may hold `://` (a `redirect_uri` left unescaped, as RFC 3986 allows).
        if !rest.hasPrefix("/"), let schemeEnd = rest.range(of: "://") {
            rest = rest[schemeEnd.upperBound...]
            rest = rest[(rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex)...]
        }
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        let mark = rest.firstIndex(of: "?")
        let path = String(rest[..<(mark ?? rest.endIndex)])
        let query = mark.map { String(rest[rest.index(after: $0)...]) }
        return (path.isEmpty ? "/" : path, query)
    }
}
