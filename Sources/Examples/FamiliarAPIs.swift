import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2

extension Scenario {
    static let familiarAPIs = Scenario(
        name: "familiar-apis", summary: "One signed-in session through async, completion-handler, delegate, upload and download APIs"
    ) { transcript in
        let server = try OAuthServer(name: "demo")
        defer { server.shutdown() }
        let delegate = CollectingDelegate()
        let client = APIClient(api: server.baseURL, tokenURL: server.tokenURL)
        try await client.signIn(username: "ada", password: "lovelace")
        // The same manager, built with a delegate: URLSession calls it as usual.
        // DocC delegate: begin
        func signedInManager(auth: OAuth2Authenticator, delegate: any URLSessionDelegate) -> URLTaskManager {
            URLTaskManager(
                interceptors: [BearerInterceptor(authenticator: auth)],
                reactors: [OAuth2RefreshReactor(authenticator: auth)],
                delegate: delegate
            )
        }
        // DocC delegate: end
        let manager = signedInManager(auth: client.auth, delegate: delegate)
        let session = manager.session
        let url = server.apiURL("/data")
        func text(_ data: Data) -> String { String(decoding: data, as: UTF8.self) }

        let (asyncData, _) = try await session.data(from: url)
        transcript.client("async data(from:)          → \(text(asyncData))")

        let handlerData: Data = try await withCheckedThrowingContinuation { continuation in
            session.dataTask(with: url) { data, _, error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: data ?? Data()) }
            }.resume()
        }
        transcript.client("completion handler         → \(text(handlerData))")

        let delegateData = try await delegate.run(session.dataTask(with: url))
        transcript.client("delegate (didReceive data) → \(text(delegateData))")

        var upload = URLRequest(url: server.apiURL("/upload"))
        upload.httpMethod = "POST"
        let (uploadReply, _) = try await session.upload(for: upload, from: Data(repeating: 7, count: 100_000))
        transcript.client("upload(for:from:) 100 kB   → \(text(uploadReply))")

        // DocC download: begin
        func download(_ url: URL, through manager: URLTaskManager) async throws -> String {
            let (file, _) = try await manager.download(for: URLRequest(url: url))
            defer { try? FileManager.default.removeItem(at: file) }
            return try String(contentsOf: file, encoding: .utf8)
        }
        // DocC download: end
        let downloaded = try await download(url, through: manager)
        transcript.client("manager.download(for:)     → \(downloaded) (streamed to a temporary file)")

        let token = "Bearer \(server.currentAccess ?? "?")"
        let authorized = server.apiRequests.filter { $0.headers["authorization"] == token }.count
        let uploaded = server.apiRequests.first { $0.path == "/api/upload" }?.bodyLength ?? 0
        transcript.server(
            "\(authorized) of \(server.apiRequests.count) requests carried the signed-in bearer token; upload body \(uploaded) bytes")
        for (api, reply) in [("async", asyncData), ("completion handler", handlerData), ("delegate", delegateData)] {
            try transcript.check(text(reply) == "ok /api/data", "\(api): \(text(reply))")
        }
        try transcript.check(
            text(uploadReply) == "ok /api/upload" && uploaded == 100_000, "upload: \(text(uploadReply)), \(uploaded) bytes")
        try transcript.check(downloaded == "ok /api/data", "download: \(downloaded)")
        try transcript.check(
            authorized == 5 && server.unauthorizedCount == 0, "\(authorized) authorized, \(server.unauthorizedCount) × 401")
        transcript.conclude("5 APIs, 5 requests with the bearer token, 0 × 401, 100,000 upload bytes delivered")
    }
}

/// Collects a delegate-driven data task's body and completion.
final class CollectingDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {  // `pending` is guarded by `lock`.
    private let lock = NSLock()
    private var pending: [Int: (data: Data, continuation: CheckedContinuation<Data, any Error>)] = [:]

    func run(_ task: URLSessionDataTask) async throws -> Data {
        try await withCheckedThrowingContinuation { continuation in
            lock.withLock { pending[task.taskIdentifier] = (Data(), continuation) }
            task.resume()
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        lock.withLock { pending[dataTask.taskIdentifier]?.data.append(data) }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        guard let entry = lock.withLock({ pending.removeValue(forKey: task.taskIdentifier) }) else { return }
        if let error { entry.continuation.resume(throwing: error) } else { entry.continuation.resume(returning: entry.data) }
    }
}
