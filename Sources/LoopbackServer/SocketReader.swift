/// Buffered, blocking reads from a socket in the shapes HTTP/1.1 needs (lines, exact byte counts,
/// chunked bodies), shared by the server's connections and the raw test client.
final class SocketReader {
    let fd: Int32
    private let buffer: UnsafeMutableRawBufferPointer
    private var start = 0
    private var end = 0

    /// Reads from `fd` through a buffer of `capacity` bytes (which also bounds the longest line).
    init(fd: Int32, capacity: Int = 64 * 1024) {
        self.fd = fd
        buffer = .allocate(byteCount: capacity, alignment: 8)
    }

    deinit { buffer.deallocate() }

    /// Whether bytes are already buffered (a pipelined request, for example).
    var hasBufferedBytes: Bool { start < end }

    /// One line without its CRLF (a bare LF is accepted too); nil at a clean end of stream before any byte.
    func readLine(limit: Int) throws -> String? {
        var checked = 0
        while true {
            let from = start + checked
            if from < end, let found = UnsafeRawBufferPointer(rebasing: buffer[from..<end]).firstIndex(of: 0x0A) {
                let lf = from + found
                var lineEnd = lf
                if lineEnd > start && buffer[lineEnd - 1] == 0x0D { lineEnd -= 1 }
                if lineEnd - start > limit { throw LoopbackServerError.malformedMessage("line longer than \(limit) bytes") }
                let line = String(decoding: UnsafeRawBufferPointer(rebasing: buffer[start..<lineEnd]), as: UTF8.self)
                start = lf + 1
                return line
            }
            checked = end - start
            if checked > limit { throw LoopbackServerError.malformedMessage("line longer than \(limit) bytes") }
            guard try fill() else {
                if start == end { return nil }
                throw LoopbackServerError.connectionClosed
            }
        }
    }

    /// A message head: the start line and header lines up to the empty line, skipping leading blank
    /// lines. nil at a clean end of stream before any byte; `limit` bounds the head's total size.
    func readHead(limit: Int) throws -> [String]? {
        var lines: [String] = []
        var total = 0
        while true {
            guard let line = try readLine(limit: limit) else {
                if lines.isEmpty { return nil }
                throw LoopbackServerError.connectionClosed
            }
            total += line.utf8.count + 2
            if total > limit { throw LoopbackServerError.malformedMessage("head larger than \(limit) bytes") }
            if line.isEmpty {
                if lines.isEmpty { continue }
                return lines
            }
            lines.append(line)
        }
    }

    /// Reads exactly `count` bytes, handing them to `sink` piece by piece.
    func readExactly(_ count: Int, into sink: (UnsafeRawBufferPointer) -> Void) throws {
        var remaining = count
        while remaining > 0 {
            if start == end, try !fill() { throw LoopbackServerError.connectionClosed }
            let take = min(remaining, end - start)
            sink(UnsafeRawBufferPointer(rebasing: buffer[start..<(start + take)]))
            start += take
            remaining -= take
        }
    }

    /// Reads a chunked body, handing the de-framed bytes to `sink`; returns the trailer fields.
    func readChunked(lineLimit: Int, into sink: (UnsafeRawBufferPointer) -> Void) throws -> HTTPFields {
        while true {
            guard let line = try readLine(limit: lineLimit) else { throw LoopbackServerError.connectionClosed }
            let sizeText = line.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)[0]
                .trimmingSpaces()
            guard !sizeText.isEmpty, sizeText.utf8.count <= 15, let size = Int(sizeText, radix: 16), size >= 0 else {
                throw LoopbackServerError.malformedMessage("bad chunk size line \"\(line)\"")
            }
            if size == 0 {
                var trailers = HTTPFields()
                while let trailer = try readLine(limit: lineLimit), !trailer.isEmpty {
                    if let (name, value) = HeaderLine.parse(trailer) { trailers.append(name, value) }
                }
                return trailers
            }
            try readExactly(size, into: sink)
            guard let terminator = try readLine(limit: lineLimit) else { throw LoopbackServerError.connectionClosed }
            guard terminator.isEmpty else { throw LoopbackServerError.malformedMessage("chunk not followed by CRLF") }
        }
    }

    /// Reads until the peer closes, handing bytes to `sink` (for bodies delimited by connection close).
    func readToEnd(into sink: (UnsafeRawBufferPointer) -> Void) throws {
        while true {
            if start == end, try !fill() { return }
            sink(UnsafeRawBufferPointer(rebasing: buffer[start..<end]))
            start = end
        }
    }

    /// Receives more bytes after the buffered ones, compacting first; false at end of stream.
    private func fill() throws -> Bool {
        if start > 0 {
            let pending = end - start
            if pending > 0, let base = buffer.baseAddress {
                base.copyMemory(from: base + start, byteCount: pending)
            }
            start = 0
            end = pending
        }
        if end == buffer.count { throw LoopbackServerError.malformedMessage("line longer than the read buffer") }
        let received = Socket.receive(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[end...]))
        if received < 0 {
            let code = Socket.lastError
            if Socket.isTimeout(code) { throw LoopbackServerError.readTimedOut }
            throw LoopbackServerError.ioFailed(operation: "recv", errno: code)
        }
        end += received
        return received > 0
    }
}
