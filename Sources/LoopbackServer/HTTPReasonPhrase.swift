/// Standard reason phrases for status lines, so responses read naturally in packet captures and logs.
enum HTTPReasonPhrase {
    /// The phrase for `status`, or a generic one for codes without a registered phrase.
    static func phrase(for status: Int) -> String {
        if let known = phrases[status] { return known }
        switch status {
        case 100..<200: return "Informational"
        case 200..<300: return "Success"
        case 300..<400: return "Redirection"
        case 400..<500: return "Client Error"
        default: return "Server Error"
        }
    }

    private static let phrases: [Int: String] = [
        100: "Continue", 101: "Switching Protocols", 103: "Early Hints",
        200: "OK", 201: "Created", 202: "Accepted", 203: "Non-Authoritative Information", 204: "No Content",
        205: "Reset Content", 206: "Partial Content",
        300: "Multiple Choices", 301: "Moved Permanently", 302: "Found", 303: "See Other", 304: "Not Modified",
        307: "Temporary Redirect", 308: "Permanent Redirect",
        400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
        406: "Not Acceptable", 408: "Request Timeout", 409: "Conflict", 410: "Gone", 411: "Length Required",
        412: "Precondition Failed", 413: "Content Too Large", 415: "Unsupported Media Type",
        416: "Range Not Satisfiable", 417: "Expectation Failed", 422: "Unprocessable Content",
        429: "Too Many Requests", 431: "Request Header Fields Too Large",
        500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable",
        504: "Gateway Timeout", 505: "HTTP Version Not Supported",
    ]
}
