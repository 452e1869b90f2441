import Foundation

/// A value in Redis's serialization protocol (RESP2, and the RESP3 types a server may answer
/// with after `HELLO 3`).
public enum RESPValue: Sendable, Equatable {
    /// A `+OK` status reply: short, binary-unsafe text such as `OK` or `PONG`.
    case simpleString(String)
    /// A `-ERR ...` reply as a value (inside a pipeline's or a transaction's answers).
    case error(String)
    /// A `:` reply: counters, lengths, booleans of RESP2.
    case integer(Int64)
    /// `nil` is RESP2's null bulk string.
    case bulkString(Data?)
    /// `nil` is RESP2's null array.
    case array([RESPValue]?)
    /// RESP3's `_` null.
    case null
    /// RESP3's `#t` / `#f`.
    case boolean(Bool)
    /// RESP3's `,` double.
    case double(Double)
}

extension RESPValue {
    /// The text of a simple or bulk string (UTF-8), or an integer's digits: what most replies
    /// are read as; `nil` for nulls, arrays and bytes that are not UTF-8.
    public var string: String? {
        switch self {
        case .simpleString(let text): return text
        case .bulkString(let data?): return String(data: data, encoding: .utf8)
        case .integer(let value): return String(value)
        case .double(let value): return String(value)
        default: return nil
        }
    }

    /// The bytes of a bulk string (or a simple string's UTF-8), for binary values.
    public var data: Data? {
        switch self {
        case .bulkString(let data): return data
        case .simpleString(let text): return Data(text.utf8)
        default: return nil
        }
    }

    /// An integer reply, or a string reply that holds an integer (Lua returns both).
    public var integer: Int64? {
        switch self {
        case .integer(let value): return value
        case .boolean(let value): return value ? 1 : 0
        case .simpleString, .bulkString: return string.flatMap { Int64($0) }
        default: return nil
        }
    }

    /// The elements of an array reply; `nil` for a null array or another type.
    public var array: [RESPValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    /// Whether the reply is a null of either protocol (a missing key, a timed-out `BLPOP`).
    public var isNull: Bool {
        switch self {
        case .null, .bulkString(nil), .array(nil): return true
        default: return false
        }
    }
}
