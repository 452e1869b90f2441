import Foundation

/// A response as `RawHTTPConnection` parsed it off the wire, so tests can assert on exact framing.
public struct RawHTTPResponse: Sendable {
    /// The version from the status line, e.g. `HTTP/1.1`.
    public let version: String
    /// The status code.
    public let status: Int
    /// The reason phrase (may be empty).
    public let reason: String
    /// Header fields in wire order.
    public let headers: HTTPFields
    /// The body with any chunked framing removed.
    public let body: Data
    /// Whether the body was sent with `Transfer-Encoding: chunked`.
    public let wasChunked: Bool

    /// The body decoded as UTF-8 (lossy).
    public var bodyText: String { String(decoding: body, as: UTF8.self) }
}
