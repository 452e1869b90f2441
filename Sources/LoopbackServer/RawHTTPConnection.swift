import Foundation

/// A minimal blocking HTTP/1.1 client on a raw socket, for the tests URLSession cannot express:
/// exact bytes, pipelining, HTTP/1.0, `Expect: 100-continue`, malformed requests, and observing
/// whether the server closed the connection. Reads time out so a broken server cannot hang a test.
/// Use it from one thread at a time.
public final class RawHTTPConnection {
    private let fd: Int32
    private let reader: SocketReader
    private var closed = false

    /// Connects to 127.0.0.1:`port`; reads fail with `LoopbackServerError.readTimedOut` after `readTimeout`.
    public init(port: Int, readTimeout: Duration = .seconds(10)) throws {
        fd = try Socket.connectToLoopback(port: port)
        Socket.setNoDelay(fd)
        Socket.setReceiveTimeout(fd, seconds: readTimeout.seconds)
        reader = SocketReader(fd: fd)
    }

    deinit { close() }

    /// Sends `text` as UTF-8, byte for byte (write your own `\r\n`).
    public func send(_ text: String) throws {
        try send(Data(text.utf8))
    }

    /// Sends raw bytes.
    public func send(_ data: Data) throws {
        try data.withUnsafeBytes { try Socket.sendAll(fd, $0) }
    }

    /// Reads one response. Informational (1xx) responses are skipped unless `skippingInformational`
    /// is false; `forHEAD` tells it a HEAD response has no body whatever its headers say.
    public func readResponse(forHEAD: Bool = false, skippingInformational: Bool = true) throws -> RawHTTPResponse {
        while true {
            guard let lines = try reader.readHead(limit: 64 * 1024) else { throw LoopbackServerError.connectionClosed }
            let parts = lines[0].split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count >= 2, parts[0].hasPrefix("HTTP/"), let status = Int(parts[1]) else {
                throw LoopbackServerError.malformedMessage("bad status line \"\(lines[0])\"")
            }
            let headers = try HeaderLine.parseFields(lines[1...])
            let reason = parts.count > 2 ? String(parts[2]) : ""
            if (100..<200).contains(status) {
                if skippingInformational && status != 101 { continue }
                return RawHTTPResponse(
                    version: String(parts[0]), status: status, reason: reason, headers: headers,
                    body: Data(), wasChunked: false)
            }
            var body = Data()
            let chunked = headers.values(for: "Transfer-Encoding").contains { $0.lowercased().contains("chunked") }
            if forHEAD || status == 204 || status == 304 {
                // No body by definition.
            } else if chunked {
                _ = try reader.readChunked(lineLimit: 64 * 1024) { body.append(contentsOf: $0) }
            } else if let lengthText = headers["Content-Length"] {
                guard let length = Int(lengthText), length >= 0 else {
                    throw LoopbackServerError.malformedMessage("bad Content-Length \"\(lengthText)\"")
                }
                try reader.readExactly(length) { body.append(contentsOf: $0) }
            } else {
                try reader.readToEnd { body.append(contentsOf: $0) }
            }
            return RawHTTPResponse(
                version: String(parts[0]), status: status, reason: reason, headers: headers,
                body: body, wasChunked: chunked)
        }
    }

    /// Everything the server sends until it closes the connection.
    public func readToEnd() throws -> Data {
        var data = Data()
        try reader.readToEnd { data.append(contentsOf: $0) }
        return data
    }

    /// Whether the server has closed its side: true at end of stream (or a reset) with no further
    /// bytes pending; false if it sent more data. Blocks up to the read timeout while the connection is idle.
    public func serverClosed() throws -> Bool {
        do {
            return try readToEnd().isEmpty
        } catch LoopbackServerError.ioFailed(_, _) {
            return true
        }
    }

    /// Closes the socket (idempotent; also done on deinit).
    public func close() {
        guard !closed else { return }
        closed = true
        Socket.closeDescriptor(fd)
    }
}
