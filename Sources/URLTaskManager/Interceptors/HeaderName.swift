import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

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

extension URLRequest {
    /// Sets `value` under `name`, replacing the field under any spelling: what
    /// `setValue(_:forHTTPHeaderField:)` does, for the library's interceptors that set a header
    /// on every request, and for yours.
    ///
    /// On corelibs `setValue` capitalizes the name with Foundation's locale-aware `capitalized`
    /// and checks the value character by character on every call, for a header an interceptor
    /// sets on every request (its cost: <doc:Performance>, "Single operations on Linux"). Here
    /// the name was capitalized once (``HeaderName``), and the value is not checked: every
    /// header of a task is checked byte by byte before it is sent
    /// (``HeaderValidation/firstProblem(in:)``), which fails the task with
    /// ``URLTaskError/Code-swift.struct/invalidHeader`` where corelibs' `setValue` would have
    /// dropped the header without a word.
    public mutating func replaceHeader(_ name: HeaderName, with value: String) {
        Platform.replaceHeader(name, with: value, in: &self)
    }

    /// Sets every one of `headers` as ``replaceHeader(_:with:)`` does, in order, with one write
    /// of the request's header fields (on corelibs each write of a request shared with another
    /// holder copies the whole request first). A request without headers yet, the common case,
    /// gets them without a search for other spellings.
    public mutating func replaceHeaders(_ headers: [(name: HeaderName, value: String)]) {
        guard !headers.isEmpty else { return }
        Platform.replaceHeaders(headers, in: &self)
    }

    /// The value of `name` under any spelling: what `value(forHTTPHeaderField:)` answers.
    ///
    /// On corelibs `value(forHTTPHeaderField:)` compares every field name with Foundation's
    /// case-insensitive, locale-aware string comparison (its cost: the Performance article,
    /// "Single operations on Linux"), and the send path asks two of them (`Content-Length`, the
    /// policy's header) of every request; field names are ASCII tokens, compared here byte by
    /// byte.
    func headerValue(_ name: HeaderName) -> String? {
        Platform.headerValue(name, in: self)
    }

    /// The values of two names under any spelling, read together (``PlatformSupport/headerValues(_:_:in:)``).
    func headerValues(_ first: HeaderName, _ second: HeaderName) -> (String?, String?) {
        Platform.headerValues(first, second, in: self)
    }
}
