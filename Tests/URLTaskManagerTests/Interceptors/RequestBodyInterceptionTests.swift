import Foundation
import LoopbackServer
import URLTaskManager
import URLTaskResilience
import XCTest
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Interceptors see the request body wherever the caller put it, and the body they leave is
/// what the server receives, on every attempt.
final class RequestBodyInterceptionTests: XCTestCase {
    private var server: LoopbackServer!
    private let payload = Data(GeneratedBody.bytes(offset: 0, count: 70_000))

    override func setUpWithError() throws {
        server = try LoopbackServer()
        server.route("POST", "/echo") { request in .text("\(request.bodyLength) \(request.bodySHA256)") }
        let attempts = LockedBox(0)
        server.route("POST", "/flaky") { request in
            attempts.withLock {
                $0 += 1; return $0
            } == 1 ? .status(503) : .text("\(request.bodyLength) \(request.bodySHA256)")
        }
    }

    override func tearDown() {
        server.shutdown()
        server = nil
    }

    /// Records what kind of body each call saw and how long it was.
    final class Recorder: URLTaskInterceptor, @unchecked Sendable {  // `seen` is guarded by `lock`.
        private let lock = NSLock()
        private var seen: [String] = []
        let replacement: URLTaskBody?

        init(replacingWith replacement: URLTaskBody? = nil) {
            self.replacement = replacement
        }

        var calls: [String] { lock.withLock { seen } }

        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            let description: String
            switch task.body {
            case .none: description = "none"
            case .data(let data): description = "data \(data.count)"
            case .file(let url): description = "file \((try? Data(contentsOf: url).count) ?? -1)"
            case .stream(let stream):
                // A stream is read here and replaced by what was read.
                var data = Data()
                stream.open()
                var buffer = [UInt8](repeating: 0, count: 16_384)
                while case let count = stream.read(&buffer, maxLength: buffer.count), count > 0 { data.append(buffer, count: count) }
                stream.close()
                task.body = .data(data)
                description = "stream \(data.count)"
            }
            lock.withLock { seen.append(description) }
            if let replacement { task.body = replacement }
            return .execute
        }
    }

    private func post(_ path: String) -> URLRequest {
        var request = URLRequest(url: server.url(path))
        request.httpMethod = "POST"
        return request
    }

    private func reply(_ data: Data) -> String { String(decoding: data, as: UTF8.self) }

    func testTheBodyIsSeenWhereverTheCallerPutIt() async throws {
        let recorder = Recorder()
        let session = URLTaskManager(interceptors: [recorder]).session
        defer { session.invalidateAndCancel() }
        let expected = "\(payload.count) \(SHA256.hex(payload))"
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("body-\(UUID().uuidString)")
        try payload.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }

        var withBody = post("/echo")
        withBody.httpBody = payload
        var streamed = post("/echo")
        streamed.httpBodyStream = InputStream(data: payload)
        let replies = [
            reply(try await session.data(for: withBody).0),
            reply(try await session.upload(for: post("/echo"), from: payload).0),
            reply(try await session.upload(for: post("/echo"), fromFile: file).0),
            reply(try await session.data(for: streamed).0),
        ]

        XCTAssertEqual(replies, Array(repeating: expected, count: 4))

        XCTAssertEqual(recorder.calls, ["data 70000", "data 70000", "file 70000", "stream 70000"])
    }

    func testAReplacedBodyIsSentAndEachAttemptStartsFromTheCallersBody() async throws {
        let replacement = Data("replaced".utf8)
        let recorder = Recorder(replacingWith: .data(replacement))
        let retry = RetryReactor(
            policy: RetryPolicy(maximumAttempts: 2, retryableMethods: ["POST"], backoff: .init(base: .milliseconds(1), jitter: 0)))
        let session = URLTaskManager(interceptors: [recorder], reactors: [retry]).session
        defer { session.invalidateAndCancel() }

        let (data, response) = try await session.upload(for: post("/flaky"), from: payload)

        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        XCTAssertEqual(reply(data), "\(replacement.count) \(SHA256.hex(replacement))", "the server got the replaced body")
        XCTAssertEqual(server.requests(path: "/flaky").map(\.bodyLength), [replacement.count, replacement.count])
        XCTAssertEqual(recorder.calls, ["data 70000", "data 70000"], "each attempt's interceptors start from the caller's body")
    }

    func testABodyCanBeReplacedByAFile() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("replacement-\(UUID().uuidString)")
        try payload.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let session = URLTaskManager(interceptors: [Recorder(replacingWith: .file(file))]).session
        defer { session.invalidateAndCancel() }
        var request = post("/echo")
        request.httpBody = Data("small".utf8)

        let (data, _) = try await session.data(for: request)

        XCTAssertEqual(reply(data), "\(payload.count) \(SHA256.hex(payload))")
    }
}
