import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskResilience
import XCTest
import TestSupport

// DocC idempotency-key: begin
/// One idempotency key per task, made on its first attempt and sent again on every retry.
struct IdempotencyKey: URLTaskInterceptor {
    enum Key: URLTaskValueKey { typealias Value = String }

    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        let key = task.taskValues[Key.self] ?? UUID().uuidString
        task.taskValues[Key.self] = key
        task.request.setValue(key, forHTTPHeaderField: "Idempotency-Key")
        return .execute
    }
}
// DocC idempotency-key: end

/// `URLTask.taskValues` last the whole task, across attempts; `attemptValues` start empty on
/// every attempt: over HTTP, through a retry.
final class TaskValuesTests: XCTestCase {
    /// Tells the server what the attempt's values held when it began, then marks them.
    private struct AttemptMarker: URLTaskInterceptor {
        enum Mark: URLTaskValueKey { typealias Value = Int }

        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            task.request.setValue(task.attemptValues[Mark.self].map(String.init) ?? "empty", forHTTPHeaderField: "X-Attempt-Values")
            task.attemptValues[Mark.self] = task.attempt
            return .execute
        }
    }

    func testTaskValuesSurviveARetryAndAttemptValuesDoNot() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let calls = LockedBox(0)
        server.route("POST", "/charge") { _ in
            let call = calls.withLock { count in
                count += 1
                return count
            }
            return call == 1 ? ServerResponse.status(503).with { $0.headers["Retry-After"] = "0" } : .text("charged")
        }
        // A POST is retried only because its idempotency key makes that safe.
        var policy = RetryPolicy.default
        policy.retryableMethods.insert("POST")
        let manager = URLTaskManager(interceptors: [IdempotencyKey(), AttemptMarker()], reactors: [RetryReactor(policy: policy)])
        defer { manager.invalidateAndCancel() }
        var request = URLRequest(url: server.url("/charge"))
        request.httpMethod = "POST"
        request.httpBody = Data("{}".utf8)
        let (data, response) = try await manager.session.data(for: request)
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "charged")

        let seen = server.requests(path: "/charge")
        XCTAssertEqual(seen.count, 2, "sent once, retried once")
        guard seen.count == 2 else { return }
        let keys = seen.map { $0.headers["Idempotency-Key"] }
        XCTAssertNotNil(keys.first ?? nil)
        XCTAssertEqual(keys[0], keys[1], "the retry sent another idempotency key")
        XCTAssertEqual(seen.map { $0.headers["X-Attempt-Values"] }, ["empty", "empty"], "attempt values leaked into the retry")
    }
}
