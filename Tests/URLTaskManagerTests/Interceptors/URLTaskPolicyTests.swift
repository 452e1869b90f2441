import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskResilience
import XCTest
import TestSupport

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
        // DocC policy: begin
        var request = URLRequest(url: server.url("/echo"))
        URLTaskPolicy(skipping: [HeaderInterceptor.self]).apply(to: &request)  // a public endpoint: no token
        let (data, _) = try await manager.session.data(for: request)
        // DocC policy: end
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "none")
        let done = Latch<Data?>("completion handler")
        manager.session.dataTask(with: request) { data, _, _ in done.fulfill(data) }.resume()
        let handed = try await done.wait(timeout: .seconds(10))
        XCTAssertEqual(handed.map { String(decoding: $0, as: UTF8.self) }, "none")
        let (withToken, _) = try await manager.session.data(from: server.url("/echo"))
        XCTAssertEqual(String(decoding: withToken, as: UTF8.self), "Bearer app-token", "other requests keep the interceptor")
        XCTAssertTrue(server.requests.allSatisfy { $0.headers["X-URLTaskManager-Policy"] == nil }, "the policy reached the server")
    }

    /// Components the manager holds for the requests that add them, and only those.
    func testARequestAddsAnInterceptorAndAReactorOfTheManagers() async throws {
        server.route("/trace") { request in .text(request.headers["X-Debug-Trace"] ?? "none") }
        var retryPOSTs = RetryPolicy.default
        retryPOSTs.retryableMethods.insert("POST")
        let manager = URLTaskManager(
            interceptors: [PerRequestInterceptor(HeaderInterceptor(["X-Debug-Trace": "1"]))],
            reactors: [PerRequestReactor(RetryReactor(policy: retryPOSTs))])
        defer { manager.invalidateAndCancel() }

        var traced = URLRequest(url: server.url("/trace"))
        URLTaskPolicy(adding: [HeaderInterceptor.self]).apply(to: &traced)
        let (withHeader, _) = try await manager.session.data(for: traced)
        XCTAssertEqual(String(decoding: withHeader, as: UTF8.self), "1")
        let (plain, _) = try await manager.session.data(from: server.url("/trace"))
        XCTAssertEqual(String(decoding: plain, as: UTF8.self), "none", "a request that did not add it got the header")

        var safeToRetry = URLRequest(url: server.url("/flaky"))
        safeToRetry.httpMethod = "POST"
        URLTaskPolicy(adding: [RetryReactor.self]).apply(to: &safeToRetry)
        let (retried, response) = try await manager.session.data(for: safeToRetry)
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200, "the added retry did not run")
        XCTAssertEqual(String(decoding: retried, as: UTF8.self), "fine")
        XCTAssertEqual(server.requestCount(path: "/flaky"), 2)
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

    /// Two types that `String(describing:)` names alike ("Tag", "Watch") are two parts: a policy
    /// names types, not names.
    func testPartsNamedAlikeInDifferentScopesAreToldApart() async throws {
        server.route("/tags") { request in
            .text("first=\(request.headers["X-First"] ?? "-") second=\(request.headers["X-Second"] ?? "-")")
        }
        let seen = LockedBox<[String]>([])
        let manager = URLTaskManager(
            interceptors: [First.Tag(), Second.Tag()], reactors: [First.Watch(seen: seen), Second.Watch(seen: seen)])
        defer { manager.invalidateAndCancel() }
        var request = URLRequest(url: server.url("/tags"))
        URLTaskPolicy(skipping: [First.Tag.self], skippingReactors: [Second.Watch.self]).apply(to: &request)
        let (data, _) = try await manager.session.data(for: request)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "first=- second=1", "skipping First.Tag skipped Second.Tag")
        XCTAssertEqual(seen.snapshot, ["first"], "skipping Second.Watch skipped First.Watch")

        let adding = URLTaskManager(interceptors: [PerRequestInterceptor(First.Tag()), PerRequestInterceptor(Second.Tag())])
        defer { adding.invalidateAndCancel() }
        var added = URLRequest(url: server.url("/tags"))
        URLTaskPolicy(adding: [Second.Tag.self]).apply(to: &added)
        let (addedData, _) = try await adding.session.data(for: added)
        XCTAssertEqual(String(decoding: addedData, as: UTF8.self), "first=- second=1", "adding Second.Tag added First.Tag")
    }

    /// The policy applies, and is never sent, through each URLSession API that runs through the
    /// pipeline (downloads on Linux: `testADownloadCarryingAPolicyIsRefusedUnsent`).
    func testThePolicyAppliesAndStaysOffTheWireThroughEveryAPI() async throws {
        let delegate = RecordingDelegate()
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["Authorization": "Bearer app-token"])], delegate: delegate)
        defer { manager.invalidateAndCancel() }
        var request = URLRequest(url: server.url("/echo"))
        URLTaskPolicy(skipping: [HeaderInterceptor.self]).apply(to: &request)
        var post = request
        post.httpMethod = "POST"
        var answers: [String: String] = [:]

        let (asyncData, _) = try await manager.session.data(for: request)
        answers["data(for:)"] = String(decoding: asyncData, as: UTF8.self)
        let handed = Latch<Data?>("completion handler")
        manager.session.dataTask(with: request) { data, _, _ in handed.fulfill(data) }.resume()
        answers["dataTask(with:completionHandler:)"] = try await handed.wait(timeout: .seconds(10)).map {
            String(decoding: $0, as: UTF8.self)
        }
        let delegated = manager.session.dataTask(with: request)
        delegated.resume()
        try await delegate.completion(of: delegated)
        answers["dataTask(with:) and a delegate"] = String(decoding: delegate.record(for: delegated).body, as: UTF8.self)
        let (uploaded, _) = try await manager.session.upload(for: post, from: Data("body".utf8))
        answers["upload(for:from:)"] = String(decoding: uploaded, as: UTF8.self)
        let uploadHandled = Latch<Data?>("upload completion handler")
        manager.session.uploadTask(with: post, from: Data("body".utf8)) { data, _, _ in uploadHandled.fulfill(data) }.resume()
        answers["uploadTask(with:from:completionHandler:)"] = try await uploadHandled.wait(timeout: .seconds(10)).map {
            String(decoding: $0, as: UTF8.self)
        }

        for (api, answer) in answers { XCTAssertEqual(answer, "none", "\(api): the policy did not apply") }
        XCTAssertEqual(answers.count, 5)
        XCTAssertEqual(server.requestCount(path: "/echo"), 5)
        XCTAssertTrue(server.requests.allSatisfy { $0.headers["X-URLTaskManager-Policy"] == nil }, "the policy reached the server")
    }

    /// A redirect the pipeline follows keeps the caller's policy; a delegate that answers with
    /// the task's `originalRequest` (which carries the policy) pointed at the new URL sends no
    /// policy either.
    func testARedirectKeepsThePolicyAndNeverSendsIt() async throws {
        server.route("/hop") { _ in .redirect(to: "/echo", status: 302) }
        for delegate in [nil, ResendOriginal()] as [ResendOriginal?] {
            let manager = URLTaskManager(interceptors: [HeaderInterceptor(["Authorization": "Bearer app-token"])], delegate: delegate)
            defer { manager.invalidateAndCancel() }
            var request = URLRequest(url: server.url("/hop"))
            URLTaskPolicy(skipping: [HeaderInterceptor.self]).apply(to: &request)
            let (data, response) = try await manager.session.data(for: request)
            let who = delegate == nil ? "followed" : "resent by the delegate"
            XCTAssertEqual(response.url?.path, "/echo", who)
            XCTAssertEqual(String(decoding: data, as: UTF8.self), "none", "\(who): the redirected request lost its policy")
            if let delegate { XCTAssertEqual(delegate.answered.snapshot, 1) }
        }
        XCTAssertEqual(server.requestCount(path: "/echo"), 2)
        XCTAssertTrue(server.requests.allSatisfy { $0.headers["X-URLTaskManager-Policy"] == nil }, "the policy reached the server")
    }

    /// The header is the manager's own: one an interceptor sets (copying another request's
    /// headers, say) is not sent either.
    func testAnInterceptorCannotSendThePolicysHeader() async throws {
        var carrier = URLRequest(url: server.url("/echo"))
        URLTaskPolicy(skipping: [HeaderInterceptor.self]).apply(to: &carrier)
        let policy = try XCTUnwrap(carrier.value(forHTTPHeaderField: "X-URLTaskManager-Policy"))
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["X-URLTaskManager-Policy": policy])])
        defer { manager.invalidateAndCancel() }
        let (_, response) = try await manager.session.data(from: server.url("/echo"))
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        XCTAssertEqual(server.requestCount(path: "/echo"), 1)
        XCTAssertTrue(server.requests.allSatisfy { $0.headers["X-URLTaskManager-Policy"] == nil }, "the policy reached the server")
    }

    /// Policies are equal when they name the same types (not names) and the same answers and
    /// hold time: what coalescing compares before two requests share a transfer. A pure value.
    func testPoliciesAreEqualByTypeIdentity() {
        let first = URLTaskPolicy(skipping: [First.Tag.self])
        XCTAssertEqual(first, URLTaskPolicy(skipping: [First.Tag.self]))
        XCTAssertNotEqual(first, URLTaskPolicy(skipping: [Second.Tag.self]))
        XCTAssertNotEqual(URLTaskPolicy(adding: [First.Watch.self]), URLTaskPolicy(adding: [Second.Watch.self]))
        XCTAssertNotEqual(first, URLTaskPolicy(skipping: [First.Tag.self], maximumHoldTime: .seconds(1)))
        XCTAssertTrue(first.skipsInterceptor(First.Tag.self))
        XCTAssertFalse(first.skipsInterceptor(Second.Tag.self))
        XCTAssertTrue(URLTaskPolicy(adding: [Second.Watch.self]).adds(Second.Watch.self))
        XCTAssertFalse(URLTaskPolicy(adding: [Second.Watch.self]).adds(First.Watch.self))
        XCTAssertEqual(String(describing: First.Tag.self), String(describing: Second.Tag.self), "the names must collide")
        XCTAssertTrue(first.skippedInterceptors.first?.name.hasSuffix("First.Tag") == true, "\(first.skippedInterceptors)")

        var request = URLRequest(url: URL(string: "http://127.0.0.1/")!)
        let full = URLTaskPolicy(
            skipping: [First.Tag.self], skippingReactors: [RetryReactor.self], adding: [Second.Watch.self],
            responseValidation: .successfulStatusCodes, maximumHoldTime: .milliseconds(250))
        full.apply(to: &request)
        XCTAssertEqual(URLTaskPolicy(of: request), full, "the header carries every part")
        request.setValue("bm90IGEgcG9saWN5", forHTTPHeaderField: "X-URLTaskManager-Policy")
        XCTAssertNil(URLTaskPolicy(of: request))
    }

    /// The policy's header placed in the configuration's `httpAdditionalHeaders` (copied there
    /// with a request's other headers, say) is dropped: never sent, through the pipeline or a
    /// download, and not a policy for every request.
    func testAPolicyInTheConfigurationsAdditionalHeadersIsDroppedUnsent() async throws {
        var carrier = URLRequest(url: server.url("/echo"))
        URLTaskPolicy(skipping: [HeaderInterceptor.self]).apply(to: &carrier)
        let configuration = URLSessionConfiguration.ephemeral
        let policy = try XCTUnwrap(carrier.value(forHTTPHeaderField: "X-URLTaskManager-Policy"))
        configuration.httpAdditionalHeaders = ["x-urltaskmanager-policy": policy]  // any spelling

        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["Authorization": "Bearer app-token"])], configuration: configuration)
        defer { manager.invalidateAndCancel() }
        let (data, _) = try await manager.session.data(from: server.url("/echo"))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "Bearer app-token", "a configuration's header acted as a policy")
        // Without interceptors a download goes out unchecked (on Linux, by corelibs' own protocol,
        // which adds the outer configuration's headers).
        let plain = URLTaskManager(configuration: configuration)
        defer { plain.invalidateAndCancel() }
        let (file, _) = try await plain.session.download(for: URLRequest(url: server.url("/echo")))
        XCTAssertEqual(try String(contentsOf: file, encoding: .utf8), "none")
        try? FileManager.default.removeItem(at: file)
        XCTAssertEqual(server.requestCount(path: "/echo"), 2)
        XCTAssertTrue(server.requests.allSatisfy { $0.headers["X-URLTaskManager-Policy"] == nil }, "the policy reached the server")
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

/// Answers every redirect with the task's original request (its headers, its policy) sent to the
/// new URL: a common way to keep a request's headers across a redirect.
// @unchecked Sendable: `answered` is a lock-holding box; nothing else is stored.
private final class ResendOriginal: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    let answered = LockedBox(0)

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest,
        completionHandler: @escaping (URLRequest?) -> Void
    ) {
        answered.withLock { $0 += 1 }
        var resent = task.originalRequest ?? request
        resent.url = request.url
        completionHandler(resent)
    }
}

/// Parts whose types `String(describing:)` names "Tag" and "Watch", like `Second`'s.
private enum First {
    /// Sets `X-First`.
    struct Tag: URLTaskInterceptor {
        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            try await HeaderInterceptor(["X-First": "1"]).intercept(&task, context: context)
        }
    }

    /// Records that it was asked about an outcome; never reacts.
    struct Watch: URLTaskReactor {
        let seen: LockedBox<[String]>
        var configuration: URLTaskReactorConfiguration { .retry }
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
            seen.withLock { $0.append("first") }
            return false
        }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
    }
}

/// Parts named like `First`'s.
private enum Second {
    /// Sets `X-Second`.
    struct Tag: URLTaskInterceptor {
        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            try await HeaderInterceptor(["X-Second": "1"]).intercept(&task, context: context)
        }
    }

    /// Records that it was asked about an outcome; never reacts.
    struct Watch: URLTaskReactor {
        let seen: LockedBox<[String]>
        var configuration: URLTaskReactorConfiguration { .retry }
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
            seen.withLock { $0.append("second") }
            return false
        }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
    }
}
