import Foundation

/// Serializes a `ServerResponse` onto a socket: adds framing headers, streams the body, and
/// enforces `dropAfterHeadBytes` and `dropAfterBodyBytes` by cutting the head or the body short.
struct ResponseWriter {
    /// Thrown internally when the drop budget is used up; the connection then closes abruptly.
    struct Dropped: Error {}

    let fd: Int32
    let registry: ConnectionRegistry
    private var budget: Int?
    /// Body bytes written so far, chunk framing included.
    private(set) var bodyBytesSent = 0

    init(fd: Int32, registry: ConnectionRegistry) {
        self.fd = fd
        self.registry = registry
    }

    /// Sends the whole response (or throws `Dropped` / an I/O error). `keepAlive` false adds `Connection: close`.
    mutating func send(_ response: ServerResponse, method: String, keepAlive: Bool) throws {
        budget = response.dropAfterBodyBytes.map { max(0, $0) }
        let status = response.status
        let bodyAllowed = !(100..<200).contains(status) && status != 204 && status != 304
        let sendsBody = bodyAllowed && method.uppercased() != "HEAD"
        var headers = response.headers
        let framed = headers.contains("Content-Length") || headers.contains("Transfer-Encoding")
        let chunked: Bool
        switch response.body {
        case .empty:
            chunked = false
            if !framed && bodyAllowed { headers["Content-Length"] = "0" }
        case .data(let data):
            chunked = false
            if !framed && bodyAllowed { headers["Content-Length"] = String(data.count) }
        case .chunked:
            // A length the response states itself: the pieces go out unframed, paced the same.
            chunked = !headers.contains("Content-Length")
            if !framed && sendsBody { headers["Transfer-Encoding"] = "chunked" }
        case .generated(let length, _, let isChunked):
            chunked = isChunked
            if !framed && bodyAllowed && !isChunked { headers["Content-Length"] = String(length) }
            if !framed && sendsBody && isChunked { headers["Transfer-Encoding"] = "chunked" }
        }
        if !keepAlive && !headers.contains("Connection") { headers["Connection"] = "close" }

        var head = ""
        for interim in response.informational {
            head += "HTTP/1.1 \(interim) \(HTTPReasonPhrase.phrase(for: interim))\r\n\r\n"
        }
        head += "HTTP/1.1 \(status) \(HTTPReasonPhrase.phrase(for: status))\r\n"
        for field in headers { head += "\(field.name): \(field.value)\r\n" }
        head += "\r\n"
        if let cut = response.dropAfterHeadBytes {
            try Array(head.utf8.prefix(max(0, cut))).withUnsafeBytes { try Socket.sendAll(fd, $0) }
            throw Dropped()
        }
        try Array(head.utf8).withUnsafeBytes { try Socket.sendAll(fd, $0) }

        if sendsBody { try sendBody(response.body, chunked: chunked) }
        if budget != nil { throw Dropped() }
    }

    private mutating func sendBody(_ body: ServerResponse.Body, chunked: Bool) throws {
        switch body {
        case .empty:
            break
        case .data(let data):
            try data.withUnsafeBytes { try write($0) }
        case .chunked(let chunks, let chunkDelay):
            var first = true
            for chunk in chunks where !chunk.isEmpty {
                if !first, let chunkDelay, !registry.sleep(for: chunkDelay) { throw LoopbackServerError.shutDown }
                first = false
                if chunked { try writeChunkHeader(chunk.count) }
                try chunk.withUnsafeBytes { try write($0) }
                if chunked { try writeText("\r\n") }
            }
            if chunked { try writeText("0\r\n\r\n") }
        case .generated(let length, let chunkSize, _):
            try GeneratedBody.forEachPiece(length: length, pieceSize: chunkSize) { piece in
                if chunked { try writeChunkHeader(piece.count) }
                try write(piece)
                if chunked { try writeText("\r\n") }
            }
            if chunked { try writeText("0\r\n\r\n") }
        }
    }

    private mutating func writeChunkHeader(_ size: Int) throws {
        try writeText(String(size, radix: 16) + "\r\n")
    }

    private mutating func writeText(_ text: String) throws {
        try Array(text.utf8).withUnsafeBytes { try write($0) }
    }

    /// Writes body bytes, honouring the drop budget.
    private mutating func write(_ bytes: UnsafeRawBufferPointer) throws {
        guard let remaining = budget else {
            try Socket.sendAll(fd, bytes)
            bodyBytesSent += bytes.count
            return
        }
        if bytes.count > remaining {
            try Socket.sendAll(fd, UnsafeRawBufferPointer(rebasing: bytes.prefix(remaining)))
            bodyBytesSent += remaining
            budget = 0
            throw Dropped()
        }
        try Socket.sendAll(fd, bytes)
        bodyBytesSent += bytes.count
        budget = remaining - bytes.count
    }
}
