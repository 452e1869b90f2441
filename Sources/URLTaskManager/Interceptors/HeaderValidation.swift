/// Refuses header names and values that would corrupt the request on the wire.
///
/// A CR or LF in a value ends the header early and lets the rest be read as another header
/// or another request (response splitting, request smuggling); a name that is not an RFC 9110
/// token is not a header at all. Either way the task fails with
/// ``URLTaskError/invalidHeader(name:reason:)`` instead of being sent.
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
            if !isValidName(name) {
                return .invalidHeader(name: name, reason: "the name is not an HTTP token")
            }
            if !isValidValue(value) {
                return .invalidHeader(name: name, reason: "the value contains CR, LF or NUL")
            }
        }
        return nil
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
