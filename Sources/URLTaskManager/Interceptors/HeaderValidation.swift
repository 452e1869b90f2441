import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Refuses header names and values that would corrupt the request on the wire.
///
/// A CR or LF in a value ends the header early and lets the rest be read as another header
/// or another request (response splitting, request smuggling); a name that is not an RFC 9110
/// token is not a header at all. Either way the task fails with
/// ``URLTaskError/Code-swift.struct/invalidHeader`` instead of being sent.
public enum HeaderValidation {
    /// Whether `name` is a valid HTTP field name (an RFC 9110 token).
    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy(isTokenByte)
    }

    /// Whether `value` may be sent: no CR, LF or NUL.
    public static func isValidValue(_ value: String) -> Bool {
        !value.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0x00 }
    }

    /// The first problem in `request`'s headers, as the error the task fails with.
    public static func firstProblem(in request: URLRequest) -> URLTaskError? {
        guard let fields = request.allHTTPHeaderFields else { return nil }
        for (name, value) in fields {
            if let problem = problem(name: name) ?? problem(name: name, value: value) { return problem }
        }
        return nil
    }

    /// The error for an invalid field name, or `nil` if `name` is a valid token: what an
    /// interceptor of yours fails a task with (``InterceptCommand/fail(_:)``) rather than send a
    /// header it was given, as ``HeaderInterceptor`` does.
    public static func problem(name: String) -> URLTaskError? {
        isValidName(name) ? nil : .invalidHeader(name: name, reason: "the name is not an HTTP token")
    }

    /// The error for a value that must not be sent under `name`, or `nil` if it is safe (see
    /// ``problem(name:)``).
    public static func problem(name: String, value: String) -> URLTaskError? {
        isValidValue(value) ? nil : .invalidHeader(name: name, reason: "the value contains CR, LF or NUL")
    }

    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }
}
