/// The parsed request line and headers of one request, before its body is read.
struct RequestHead {
    let method: String
    let target: String
    let version: String
    let headers: HTTPFields

    /// Parses head lines as returned by `SocketReader.readHead`.
    init(lines: [String]) throws {
        let parts = lines[0].split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else {
            throw LoopbackServerError.malformedMessage("bad request line \"\(lines[0])\"")
        }
        method = String(parts[0])
        target = String(parts[1])
        version = String(parts[2])
        headers = try HeaderLine.parseFields(lines[1...])
    }

    /// HTTP/1.1 (or later 1.x) defaults to keep-alive; HTTP/1.0 always closes here.
    var isHTTP11: Bool { version != "HTTP/1.0" }

    /// Whether the client asked to close after this exchange.
    var wantsClose: Bool {
        !isHTTP11
            || headers.values(for: "Connection").contains { value in
                value.split(separator: ",").contains { HTTPFields.sameName(String($0.trimmingSpaces()), "close") }
            }
    }

    /// Whether the body uses chunked transfer coding.
    var isChunked: Bool {
        headers.values(for: "Transfer-Encoding").contains { $0.lowercased().contains("chunked") }
    }

    /// Whether the client waits for `100 Continue` before sending the body.
    var expectsContinue: Bool {
        isHTTP11 && headers.values(for: "Expect").contains { HTTPFields.sameName($0.trimmingSpaces().description, "100-continue") }
    }

    /// The declared body length, or nil when absent; throws when it is not a valid number.
    func contentLength() throws -> Int? {
        guard let text = headers["Content-Length"] else { return nil }
        guard let value = Int(text.trimmingSpaces()), value >= 0 else {
            throw LoopbackServerError.malformedMessage("bad Content-Length \"\(text)\"")
        }
        return value
    }
}
