import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
import URLTaskManager  // not @testable: an interceptor written as an app writes one
import TestSupport

/// A ``SynchronousInterceptor`` of a third party: the manager calls it without a Swift task,
/// and `nil` sends the task down the async path, starting again from the task as it came.
final class SynchronousInterceptorTests: OKServerTestCase {
    /// Records which method ran and whether it ran inside a Swift task.
    struct Stamp: SynchronousInterceptor {
        let log: ProbeLog<String>
        var oneAtATime = false

        var interceptsOneAtATime: Bool { oneAtATime }

        func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand? {
            log.append("synchronous, in a Swift task: \(withUnsafeCurrentTask { $0 != nil })")
            if task.request.url?.path == "/fall-back" {
                task.request.setValue("dropped", forHTTPHeaderField: "X-Before-Nil")
                return nil
            }
            task.request.setValue("synchronous", forHTTPHeaderField: "X-Path")
            return .execute
        }

        func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
            log.append("async, in a Swift task: \(withUnsafeCurrentTask { $0 != nil })")
            task.request.setValue("async", forHTTPHeaderField: "X-Path")
            return .execute
        }
    }

    func testItRunsWithoutASwiftTask() async throws {
        let log = ProbeLog<String>()
        let manager = URLTaskManager(interceptors: [Stamp(log: log)])
        defer { manager.invalidateAndCancel() }

        let result = await fetched(manager.session, URLRequest(url: server.url("/inline")))

        XCTAssertEqual(result.status, 200, "\(result)")
        XCTAssertEqual(log.all, ["synchronous, in a Swift task: false"])
        XCTAssertEqual(server.requests(path: "/inline").map { $0.headers["X-Path"] }, ["synchronous"])
    }

    func testNilFallsBackToTheAsyncMethodWithoutTheChangesMadeBefore() async throws {
        let log = ProbeLog<String>()
        let manager = URLTaskManager(interceptors: [Stamp(log: log)])
        defer { manager.invalidateAndCancel() }

        let result = await fetched(manager.session, URLRequest(url: server.url("/fall-back")))

        XCTAssertEqual(result.status, 200, "\(result)")
        XCTAssertEqual(log.all, ["synchronous, in a Swift task: false", "async, in a Swift task: true"])
        let seen = server.requests(path: "/fall-back")
        XCTAssertEqual(seen.map { $0.headers["X-Path"] }, ["async"])
        XCTAssertEqual(seen.filter { $0.headers.contains("X-Before-Nil") }.count, 0, "a change made before returning nil was sent")
    }

    func testOneAtATimeTakesOnlyTheAsyncPath() async throws {
        let log = ProbeLog<String>()
        let manager = URLTaskManager(interceptors: [Stamp(log: log, oneAtATime: true)])
        defer { manager.invalidateAndCancel() }

        let result = await fetched(manager.session, URLRequest(url: server.url("/gated")))

        XCTAssertEqual(result.status, 200, "\(result)")
        XCTAssertEqual(log.all, ["async, in a Swift task: true"])
        XCTAssertEqual(server.requests(path: "/gated").map { $0.headers["X-Path"] }, ["async"])
    }

    func testAPerRequestInterceptorRunsWhatItWrapsInlineForARequestThatAddsIt() async throws {
        let log = ProbeLog<String>()
        let manager = URLTaskManager(interceptors: [PerRequestInterceptor(Stamp(log: log))])
        defer { manager.invalidateAndCancel() }
        var request = URLRequest(url: server.url("/per-request"))
        URLTaskPolicy(adding: [Stamp.self]).apply(to: &request)

        let result = await fetched(manager.session, request)

        XCTAssertEqual(result.status, 200, "\(result)")
        XCTAssertEqual(log.all, ["synchronous, in a Swift task: false"])
        XCTAssertEqual(server.requests(path: "/per-request").map { $0.headers["X-Path"] }, ["synchronous"])
    }

    func testAPerRequestInterceptorLeavesARequestThatDoesNotAddItUntouched() async throws {
        let log = ProbeLog<String>()
        let manager = URLTaskManager(interceptors: [PerRequestInterceptor(Stamp(log: log))])
        defer { manager.invalidateAndCancel() }

        let result = await fetched(manager.session, URLRequest(url: server.url("/not-added")))

        XCTAssertEqual(result.status, 200, "\(result)")
        XCTAssertEqual(log.all, [])
        XCTAssertEqual(server.requests(path: "/not-added").map { $0.headers["X-Path"] }, [nil])
    }
}
