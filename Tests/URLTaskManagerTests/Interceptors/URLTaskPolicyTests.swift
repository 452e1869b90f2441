import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest

/// Per-request policies (skip interceptors or reactors, accept other answers, hold less) and
/// response validation, over HTTP, through the plain URLSession APIs.
final class URLTaskPolicyTests: XCTestCase {
    private var server: LoopbackServer!
    private let calls = LockedBox(0)

    override func setUpWithError() throws {
        server = try LoopbackServer()
        server.route("/echo") { request in .text(request.headers["Authorization"] ?? "none") }
        let calls = self.calls
        server.route("/flaky") { _ in
            let call = calls.withLock { count in
                count += 1
                return count
            }
            return call == 1 ? ServerResponse.status(503).with { $0.headers["Retry-After"] = "0" } : .text("fine")
        }
        server.route("/missing") { _ in
            ServerResponse(
                status: 404, headers: ["Content-Type": "application/json"],
                body: .data(Data(#"{"error":"gone","access_token":"leaked-token"}"#.utf8)))
        }
        server.route("/text") { _ in .text("plain words") }
    }

    override func tearDown() {
        server.shutdown()
    }

    func testARequestSkipsAnInterceptorAndThePolicyNeverReachesTheWire() async throws {
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["Authorization": "Bearer app-token"])])
        defer { manager.invalidateAndCancel() }
        // README policy: begin
        var request = URLRequest(url: server.url("/echo"))
        URLTaskPolicy(skipping: [HeaderInterceptor.self]).apply(to: &request)  // a public endpoint: no token
        let (data, _) = try await manager.session.data(for: request)
        // README policy: end
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "none")
        let done = Latch<Data?>("completion handler")
        manager.session.dataTask(with: request) { data, _, _ in done.fulfill(data) }.resume()
        let handed = try await done.wait(timeout: .seconds(10))
        XCTAssertEqual(handed.map { String(decoding: $0, as: UTF8.self) }, "none")
        let (withToken, _) = try await manager.session.data(from: server.url("/echo"))
        XCTAssertEqual(String(decoding: withToken, as: UTF8.self), "Bearer app-token", "other requests keep the interceptor")
        XCTAssertTrue(server.requests.allSatisfy { $0.headers["X-URLTaskManager-Policy"] == nil }, "the policy reached the server")
    }

    func testARequestSkipsAReactor() async throws {
        let manager = URLTaskManager(reactors: [RetryReactor(policy: .default)])
        defer { manager.invalidateAndCancel() }
        var request = URLRequest(url: server.url("/flaky"))
        URLTaskPolicy(skippingReactors: [RetryReactor.self]).apply(to: &request)
        let (_, response) = try await manager.session.data(for: request)
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 503, "no retry for this request")
        XCTAssertEqual(server.requestCount(path: "/flaky"), 1)
    }

    func testAManagersValidationRejectsAnAnswerWithItsStatusHeadersAndAMaskedPrefix() async throws {
        let manager = URLTaskManager(options: URLTaskManager.Options(responseValidation: .successfulStatusCodes))
        defer { manager.invalidateAndCancel() }
        do {
            _ = try await manager.session.data(from: server.url("/missing?key=s3cr3t"))
            XCTFail("a 404 was accepted")
        } catch let error as URLTaskError {
            XCTAssertEqual(error.code, .responseRejected)
            XCTAssertEqual(error.response?.statusCode, 404)
            XCTAssertEqual(error.response?.value(forHTTPHeaderField: "Content-Type"), "application/json")
            let prefix = String(decoding: error.bodyPrefix ?? Data(), as: UTF8.self)
            XCTAssertTrue(prefix.contains(#""error":"gone""#), prefix)
            XCTAssertFalse(prefix.contains("leaked-token"), "a secret the server echoed is in the error: \(prefix)")
            XCTAssertFalse(error.description.contains("leaked-token") || error.description.contains("s3cr3t"), error.description)
            XCTAssertTrue(error.description.contains("status 404 is not acceptable"), error.description)
        }
        let (data, _) = try await manager.session.data(from: server.url("/text"))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "plain words", "a 200 passes")
    }

    func testARequestsOwnValidationJudgesTheContentType() async throws {
        let manager = URLTaskManager()
        defer { manager.invalidateAndCancel() }
        var request = URLRequest(url: server.url("/text"))
        URLTaskPolicy(responseValidation: ResponseValidation(acceptableContentTypes: ["application/json"])).apply(to: &request)
        do {
            _ = try await manager.session.data(for: request)
            XCTFail("text/plain was accepted")
        } catch let error as URLTaskError {
            XCTAssertEqual(error.code, .responseRejected)
            XCTAssertEqual(error.reason, "content type text/plain is not acceptable")
        }
    }

    /// Requeues on a 401 after renewing the token; the server accepts the renewed one.
    private struct Refresh: URLTaskReactor {
        let token: LockedBox<String>
        var configuration: URLTaskReactorConfiguration { .authentication }
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 401 }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws { token.withLock { $0 = "fresh" } }
    }

    /// Validation judges the final answer: a 401 is refreshed first; one that every token
    /// gets is rejected once the reactor gives it up.
    func testValidationComesAfterTheReactors() async throws {
        server.route("/guarded") { request in request.headers["Authorization"] == "Bearer fresh" ? .text("welcome") : .status(401) }
        server.route("/forbidden-to-all") { _ in .status(401) }
        let token = LockedBox("stale")
        let manager = URLTaskManager(
            interceptors: [HeaderInterceptor(["Authorization": .computed { _ in "Bearer \(token.snapshot)" }])],
            reactors: [Refresh(token: token)], options: URLTaskManager.Options(responseValidation: .successfulStatusCodes))
        defer { manager.invalidateAndCancel() }
        let (data, _) = try await manager.session.data(from: server.url("/guarded"))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "welcome")
        do {
            _ = try await manager.session.data(from: server.url("/forbidden-to-all"))
            XCTFail("the final 401 was accepted")
        } catch let error as URLTaskError {
            XCTAssertEqual(error.code, .responseRejected)
            XCTAssertEqual(error.response?.statusCode, 401)
        }
        XCTAssertEqual(server.requestCount(path: "/forbidden-to-all"), 2, "sent again with the fresh token before it was judged")
    }

    func testARequestsOwnHoldTime() async throws {
        let manager = URLTaskManager(interceptors: [BatchInterceptor(size: 100)])
        defer { manager.invalidateAndCancel() }
        var request = URLRequest(url: server.url("/echo"))
        URLTaskPolicy(maximumHoldTime: .milliseconds(200)).apply(to: &request)
        let started = ContinuousClock.now
        do {
            _ = try await manager.session.data(for: request)
            XCTFail("a batch of 100 released one request")
        } catch let error as URLTaskError {
            XCTAssertEqual(error.code, .holdTimedOut)
            XCTAssertEqual(error.limit, .milliseconds(200))
        }
        XCTAssertLessThan(started.duration(to: .now), .seconds(5), "held for the manager's 60 s")
    }

    #if canImport(FoundationNetworking)
    func testADownloadCarryingAPolicyIsRefusedUnsent() async throws {
        let manager = URLTaskManager()
        defer { manager.invalidateAndCancel() }
        var request = URLRequest(url: server.url("/echo"))
        URLTaskPolicy(skipping: [HeaderInterceptor.self]).apply(to: &request)
        do {
            _ = try await manager.session.download(for: request)
            XCTFail("a download carried its policy to the wire")
        } catch let error as URLTaskError {
            XCTAssertEqual(error.code, .downloadNeedsPipeline)
        }
        XCTAssertEqual(server.requestCount(path: "/echo"), 0)
    }
    #endif
}
