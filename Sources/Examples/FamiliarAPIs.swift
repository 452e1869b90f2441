import Foundation
import LoopbackServer
import URLTaskManager

extension Scenario {
    static let familiarAPIs = Scenario(name: "familiar-apis", summary: "The manager's session through async, completion-handler, delegate, upload and download APIs") { transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(nil, "/data") { request in .text("auth=\(request.headers["authorization"] ?? "none")") }
        server.route("POST", "/upload") { request in .text("received \(request.bodyLength) bytes") }

        let delegate = CollectingDelegate()
        let manager = URLTaskManager(
            interceptors: [HeaderInterceptor(["Authorization": "Bearer demo"])],
            delegate: delegate
        )
        let session = manager.session
        let url = server.url("/data")

        let (asyncData, _) = try await session.data(from: url)
        transcript.client("async data(from:)         → \(String(decoding: asyncData, as: UTF8.self))")

        let handlerData: Data = try await withCheckedThrowingContinuation { continuation in
            session.dataTask(with: url) { data, _, error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: data ?? Data()) }
            }.resume()
        }
        transcript.client("completion handler        → \(String(decoding: handlerData, as: UTF8.self))")

        let delegateData = try await delegate.run(session.dataTask(with: url))
        transcript.client("delegate (didReceive data) → \(String(decoding: delegateData, as: UTF8.self))")

        var upload = URLRequest(url: server.url("/upload"))
        upload.httpMethod = "POST"
        let (uploadReply, _) = try await session.upload(for: upload, from: Data(repeating: 7, count: 100_000))
        transcript.client("upload(for:from:)         → \(String(decoding: uploadReply, as: UTF8.self))")

        let (file, _) = try await manager.download(for: URLRequest(url: url))
        let downloaded = try String(contentsOf: file, encoding: .utf8)
        transcript.client("manager.download(for:)    → \(downloaded) (streamed to \(file.lastPathComponent))")
        try? FileManager.default.removeItem(at: file)

        let authorized = server.requests(path: "/data").filter { $0.headers["authorization"] == "Bearer demo" }.count
        transcript.server("\(authorized) of \(server.requestCount(path: "/data")) GETs carried the bearer token; upload body \(server.requests(path: "/upload").first?.bodyLength ?? 0) bytes")
        try transcript.check(String(decoding: asyncData, as: UTF8.self) == "auth=Bearer demo", "async call lacked auth")
        try transcript.check(String(decoding: handlerData, as: UTF8.self) == "auth=Bearer demo", "completion handler call lacked auth")
        try transcript.check(String(decoding: delegateData, as: UTF8.self) == "auth=Bearer demo", "delegate call lacked auth")
        try transcript.check(server.requests(path: "/upload").first?.bodyLength == 100_000, "upload body lost")
        try transcript.check(downloaded == "auth=Bearer demo", "download lacked auth")
        transcript.conclude("5 APIs, every request authorized, every upload byte delivered")
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
