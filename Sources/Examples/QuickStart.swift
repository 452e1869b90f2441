import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager

extension Scenario {
    /// The README's quick start, compiled and run as written.
    static let quickStart = Scenario(name: "quick-start", summary: "The README quick start, as written") { transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(nil, "/me") { request in
            .text("hello, \(request.headers["x-client"] ?? "stranger")")
        }

        // README quick start: begin
        func quickStart(url: URL) async throws -> String {
            let session = URLTaskManager(
                interceptors: [HeaderInterceptor(["X-Client": "quick-start"])],
                configuration: .default
            ).session
            let (data, response) = try await session.data(from: url)
            print(String(decoding: data, as: UTF8.self), (response as? HTTPURLResponse)?.statusCode ?? 0)
            return String(decoding: data, as: UTF8.self)
        }
        // README quick start: end

        let body = try await quickStart(url: server.url("/me"))
        transcript.server("saw X-Client: \(server.requests(path: "/me").first?.headers["x-client"] ?? "-")")
        try transcript.check(body == "hello, quick-start", "unexpected body \(body)")
        transcript.conclude("header reached the server, 200")
    }
}
