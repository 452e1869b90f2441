import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager

// DocC body interceptors: begin
/// Signs each request: an HMAC-SHA256 of the method, the path and the body, in `X-Signature`.
struct SigningInterceptor: URLTaskInterceptor {
    let key: Data

    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        let body: Data
        switch task.body {
        case .none: body = Data()
        case .data(let data): body = data
        case .file(let url): body = try Data(contentsOf: url)
        case .stream: throw SigningError.streamedBody  // or read it and replace it with .data
        }
        let method = task.request.httpMethod ?? "GET"
        let path = task.request.url?.path ?? "/"
        task.request.setValue(HMAC.sha256(key: key, message: Data("\(method)\n\(path)\n".utf8) + body), forHTTPHeaderField: "X-Signature")
        return .execute
    }
}

/// Compresses request bodies; the server inflates them.
struct GzipInterceptor: URLTaskInterceptor {
    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        guard case .data(let data) = task.body, !data.isEmpty else { return .execute }
        task.body = .data(try Gzip.compress(data))
        task.request.setValue("gzip", forHTTPHeaderField: "Content-Encoding")
        return .execute
    }
}
// DocC body interceptors: end

enum SigningError: Error {
    case streamedBody
}

/// HMAC (RFC 2104) over the loopback server's SHA-256, enough for the example.
enum HMAC {
    static func sha256(key: Data, message: Data) -> String {
        var block = [UInt8](key.count > 64 ? Data(sha(Data(key))) : key)
        block += [UInt8](repeating: 0, count: 64 - block.count)
        let inner = sha(Data(block.map { $0 ^ 0x36 }) + message)
        return SHA256.hex(bytes: sha(Data(block.map { $0 ^ 0x5c }) + Data(inner)))
    }

    private static func sha(_ data: Data) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(data: data)
        return hasher.finalize()
    }
}

extension Scenario {
    static let signedBody = Scenario(name: "signed-body", summary: "An interceptor signs the request body; the server checks the signature")
    { transcript in
        let key = Data("shared-secret".utf8)
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("POST", "/orders") { request in
            let expected = HMAC.sha256(key: key, message: Data("POST\n/orders\n".utf8) + request.body)
            return request.headers["X-Signature"] == expected ? .text("accepted") : .text("bad signature", status: 401)
        }

        let session = URLTaskManager(interceptors: [SigningInterceptor(key: key)]).session
        var order = URLRequest(url: server.url("/orders"))
        order.httpMethod = "POST"
        let (data, response) = try await session.upload(for: order, from: Data(#"{"item":"book","quantity":2}"#.utf8))
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        transcript.client("POST /orders (upload task) → \(status) \(String(decoding: data, as: UTF8.self))")
        let bodyless =
            HMAC.sha256(key: key, message: Data("POST\n/orders\n".utf8)) == server.requests(path: "/orders").first?.headers["X-Signature"]
        transcript.server("checked X-Signature over method, path and body")

        try transcript.check(status == 200, "the server refused the signature (\(status))")
        try transcript.check(!bodyless, "the signature did not cover the body")
        transcript.conclude("the server verified an HMAC of the body the interceptor read")
    }

    static let gzipUpload = Scenario(name: "gzip-upload", summary: "An interceptor gzips the request body; the server inflates it") {
        transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("POST", "/logs") { request in
            guard request.headers["Content-Encoding"] == "gzip", let inflated = try? Gzip.decompress(request.body) else {
                return .text("expected a gzip body", status: 400)
            }
            return .text("\(request.body.count) \(inflated.count) \(SHA256.hex(inflated))")
        }

        let lines = (1...2_000).map { "2026-11-23T10:00:00Z INFO request \($0) served in 3 ms" }.joined(separator: "\n")
        let original = Data(lines.utf8)
        let session = URLTaskManager(interceptors: [GzipInterceptor()]).session
        var upload = URLRequest(url: server.url("/logs"))
        upload.httpMethod = "POST"
        upload.httpBody = original
        let (data, response) = try await session.data(for: upload)
        let reply = String(decoding: data, as: UTF8.self).split(separator: " ").map(String.init)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        transcript.client("POST /logs with \(original.count) bytes → \(status)")
        if reply.count == 3 {
            transcript.server("received \(reply[0]) gzip bytes, inflated to \(reply[1])")
        }

        try transcript.check(status == 200 && reply.count == 3, "the server could not inflate the body (\(status))")
        try transcript.check(
            reply[1] == String(original.count) && reply[2] == SHA256.hex(original), "the inflated body differs from the original")
        try transcript.check((Int(reply[0]) ?? .max) < original.count / 4, "the body was not compressed")
        transcript.conclude("\(original.count) bytes sent as \(reply[0]) gzip bytes, inflated intact")
    }
}
