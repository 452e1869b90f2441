import Foundation

/// An incremental RESP2/RESP3 parser: a pure state machine with no I/O. Feed it bytes as they
/// arrive (``append(_:)``), in pieces split anywhere (one byte at a time included), and take each
/// complete reply with ``next()``. Aggregates are built on a stack, so a large array or bulk
/// string arriving in many reads is scanned once, not re-parsed from its start on every read.
///
/// A reply is bounded twice, because its bytes come from the network: by its nesting
/// (``maximumDepth``: a value nested 100,000 deep overflowed the stack of the thread that
/// released it) and by the memory it holds while it is read (``maximumSize``: the storage of its
/// arrays, reserved when their header announces them, and the bytes of its strings, counted when
/// a bulk header announces them), so that a peer announcing gigabytes is refused at the header,
/// before its bytes are read, and one streaming an endless reply is refused once the reply holds
/// the limit. A refusal is a `.protocolViolation` like any other: the stream cannot be
/// resynchronised.
struct RESPParser {
    /// The largest bulk string accepted whatever ``maximumSize`` says (Redis's own
    /// `proto-max-bulk-len` default).
    static let maximumBulkLength = 512 * 1024 * 1024
    /// The longest line (a simple string, an error, a header) accepted before the bytes are
    /// declared not RESP.
    static let maximumLineLength = 64 * 1024
    /// The most elements an aggregate header may announce whatever ``maximumSize`` says.
    static let maximumAggregateCount = 64 * 1024 * 1024
    /// The memory one element of an aggregate takes: its slot in the array.
    static let elementSize = MemoryLayout<RESPValue>.stride
    /// What an allocation costs beyond its bytes (the header of an array's storage, the
    /// allocator's bookkeeping), counted for every array and every string not stored inline.
    static let allocationOverhead = 32
    /// The longest string stored inline (in the value itself, no allocation): Swift's small
    /// strings and `Data`'s inline form hold up to 14 or 15 bytes.
    static let inlineLength = 14

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

    /// The deepest nesting of aggregates a reply may have (a top-level array is 1 deep).
    let maximumDepth: Int
    /// The most memory the reply being read may hold (see ``RESPParser``).
    let maximumSize: Int

    private var buffer: [UInt8] = []
    private var readIndex = 0
    /// Where the search for the next CRLF resumes: bytes before it are known to hold none.
    private var scanIndex = 0
    private var stack: [Aggregate] = []
    /// A bulk header was read; its body (and CRLF) is awaited.
    private var pendingBulk: (kind: BulkKind, length: Int)?
    /// The part of the pending bulk's body that has arrived, once it did not arrive whole with
    /// its header: moved out of `buffer` as it comes, so that the body is held once, at the
    /// size its header announced, and handed over without a copy.
    private var bulkBody: Data?
    /// The memory the reply being read holds: what counts toward ``maximumSize``.
    private var heldBytes = 0
    /// A violation is final: the stream cannot be resynchronised.
    private var failure: RedisError?

    /// A parser whose replies may be `maximumDepth` deep and hold `maximumSize` bytes (the
    /// client's defaults unless told).
    init(
        maximumDepth: Int = RedisClient.Configuration.defaultMaximumReplyDepth,
        maximumSize: Int = RedisClient.Configuration.defaultMaximumReplySize
    ) {
        self.maximumDepth = max(1, min(maximumDepth, RedisClient.Configuration.maximumReplyDepthCeiling))
        self.maximumSize = max(1, maximumSize)
    }

    /// A parser with the limits `configuration` sets.
    init(limitsOf configuration: RedisClient.Configuration) {
        self.init(maximumDepth: configuration.maximumReplyDepth, maximumSize: configuration.maximumReplySize)
    }

    /// Bytes held and not yet returned as replies.
    var bufferedByteCount: Int { buffer.count - readIndex + (bulkBody?.count ?? 0) }

    /// Whether a reply has started and not finished (the bytes held are part of one).
    var isMidReply: Bool { bufferedByteCount > 0 || !stack.isEmpty || pendingBulk != nil }

    /// The memory the reply being read holds, as counted toward ``maximumSize``.
    var heldByteCount: Int { heldBytes }

    /// Adds bytes received from the server.
    mutating func append<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        buffer.append(contentsOf: bytes)
    }

    /// The next complete reply, or `nil` until more bytes arrive. Throws `.protocolViolation`
    /// (and keeps throwing it) once the bytes are not RESP or a reply passes a limit.
    mutating func next() throws(RedisError) -> RESPValue? {
        if let failure { throw failure }
        do {
            let value = try parse()
            compact()
            return value
        } catch {
            failure = error
            // Nothing more will be read: what the reply held is released now.
            stack = []
            bulkBody = nil
            buffer = []
            readIndex = 0
            scanIndex = 0
            throw error
        }
    }

    private mutating func parse() throws(RedisError) -> RESPValue? {
        while true {
            var produced: RESPValue
            var fromLine = false
            if let bulk = pendingBulk {
                guard let body = try takeBulkBody(length: bulk.length) else { return nil }
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
                fromLine = true
            }
            if let done = try complete(produced, fromLine: fromLine) { return done }
        }
    }

    /// The pending bulk's body once it and its CRLF have arrived, or `nil` until they have.
    private mutating func takeBulkBody(length: Int) throws(RedisError) -> Data? {
        let available = buffer.count - readIndex
        if bulkBody == nil && available >= length + 2 {
            // Arrived whole with its header (the usual case): one copy, straight from the buffer.
            let end = readIndex + length
            guard buffer[end] == 13, buffer[end + 1] == 10 else { throw .violation("a bulk string did not end with CRLF") }
            let body = Data(buffer[readIndex..<end])
            readIndex = end + 2
            scanIndex = readIndex
            return body
        }
        if bulkBody == nil { bulkBody = Data(capacity: length) }
        let missing = length - (bulkBody?.count ?? 0)
        let take = min(missing, available)
        if take > 0 {
            let bytes = buffer
            let start = readIndex
            bytes.withUnsafeBufferPointer { pointer in
                bulkBody?.append(pointer.baseAddress! + start, count: take)
            }
            readIndex += take
            scanIndex = readIndex
        }
        guard take == missing, buffer.count - readIndex >= 2 else { return nil }
        guard buffer[readIndex] == 13, buffer[readIndex + 1] == 10 else { throw .violation("a bulk string did not end with CRLF") }
        readIndex += 2
        scanIndex = readIndex
        defer { bulkBody = nil }
        return bulkBody
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
            guard length >= 0 else { throw .violation("a bulk length was out of range") }
            // Counted (and refused) as announced, before a byte of the body is read.
            let cost = Self.cost(ofStringOfLength: length)
            guard cost <= Int64(maximumSize - heldBytes) else { throw tooLarge() }
            guard length <= Self.maximumBulkLength else { throw .violation("a bulk length was out of range") }
            heldBytes += Int(cost)
            let kind: BulkKind = type == UInt8(ascii: "$") ? .string : type == UInt8(ascii: "!") ? .error : .verbatim
            pendingBulk = (kind, Int(length))
            return nil
        case UInt8(ascii: "*"), UInt8(ascii: "~"), UInt8(ascii: ">"), UInt8(ascii: "%"), UInt8(ascii: "|"):
            let count = try integer(line)
            if count == -1 && type == UInt8(ascii: "*") { return .array(nil) }
            guard count >= 0 else { throw .violation("an aggregate length was out of range") }
            let kind: AggregateKind = type == UInt8(ascii: "%") ? .map : type == UInt8(ascii: "|") ? .attribute : .array
            if count == 0 {
                if kind == .attribute { return nil }
                return .array([])
            }
            guard stack.count < maximumDepth else { throw tooDeep() }
            // Every element announced takes a slot: the storage is counted (and reserved) now.
            let slots = (maximumSize - heldBytes - Self.allocationOverhead) / Self.elementSize
            guard count <= Int64(kind == .array ? slots : slots / 2) else { throw tooLarge() }
            guard count <= Self.maximumAggregateCount else { throw .violation("an aggregate length was out of range") }
            let elements = kind == .array ? Int(count) : Int(count) * 2
            heldBytes += Self.allocationOverhead + elements * Self.elementSize
            var storage: [RESPValue] = []
            storage.reserveCapacity(elements)
            stack.append(Aggregate(kind: kind, remaining: elements, elements: storage))
            return nil
        default:
            throw .violation("a reply began with an unknown type byte")
        }
    }

    /// Places a finished value in its aggregate; returns a reply when the outermost one is done.
    /// A string read from a line is counted toward the size here (`fromLine`); a bulk string
    /// was counted at its header.
    private mutating func complete(_ value: RESPValue, fromLine: Bool) throws(RedisError) -> RESPValue? {
        var value = value
        if fromLine, !stack.isEmpty {
            switch value {
            case .simpleString(let text), .error(let text):
                heldBytes += Int(Self.cost(ofStringOfLength: Int64(text.utf8.count)))
                guard heldBytes <= maximumSize else { throw tooLarge() }
            default:
                break
            }
        }
        while !stack.isEmpty {
            let top = stack.count - 1
            stack[top].elements.append(value)
            stack[top].remaining -= 1
            guard stack[top].remaining == 0 else { return nil }
            let finished = stack.removeLast()
            if finished.kind == .attribute {
                if stack.isEmpty { heldBytes = 0 }
                return nil
            }
            value = .array(finished.elements)
        }
        heldBytes = 0
        return value
    }

    /// The memory a string of `length` bytes takes in a value: its bytes, and an allocation's
    /// overhead when it is too long to be stored inline.
    private static func cost(ofStringOfLength length: Int64) -> Int64 {
        length <= Int64(inlineLength) ? 0 : length + Int64(allocationOverhead)
    }

    private func tooLarge() -> RedisError {
        .violation(
            "a reply from Redis needed more than maximumReplySize (\(Self.describe(bytes: maximumSize))) while it was read; "
                + "raise RedisClient.Configuration.maximumReplySize to read it")
    }

    private func tooDeep() -> RedisError {
        .violation(
            "a reply from Redis was nested deeper than maximumReplyDepth (\(maximumDepth) levels); "
                + "raise RedisClient.Configuration.maximumReplyDepth to read it")
    }

    /// `16 MiB`, `1.5 KiB` or `100 bytes`.
    static func describe(bytes: Int) -> String {
        if bytes >= 1 << 20 && bytes % (1 << 20) == 0 { return "\(bytes >> 20) MiB" }
        if bytes >= 1 << 10 && bytes % (1 << 10) == 0 { return "\(bytes >> 10) KiB" }
        return "\(bytes) bytes"
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
            buffer.removeAll(keepingCapacity: buffer.capacity <= 1 << 20)
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
