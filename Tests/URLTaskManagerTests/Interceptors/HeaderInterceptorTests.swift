import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
import TestSupport

/// Headers set by interceptors, as the server receives them.
final class HeaderInterceptorTests: OKServerTestCase {
    func testFixedAndComputedHeadersReachTheServer() async throws {
        let computedCalls = ProbeLog<URLTask.ID>()
        let manager = URLTaskManager(interceptors: [
            HeaderInterceptor([
                "X-Fixed": .fixed("fixed-value"),
                "X-Task": .computed { task in
                    computedCalls.append(task.id)
                    return "task-\(task.id)"
                },
                "X-Absent": .computed { _ in nil },
            ])
        ])
        defer { manager.invalidateAndCancel() }

        var request = URLRequest(url: server.url("/h"))
        request.setValue("caller", forHTTPHeaderField: "X-Caller")
        for _ in 0..<3 {
            let result = await fetched(manager.session, request)
            XCTAssertEqual(result.status, 200, "\(result)")
        }

        let seen = server.requests(path: "/h")
        XCTAssertEqual(seen.count, 3)
        XCTAssertEqual(seen.map { $0.headers["X-Fixed"] }, Array(repeating: "fixed-value", count: 3))
        XCTAssertEqual(seen.map { $0.headers["X-Caller"] }, Array(repeating: "caller", count: 3))
        XCTAssertEqual(seen.filter { $0.headers.contains("X-Absent") }.count, 0, "a computed nil must leave the header unset")
        // One computed value per task, and it is the value of that task.
        let ids = computedCalls.all
        XCTAssertEqual(ids.count, 3)
        XCTAssertEqual(Set(ids).count, 3)
        XCTAssertEqual(seen.map { $0.headers["X-Task"] }, ids.map { "task-\($0)" })
    }

    func testReplaceOverridesTheCallerAndKeepExistingDoesNot() async throws {
        let keptCalls = ProbeLog<URLTask.ID>()
        let manager = URLTaskManager(interceptors: [
            HeaderInterceptor(["X-Replace": "interceptor"]),
            HeaderInterceptor(
                [
                    "X-Keep": .computed { task in
                        keptCalls.append(task.id); return "interceptor"
                    }
                ], conflict: .keepExisting),
        ])
        defer { manager.invalidateAndCancel() }

        var withCallerValues = URLRequest(url: server.url("/conflict"))
        withCallerValues.setValue("caller", forHTTPHeaderField: "X-Replace")
        withCallerValues.setValue("caller", forHTTPHeaderField: "x-keep")  // names compare case-insensitively
        let first = await fetched(manager.session, withCallerValues)
        XCTAssertEqual(first.status, 200, "\(first)")
        let second = await fetched(manager.session, URLRequest(url: server.url("/conflict")))
        XCTAssertEqual(second.status, 200, "\(second)")

        let seen = server.requests(path: "/conflict")
        XCTAssertEqual(seen.count, 2)
        XCTAssertEqual(seen.first?.headers.values(for: "X-Replace"), ["interceptor"])
        XCTAssertEqual(seen.first?.headers.values(for: "X-Keep"), ["caller"])
        XCTAssertEqual(seen.last?.headers.values(for: "X-Replace"), ["interceptor"])
        XCTAssertEqual(seen.last?.headers.values(for: "X-Keep"), ["interceptor"])
        XCTAssertEqual(keptCalls.count, 1, "a kept header's computed value is not even computed")
    }

    /// The interceptors set headers without `setValue` (``HeaderName``, `replaceHeader`): a
    /// caller's value under any spelling is replaced, never sent beside the new one, and the name
    /// goes out as `setValue` would have stored it.
    func testReplacingAHeaderRemovesEverySpellingOfIt() async throws {
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["x-replace": "interceptor", "X-Request-ID": "id"])])
        defer { manager.invalidateAndCancel() }
        var request = URLRequest(url: server.url("/spelling"))
        request.allHTTPHeaderFields = ["X-REPLACE": "caller", "x-request-id": "caller"]
        let result = await fetched(manager.session, request)
        XCTAssertEqual(result.status, 200, "\(result)")
        let seen = try XCTUnwrap(server.requests(path: "/spelling").first)
        XCTAssertEqual(seen.headers.values(for: "X-Replace"), ["interceptor"], "\(seen.headers)")
        XCTAssertEqual(seen.headers.values(for: "X-Request-ID"), ["id"], "\(seen.headers)")
    }

    /// ``HeaderName/stored`` is the key `setValue(_:forHTTPHeaderField:)` stores a name under.
    func testHeaderNameIsStoredAsSetValueStoresIt() {
        for name in ["Authorization", "x-request-id", "X-Request-ID", "ETag", "www-authenticate", "X-B3-TraceId", "traceparent", "a.b_c"] {
            var request = URLRequest(url: URL(string: "http://127.0.0.1/")!)
            request.setValue("v", forHTTPHeaderField: name)
            var replaced = URLRequest(url: URL(string: "http://127.0.0.1/")!)
            replaced.replaceHeader(HeaderName(name), with: "v")
            XCTAssertEqual(replaced.allHTTPHeaderFields, request.allHTTPHeaderFields, name)
        }
    }

    func testLaterInterceptorsSeeEarlierChanges() async throws {
        let manager = URLTaskManager(interceptors: [
            HeaderInterceptor(["X-Order": "first", "X-Last": "first"]),
            HeaderInterceptor(["X-Order": "second"], conflict: .keepExisting),
            HeaderInterceptor(["X-Last": "second"]),
        ])
        defer { manager.invalidateAndCancel() }

        let result = await fetched(manager.session, URLRequest(url: server.url("/order")))
        XCTAssertEqual(result.status, 200, "\(result)")
        let seen = try XCTUnwrap(server.requests(path: "/order").first)
        XCTAssertEqual(seen.headers["X-Order"], "first")
        XCTAssertEqual(seen.headers["X-Last"], "second")
    }

    // MARK: Requeue

    struct RefreshOn401: URLTaskReactor {
        let token: LockedBox<String>
        let reactedTo: ProbeLog<Int>
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 401 }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
            reactedTo.append(task.attempt)
            token.withLock { $0 = "new" }
        }
    }

    /// Marks the first attempt only, to prove a resend starts from the caller's request.
    struct FirstAttemptMarker: URLTaskInterceptor {
        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            if task.attempt == 1 { task.request.setValue("yes", forHTTPHeaderField: "X-First-Attempt") }
            return .execute
        }
    }

    func testRequeuedTaskIsInterceptedAgainAndCarriesTheNewValue() async throws {
        server.route("/api") { request in
            request.headers["Authorization"] == "Bearer new" ? .text("fresh") : .status(401)
        }
        let token = LockedBox("old")
        let probe = ProbeLog<ProbeEvent>()
        let reactedTo = ProbeLog<Int>()
        let manager = URLTaskManager(
            interceptors: [
                ProbeInterceptor(HeaderInterceptor(["Authorization": .computed { _ in "Bearer \(token.snapshot)" }]), log: probe),
                FirstAttemptMarker(),
            ],
            reactors: [RefreshOn401(token: token, reactedTo: reactedTo)]
        )
        defer { manager.invalidateAndCancel() }

        var request = URLRequest(url: server.url("/api"))
        request.setValue("caller", forHTTPHeaderField: "X-Caller")
        let result = await fetched(manager.session, request)

        XCTAssertEqual(result.status, 200, "\(result)")
        XCTAssertEqual(result.text, "fresh")
        let seen = server.requests(path: "/api")
        XCTAssertEqual(seen.map { $0.headers["Authorization"] }, ["Bearer old", "Bearer new"])
        XCTAssertEqual(seen.map { $0.headers["X-First-Attempt"] }, ["yes", nil], "the resend must start from the caller's request")
        XCTAssertEqual(seen.map { $0.headers["X-Caller"] }, ["caller", "caller"])
        let events = probe.all
        XCTAssertEqual(events.map(\.attempt), [1, 2], "URLTask.attempt is 2 on the resend")
        XCTAssertEqual(Set(events.map(\.taskID)).count, 1, "the task keeps its id across attempts")
        XCTAssertEqual(events.last?.headers["Authorization"], "Bearer new")
        XCTAssertEqual(reactedTo.all, [1])
    }

    // MARK: Validation

    func testHeaderInterceptorRefusesCRLFAndNULInValues() async throws {
        let manager = URLTaskManager(interceptors: [
            HeaderInterceptor([
                "X-Value": .computed { task in
                    switch task.request.url?.path {
                    case "/crlf": "a\r\nInjected: yes"
                    case "/lf": "a\nInjected: yes"
                    case "/cr": "a\rb"
                    case "/nul": "a\u{0}b"
                    default: "fine"
                    }
                }
            ])
        ])
        defer { manager.invalidateAndCancel() }

        for path in ["/crlf", "/lf", "/cr", "/nul"] {
            let result = await fetched(manager.session, URLRequest(url: server.url(path)))
            guard let failure = result.taskError, failure.code == .invalidHeader, let name = failure.headerName else {
                XCTFail("\(path): expected URLTaskError.invalidHeader, got \(result)")
                continue
            }
            XCTAssertEqual(name, "X-Value", path)
        }
        let fine = await fetched(manager.session, URLRequest(url: server.url("/fine")))
        XCTAssertEqual(fine.status, 200, "\(fine)")
        XCTAssertEqual(server.requests.map(\.path), ["/fine"], "no refused request may reach the server")
        XCTAssertEqual(server.requests.first?.headers["X-Value"], "fine")
    }

    func testHeaderInterceptorRefusesANameThatIsNotAToken() async throws {
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["Bad Name": "value"])])
        defer { manager.invalidateAndCancel() }

        let result = await fetched(manager.session, URLRequest(url: server.url("/name")))
        guard let failure = result.taskError, failure.code == .invalidHeader, let name = failure.headerName else {
            return XCTFail("expected URLTaskError.invalidHeader, got \(result)")
        }
        XCTAssertEqual(name, "Bad Name")
        XCTAssertEqual(server.requests.count, 0)
    }

    /// Sets a header with `URLRequest.setValue` directly, bypassing `HeaderInterceptor`.
    struct RawSetter: URLTaskInterceptor {
        let name: String
        let value: String
        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            task.request.setValue(value, forHTTPHeaderField: name)
            return .execute
        }
    }

    func testRawInterceptorSettingACRLFValueNeverSmugglesAHeader() async throws {
        let manager = URLTaskManager(interceptors: [RawSetter(name: "X-Raw", value: "a\r\nInjected: yes")])
        defer { manager.invalidateAndCancel() }

        let result = await fetched(manager.session, URLRequest(url: server.url("/raw")))
        #if canImport(FoundationNetworking)
        // swift-corelibs-foundation's URLRequest.setValue silently drops a value containing
        // CR or LF: the header never exists, so there is nothing for the manager to refuse and
        // the request goes out without it.
        XCTAssertEqual(result.status, 200, "\(result)")
        let seen = try XCTUnwrap(server.requests(path: "/raw").first)
        XCTAssertFalse(seen.headers.contains("X-Raw"))
        XCTAssertFalse(seen.headers.contains("Injected"))
        #else
        if let failure = result.taskError, failure.code == .invalidHeader, let name = failure.headerName {
            XCTAssertEqual(name, "X-Raw")
            XCTAssertEqual(server.requests.count, 0)
        } else {
            XCTAssertEqual(result.status, 200, "\(result)")
            let seen = try XCTUnwrap(server.requests(path: "/raw").first)
            XCTAssertFalse(seen.headers.contains("Injected"))
            XCTAssertFalse(seen.headers["X-Raw"]?.contains("\n") ?? false)
        }
        #endif
    }

    func testRawInterceptorSettingAnInvalidNameIsRefusedBeforeSending() async throws {
        let manager = URLTaskManager(interceptors: [RawSetter(name: "Bad Name", value: "v")])
        defer { manager.invalidateAndCancel() }

        let result = await fetched(manager.session, URLRequest(url: server.url("/raw-name")))
        guard let failure = result.taskError, failure.code == .invalidHeader, let name = failure.headerName else {
            return XCTFail("expected URLTaskError.invalidHeader, got \(result)")
        }
        XCTAssertEqual(name, "Bad Name")
        XCTAssertEqual(server.requests.count, 0)
    }
}
