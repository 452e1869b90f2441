/// A header field name, with the spelling Foundation stores it under, worked out once.
///
/// corelibs' `URLRequest.setValue(_:forHTTPHeaderField:)` capitalizes the name through
/// Foundation's locale-aware `capitalized` on every call (`x-request-id` is stored as
/// `X-Request-Id`). An interceptor that sets the same header on every request names it once with
/// this type and sets it with `URLRequest.replaceHeader(_:with:)`.
public struct HeaderName: Sendable, Hashable {
    /// The name as the caller spelled it.
    public let spelled: String
    /// The name as the platform's `setValue` would store it.
    public let stored: String

    /// Works out the stored spelling of `name` once, for an interceptor to keep.
    public init(_ name: String) {
        spelled = name
        stored = Platform.storedSpelling(ofHeader: name)
    }

    /// Whether `other` is this field under any spelling (field names are ASCII tokens and
    /// compare without regard to case).
    public func matches(_ other: String) -> Bool {
        other.utf8.count == stored.utf8.count && zip(other.utf8, stored.utf8).allSatisfy { Self.lowered($0) == Self.lowered($1) }
    }

    private static func lowered(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 : byte
    }
}
