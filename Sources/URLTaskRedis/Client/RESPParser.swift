import Foundation

/// An incremental RESP2/RESP3 parser: a pure state machine with no I/O. Feed it bytes as they
/// arrive (``append(_:)``), in pieces split anywhere (one byte at a time included), and take each
/// complete reply with ``next()``. Aggregates are built on a stack, so a large array or bulk
/// string arriving in many reads is scanned once, not re-parsed from its start on every read.
struct RESPParser {
    /// The largest bulk string accepted (Redis's own `proto-max-bulk-len` default).
    static let maximumBulkLength = 512 * 1024 * 1024
    /// The longest line (a simple string, an error, a header) accepted before the bytes are
    /// declared not RESP.
    static let maximumLineLength = 64 * 1024
    /// The most elements an aggregate header may announce.
    static let maximumAggregateCount = 64 * 1024 * 1024

    private enum AggregateKind {
        case array
        /// A RESP3 map (`%`), read as an array of alternating keys and values.
        case map
        /// A RESP3 attribute (`|`): read, then dropped; the value after it is the reply.
        case attribute
    }

    private struct Aggregate {
        var kind: AggregateKind
        var remaining: Int
        var elements: [RESPValue]
    }

    private enum BulkKind {
        case string
        /// RESP3's `!` blob error.
        case error
        /// RESP3's `=` verbatim string (its `txt:` prefix is dropped).
        case verbatim
    }

    private var buffer: [UInt8] = []
    private var readIndex = 0
    /// Where the search for the next CRLF resumes: bytes before it are known to hold none.
    private var scanIndex = 0
    private var stack: [Aggregate] = []
    /// A bulk header was read; its body (and CRLF) is awaited.
    private var pendingBulk: (kind: BulkKind, length: Int)?
    /// A violation is final: the stream cannot be resynchronised.
    private var failure: RedisError?

    /// Bytes held and not yet returned as replies.
    var bufferedByteCount: Int { buffer.count - readIndex }

    /// Whether a reply has started and not finished (the bytes held are part of one).
    var isMidReply: Bool { bufferedByteCount > 0 || !stack.isEmpty || pendingBulk != nil }

    /// Adds bytes received from the server.
    mutating func append<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        buffer.append(contentsOf: bytes)
    }

    /// The next complete reply, or `nil` until more bytes arrive. Throws `.protocolViolation`
    /// (and keeps throwing it) once the bytes are not RESP.
    mutating func next() throws(RedisError) -> RESPValue? {
        if let failure { throw failure }
        do {
            let value = try parse()
            compact()
            return value
        } catch {
            failure = error
            throw error
        }
    }

    private mutating func parse() throws(RedisError) -> RESPValue? {
        while true {
            var produced: RESPValue
            if let bulk = pendingBulk {
                guard buffer.count - readIndex >= bulk.length + 2 else { return nil }
                let end = readIndex + bulk.length
                guard buffer[end] == 13, buffer[end + 1] == 10 else { throw .violation("a bulk string did not end with CRLF") }
                let body = Data(buffer[readIndex..<end])
                readIndex = end + 2
                scanIndex = readIndex
                pendingBulk = nil
                switch bulk.kind {
                case .string: produced = .bulkString(body)
                case .error: produced = .error(String(decoding: body, as: UTF8.self))
                case .verbatim: produced = .bulkString(body.count >= 4 && body[body.startIndex + 3] == 58 ? body.dropFirst(4) : body)
                }
            } else {
                guard let lineEnd = findLineEnd() else {
                    if buffer.count - readIndex > Self.maximumLineLength { throw .violation("a line was longer than 64 KiB") }
                    return nil
                }
                guard lineEnd > readIndex else { throw .violation("a reply was an empty line") }
                let type = buffer[readIndex]
                let line = buffer[(readIndex + 1)..<lineEnd]
                readIndex = lineEnd + 2
                scanIndex = readIndex
                guard let value = try header(type: type, line: line) else { continue }
                produced = value
            }
            if let done = complete(produced) { return done }
        }
    }

    /// Reads one line's meaning: a value, or `nil` when it opened a bulk body or an aggregate.
    private mutating func header(type: UInt8, line: ArraySlice<UInt8>) throws(RedisError) -> RESPValue? {
        switch type {
        case UInt8(ascii: "+"): return .simpleString(String(decoding: line, as: UTF8.self))
        case UInt8(ascii: "-"): return .error(String(decoding: line, as: UTF8.self))
        case UInt8(ascii: ":"): return .integer(try integer(line))
        case UInt8(ascii: "_"): return .null
        case UInt8(ascii: "#"):
            guard line.count == 1, line.first == UInt8(ascii: "t") || line.first == UInt8(ascii: "f") else {
                throw .violation("a boolean was neither t nor f")
            }
            return .boolean(line.first == UInt8(ascii: "t"))
        case UInt8(ascii: ","):
            let text = String(decoding: line, as: UTF8.self)
            switch text {
            case "inf": return .double(.infinity)
            case "-inf": return .double(-.infinity)
            case "nan": return .double(.nan)
            default:
                guard let value = Double(text) else { throw .violation("a double was not a number") }
                return .double(value)
            }
        case UInt8(ascii: "("): return .simpleString(String(decoding: line, as: UTF8.self))
        case UInt8(ascii: "$"), UInt8(ascii: "!"), UInt8(ascii: "="):
            let length = try integer(line)
            if length == -1 && type == UInt8(ascii: "$") { return .bulkString(nil) }
            guard length >= 0, length <= Self.maximumBulkLength else { throw .violation("a bulk length was out of range") }
            let kind: BulkKind = type == UInt8(ascii: "$") ? .string : type == UInt8(ascii: "!") ? .error : .verbatim
            pendingBulk = (kind, Int(length))
            return nil
        case UInt8(ascii: "*"), UInt8(ascii: "~"), UInt8(ascii: ">"), UInt8(ascii: "%"), UInt8(ascii: "|"):
            let count = try integer(line)
            if count == -1 && type == UInt8(ascii: "*") { return .array(nil) }
            guard count >= 0, count <= Self.maximumAggregateCount else { throw .violation("an aggregate length was out of range") }
            let kind: AggregateKind = type == UInt8(ascii: "%") ? .map : type == UInt8(ascii: "|") ? .attribute : .array
            let elements = kind == .array ? Int(count) : Int(count) * 2
            if elements == 0 {
                if kind == .attribute { return nil }
                return .array([])
            }
            stack.append(Aggregate(kind: kind, remaining: elements, elements: []))
            return nil
        default:
            throw .violation("a reply began with an unknown type byte")
        }
    }

    /// Places a finished value in its aggregate; returns a reply when the outermost one is done.
    private mutating func complete(_ value: RESPValue) -> RESPValue? {
        var value = value
        while !stack.isEmpty {
            let top = stack.count - 1
            stack[top].elements.append(value)
            stack[top].remaining -= 1
            guard stack[top].remaining == 0 else { return nil }
            let finished = stack.removeLast()
            if finished.kind == .attribute { return nil }
            value = .array(finished.elements)
        }
        return value
    }

    private func integer(_ line: ArraySlice<UInt8>) throws(RedisError) -> Int64 {
        guard let value = Int64(String(decoding: line, as: UTF8.self)) else { throw .violation("an integer was not a number") }
        return value
    }

    /// The index of the CR of the next CRLF, or `nil` if none has arrived yet.
    private mutating func findLineEnd() -> Int? {
        var index = max(scanIndex, readIndex)
        while index + 1 < buffer.count {
            if buffer[index] == 13 && buffer[index + 1] == 10 {
                return index
            }
            index += 1
        }
        scanIndex = max(readIndex, buffer.count - 1)
        return nil
    }

    /// Drops consumed bytes once they are the larger part of the buffer.
    private mutating func compact() {
        if readIndex == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.count <= 1 << 20)
            readIndex = 0
            scanIndex = 0
        } else if readIndex > 4096 && readIndex * 2 > buffer.count {
            buffer.removeFirst(readIndex)
            scanIndex -= readIndex
            readIndex = 0
        }
    }
}

/// Encodes commands as RESP arrays of bulk strings, the only form a client sends.
enum RESPEncoder {
    /// Appends one command to `buffer`.
    static func append(_ arguments: [Data], to buffer: inout [UInt8]) {
        buffer.append(UInt8(ascii: "*"))
        buffer.append(contentsOf: String(arguments.count).utf8)
        buffer.append(contentsOf: [13, 10])
        for argument in arguments {
            buffer.append(UInt8(ascii: "$"))
            buffer.append(contentsOf: String(argument.count).utf8)
            buffer.append(contentsOf: [13, 10])
            buffer.append(contentsOf: argument)
            buffer.append(contentsOf: [13, 10])
        }
    }

    /// Appends one command of text arguments (UTF-8).
    static func append(_ arguments: [String], to buffer: inout [UInt8]) {
        append(arguments.map { Data($0.utf8) }, to: &buffer)
    }
}
