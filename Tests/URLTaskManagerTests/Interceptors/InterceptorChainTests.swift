import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
import TestSupport

/// How the chain treats each command, and what happens when interceptors disagree.
final class InterceptorChainTests: OKServerTestCase {
    struct Boom: Error, Equatable {
        let path: String
    }

    /// Throws for `/boom`, returns `.fail` for `/fail`, passes everything else.
    struct Exploding: URLTaskInterceptor {
        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            let path = task.request.url?.path ?? ""
            if path == "/boom" { throw Boom(path: path) }
            if path == "/fail" { return .fail(Boom(path: path)) }
            return .execute
        }
    }

    func testAFailingInterceptorFailsOnlyItsTask() async throws {
        let after = ProbeLog<ProbeEvent>()
        let manager = URLTaskManager(interceptors: [Exploding(), CountingInterceptor(log: after)])
        defer { manager.invalidateAndCancel() }

        let paths = ["/ok1", "/boom", "/ok2", "/fail", "/ok3"]
        let results = await withTaskGroup(of: (String, Fetched).self) { group in
            for path in paths {
                let request = URLRequest(url: server.url(path))
                group.addTask { (path, await fetched(manager.session, request)) }
            }
            return await group.reduce(into: [String: Fetched]()) { $0[$1.0] = $1.1 }
        }

        for path in ["/boom", "/fail"] {
            guard let failure = results[path]?.taskError, failure.code == .interceptorFailed, let interceptor = failure.component?.name,
                let underlying = failure.underlying
            else {
                XCTFail("\(path): expected URLTaskError.interceptorFailed, got \(String(describing: results[path]))")
                continue
            }
            XCTAssertEqual(interceptor, "Exploding")
            XCTAssertEqual(underlying as? Boom, Boom(path: path))
        }
        for path in ["/ok1", "/ok2", "/ok3"] {
            XCTAssertEqual(results[path]?.status, 200, path)
        }
        XCTAssertEqual(Set(server.requests.map(\.path)), ["/ok1", "/ok2", "/ok3"])
        XCTAssertEqual(Set(after.all.map(\.path)), ["/ok1", "/ok2", "/ok3"], "later interceptors never see a failed task")
    }

    /// Answers `/cached` locally.
    struct LocalAnswer: URLTaskInterceptor {
        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            guard let url = task.request.url, url.path == "/cached" else { return .execute }
            let response = HTTPURLResponse(url: url, statusCode: 203, httpVersion: "HTTP/1.1", headerFields: ["X-Local": "yes"])!
            return .respond(response, body: Data("from the interceptor".utf8))
        }
    }

    func testRespondAnswersLocallyWithoutTouchingTheNetwork() async throws {
        let after = ProbeLog<ProbeEvent>()
        let manager = URLTaskManager(interceptors: [LocalAnswer(), CountingInterceptor(log: after)])
        defer { manager.invalidateAndCancel() }

        let result = await fetched(manager.session, URLRequest(url: server.url("/cached")))
        XCTAssertEqual(result.status, 203, "\(result)")
        XCTAssertEqual(result.text, "from the interceptor")
        guard case .response(_, let headers, _) = result else { return }
        XCTAssertEqual(headers["x-local"], "yes")

        // The completion-handler API sees the same answer.
        let completed = ProbeLog<Fetched>()
        manager.session.dataTask(with: server.url("/cached")) { data, response, error in
            completed.append(
                error.map { .failure($0) }
                    ?? .response(
                        status: (response as? HTTPURLResponse)?.statusCode ?? -1, headers: [:], body: data ?? Data()))
        }.resume()
        let viaHandler = try await completed.wait(count: 1).first
        XCTAssertEqual(viaHandler?.status, 203)
        XCTAssertEqual(viaHandler?.text, "from the interceptor")

        XCTAssertEqual(server.requests.count, 0, "a local answer never reaches the server")
        XCTAssertEqual(after.count, 0, "later interceptors never see an answered task")

        let passing = await fetched(manager.session, URLRequest(url: server.url("/live")))
        XCTAssertEqual(passing.status, 200)
        XCTAssertEqual(server.requests.map(\.path), ["/live"])
    }

    func testTheFirstInterceptorToStopTheChainWins() async throws {
        let batchProbe = ProbeLog<ProbeEvent>()
        let manager = URLTaskManager(interceptors: [Exploding(), ProbeInterceptor(BatchInterceptor(), log: batchProbe)])
        defer { manager.invalidateAndCancel() }

        let result = await fetched(manager.session, URLRequest(url: server.url("/fail")))
        guard let failure = result.taskError, failure.code == .interceptorFailed, let interceptor = failure.component?.name else {
            return XCTFail("expected URLTaskError.interceptorFailed, got \(result)")
        }
        XCTAssertEqual(interceptor, "Exploding")
        XCTAssertEqual(batchProbe.count, 0, "a failed task is never held by a later interceptor")
        XCTAssertEqual(manager.heldTaskCount(interceptorAt: 1), 0)
    }

    func testAHeldTaskIsFailedByALaterInterceptorAfterRelease() async throws {
        let holds = ProbeLog<ProbeEvent>()
        let outcomes = ProbeLog<(path: String, result: Fetched)>()
        let manager = URLTaskManager(interceptors: [ProbeInterceptor(BatchInterceptor(), log: holds), Exploding()])
        defer { manager.invalidateAndCancel() }

        for path in ["/fail", "/fine", "/boom"] {
            let request = URLRequest(url: server.url(path))
            Task { outcomes.append((path, await fetched(manager.session, request))) }
        }
        try await holds.wait(count: 3)
        XCTAssertEqual(outcomes.count, 0, "nothing fails while held: the later interceptor has not run")

        manager.flush()
        let results = Dictionary(uniqueKeysWithValues: try await outcomes.wait(count: 3).map { ($0.path, $0.result) })
        for path in ["/fail", "/boom"] {
            guard let failure = results[path]?.taskError, failure.code == .interceptorFailed, let interceptor = failure.component?.name,
                let underlying = failure.underlying
            else {
                XCTFail("\(path): expected the later interceptor's failure, got \(String(describing: results[path]))")
                continue
            }
            XCTAssertEqual(interceptor, "Exploding")
            XCTAssertEqual(underlying as? Boom, Boom(path: path))
        }
        XCTAssertEqual(results["/fine"]?.status, 200)
        XCTAssertEqual(server.requests.map(\.path), ["/fine"])
    }

    func testAReleasedTaskContinuesWithTheInterceptorAfterTheHolder() async throws {
        let before = ProbeLog<ProbeEvent>()
        let batch = ProbeLog<ProbeEvent>()
        let after = ProbeLog<ProbeEvent>()
        let outcomes = ProbeLog<Fetched>()
        let manager = URLTaskManager(interceptors: [
            CountingInterceptor(log: before),
            ProbeInterceptor(BatchInterceptor(size: 3), log: batch),
            CountingInterceptor(log: after),
        ])
        defer { manager.invalidateAndCancel() }

        // Three released when the third arrives, then two held and released by flush.
        for round in 0..<2 {
            let request = URLRequest(url: server.url("/r\(round)"))
            for _ in 0..<2 { Task { outcomes.append(await fetched(manager.session, request)) } }
            try await batch.wait(count: 2 + round * 3)
            if round == 0 {
                Task { outcomes.append(await fetched(manager.session, request)) }
                try await outcomes.wait(count: 3)
            } else {
                manager.flush()
            }
        }
        let results = try await outcomes.wait(count: 5)
        XCTAssertEqual(results.map(\.status), Array(repeating: 200, count: 5))

        XCTAssertEqual(before.count, 5, "a released task does not start the chain again")
        XCTAssertEqual(batch.count, 5, "a released task is not asked again by its holder")
        XCTAssertEqual(after.count, 5, "every released task continues after its holder")
        XCTAssertEqual(Set(after.all.map(\.taskID)), Set(batch.all.map(\.taskID)))
        XCTAssertEqual(server.requests.count, 5)
    }

    enum Trace: URLTaskValueKey { typealias Value = [String] }

    /// Appends `name` to the trace value and writes the trace as a header.
    struct Tracer: URLTaskInterceptor {
        let name: String
        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            let trace = (task.attemptValues[Trace.self] ?? []) + [name]
            task.attemptValues[Trace.self] = trace
            task.request.setValue(trace.joined(separator: ","), forHTTPHeaderField: "X-Trace")
            return .execute
        }
    }

    func testInterceptorsRunInOrderAndShareTypedValues() async throws {
        let manager = URLTaskManager(interceptors: [Tracer(name: "a"), Tracer(name: "b"), Tracer(name: "c")])
        defer { manager.invalidateAndCancel() }

        let result = await fetched(manager.session, URLRequest(url: server.url("/trace")))
        XCTAssertEqual(result.status, 200)
        XCTAssertEqual(server.requests.first?.headers["X-Trace"], "a,b,c")
    }

    /// Fails every task as a plain session would when offline.
    struct OfflineCheck: URLTaskInterceptor {
        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            .fail(URLError(.notConnectedToInternet, userInfo: [NSURLErrorFailingURLErrorKey: task.request.url as Any]))
        }
    }

    /// A `URLError` an interceptor fails a task with reaches the caller as itself, so that the
    /// `catch let error as URLError` every URLSession user has still catches it; its user info
    /// names the interceptor. The `completed` event says the code and what it means.
    func testAURLErrorFromAnInterceptorReachesTheCallerAsItself() async throws {
        let manager = URLTaskManager(interceptors: [OfflineCheck()])
        defer { manager.invalidateAndCancel() }
        let events = URLTaskEventTests.Collector(manager.events())
        do {
            _ = try await manager.session.data(from: server.url("/ok1?key=s3cr3t"))
            XCTFail("the offline check let the request go")
        } catch let error as URLError {
            XCTAssertEqual(error.code, .notConnectedToInternet)
            XCTAssertEqual(error.userInfo[URLTaskError.componentUserInfoKey] as? String, "OfflineCheck")
        }
        XCTAssertEqual(server.requests.count, 0)
        try await events.waitForCompletions(1)
        let completed = events.all.last.map { "\($0.kind)" } ?? ""
        XCTAssertTrue(completed.contains("error URLError -1009 (not connected to the internet) at http://127.0.0.1:"), completed)
        XCTAssertFalse(completed.contains("s3cr3t"), completed)
    }
}
