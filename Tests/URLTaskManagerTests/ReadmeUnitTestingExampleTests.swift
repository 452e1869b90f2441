// DocC unit testing: begin
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import URLTaskManager
import XCTest

/// An interceptor tested without a server or a session: build the task it would be handed.
final class RequestIDInterceptorTests: XCTestCase {
    struct RequestID: URLTaskInterceptor {
        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            task.request.setValue("req-\(task.id)-\(task.attempt)", forHTTPHeaderField: "X-Request-ID")
            return .execute
        }
    }

    func testStampsTheTaskAndAttempt() async throws {
        var task = URLTask(request: URLRequest(url: URL(string: "https://api.example.com/me")!), attempt: 2)

        let command = try await RequestID().intercept(&task, context: InterceptContext(currentBatchCount: 0))

        guard case .execute = command else { return XCTFail("expected .execute, got \(command)") }
        XCTAssertEqual(task.request.value(forHTTPHeaderField: "X-Request-ID"), "req-\(task.id)-2")
    }

    func testTheBodyIsOnTheTask() throws {
        var request = URLRequest(url: URL(string: "https://api.example.com/orders")!)
        request.httpMethod = "POST"
        request.httpBody = Data("{}".utf8)

        let task = URLTask(request: request)

        guard case .data(let body) = task.body else { return XCTFail("expected a data body") }
        XCTAssertEqual(body, Data("{}".utf8))
        XCTAssertNil(task.request.httpBody, "the body lives on the task, not on its request")
    }
}
// DocC unit testing: end
