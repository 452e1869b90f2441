import Foundation
import LoopbackServer
import XCTest

@testable import URLTaskManager
@testable import URLTaskResilience
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// W3C Trace Context: parsing as the specification says, and `TraceContextInterceptor` over
/// real HTTP (valid headers, a new span per attempt, a task-local context continued, invalid
/// values replaced, `tracestate` carried, the trace id in the events).
final class TraceContextTests: XCTestCase {
    private let example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    func testParsingAcceptsWhatTheSpecificationAcceptsAndNothingElse() throws {
        let context = try XCTUnwrap(TraceContext(traceparent: example, tracestate: "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"))
        XCTAssertEqual(context.traceID, "4bf92f3577b34da6a3ce929d0e0e4736")
        XCTAssertEqual(context.spanID, "00f067aa0ba902b7")
        XCTAssertTrue(context.isSampled)
        XCTAssertEqual(context.traceState, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        XCTAssertEqual(context.traceparent, example)

        let invalid = [
            "",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // upper case
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // all-zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // all-zero span id
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version ff
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // version 00 is exactly 55
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // a later version: "-" must follow
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",  // a misplaced dash
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",  // not hex
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ]
        for value in invalid { XCTAssertNil(TraceContext(traceparent: value), value) }
        // A later version is read by its first four fields.
        XCTAssertEqual(
            TraceContext(traceparent: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future")?.spanID, "00f067aa0ba902b7")
        // Only the sampled flag is kept at version 00.
        XCTAssertEqual(TraceContext(traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff")?.flags, 0x01)

        // tracestate: a malformed list is dropped, the traceparent stays.
        for state in ["Upper=1", "a=1,a=2", "a=", "=1", "a=b,c", "a=é", String(repeating: "k=v,", count: 33)] {
            XCTAssertNil(TraceContext(traceparent: example, tracestate: state)?.traceState, state)
            XCTAssertNotNil(TraceContext(traceparent: example, tracestate: state))
        }
        XCTAssertEqual(TraceContext(traceparent: example, tracestate: "t61@vendor=1, ,x_y-z*/=a")?.traceState, "t61@vendor=1,x_y-z*/=a")
    }

    func testANewTraceAndAChildSpan() throws {
        let trace = TraceContext.newTrace(sampled: false)
        XCTAssertNotNil(TraceContext(traceparent: trace.traceparent))
        XCTAssertFalse(trace.isSampled)
        XCTAssertTrue(trace.traceparent.hasSuffix("-00"))
        let child = trace.childSpan()
        XCTAssertEqual(child.traceID, trace.traceID)
        XCTAssertNotEqual(child.spanID, trace.spanID)
        XCTAssertNotEqual(TraceContext.newTrace().traceID, TraceContext.newTrace().traceID)
    }

    /// A server that records every `traceparent` and `tracestate` it receives, and answers 503
    /// to the first request of `/flaky`.
    private func tracingServer() throws -> LoopbackServer {
        let server = try LoopbackServer()
        let calls = LockedList<Int>()
        server.route("GET", "/flaky") { _ in
            calls.append(1)
            return calls.all.count == 1 ? .status(503).with { $0.headers["Retry-After"] = "0" } : .text("ok")
        }
        server.route(prefix: "/") { _ in .text("ok") }
        return server
    }

    private func received(_ server: LoopbackServer, _ path: String) throws -> [(parent: TraceContext, state: String?)] {
        try server.requests(path: path).map { request in
            let header = try XCTUnwrap(request.headers["traceparent"], "no traceparent on \(path)")
            let parent = try XCTUnwrap(TraceContext(traceparent: header), "an invalid traceparent: \(header)")
            return (parent, request.headers["tracestate"])
        }
    }

    func testEveryAttemptCarriesAValidTraceparentWithANewSpanInOneTraceFoundInTheEvents() async throws {
        let server = try tracingServer()
        defer { server.shutdown() }
        let manager = URLTaskManager(interceptors: [TraceContextInterceptor()], reactors: [RetryReactor()])
        defer { manager.invalidateAndCancel() }
        let collector = URLTaskEventTests.Collector(manager.events())

        _ = try await manager.session.data(from: server.url("/flaky"))
        _ = try await manager.session.data(from: server.url("/other"))
        try await collector.waitForCompletions(2)

        let attempts = try received(server, "/flaky")
        XCTAssertEqual(attempts.count, 2)
        XCTAssertEqual(attempts[0].parent.traceID, attempts[1].parent.traceID, "a retry belongs to the same trace")
        XCTAssertNotEqual(attempts[0].parent.spanID, attempts[1].parent.spanID, "each attempt is a new span")
        XCTAssertTrue(attempts.allSatisfy { $0.parent.isSampled && $0.state == nil })
        let other = try XCTUnwrap(try received(server, "/other").first)
        XCTAssertNotEqual(other.parent.traceID, attempts[0].parent.traceID, "another task starts another trace")

        // The events name every traceparent sent, so a log line leads to the server's logs.
        let annotated = collector.all.compactMap { event -> String? in
            guard case .annotated("traceparent", let value) = event.kind else { return nil }
            return value
        }
        XCTAssertEqual(annotated, (attempts + [other]).map(\.parent.traceparent))
    }

    func testATaskLocalContextIsContinuedWithItsStateWhenTheRequestIsStamped() async throws {
        let server = try tracingServer()
        defer { server.shutdown() }
        let session = URLTaskManager(interceptors: [TraceContextInterceptor()], reactors: [RetryReactor()]).session
        defer { session.invalidateAndCancel() }
        let incoming = try XCTUnwrap(TraceContext(traceparent: example, tracestate: "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"))

        try await TraceContext.$current.withValue(incoming) {
            var request = URLRequest(url: server.url("/flaky"))
            TraceContext.setTraceContext(on: &request)
            _ = try await session.data(for: request)
        }

        let attempts = try received(server, "/flaky")
        XCTAssertEqual(attempts.count, 2)
        for attempt in attempts {
            XCTAssertEqual(attempt.parent.traceID, incoming.traceID)
            XCTAssertNotEqual(attempt.parent.spanID, incoming.spanID, "the request is a span of its own")
            XCTAssertEqual(attempt.state, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        }
        XCTAssertNotEqual(attempts[0].parent.spanID, attempts[1].parent.spanID)
    }

    /// Pins why the request must be stamped: URLSession starts loading on its own threads, so
    /// a task-local value set around `data(for:)` does not reach the interceptor.
    func testATaskLocalContextDoesNotReachTheInterceptorByItself() async throws {
        let server = try tracingServer()
        defer { server.shutdown() }
        let session = URLTaskManager(interceptors: [TraceContextInterceptor()]).session
        defer { session.invalidateAndCancel() }
        let incoming = try XCTUnwrap(TraceContext(traceparent: example))

        try await TraceContext.$current.withValue(incoming) {
            _ = try await session.data(from: server.url("/unstamped"))
        }

        let sent = try XCTUnwrap(try received(server, "/unstamped").first)
        XCTAssertNotEqual(sent.parent.traceID, incoming.traceID, "the task-local value crossed URLSession: stamping is no longer needed")
    }

    func testTheContextClosureIsContinuedAndInvalidIncomingValuesAreReplaced() async throws {
        let server = try tracingServer()
        defer { server.shutdown() }
        let ambient = TraceContext.newTrace(traceState: "app=1")
        let session = URLTaskManager(interceptors: [TraceContextInterceptor(context: { ambient })]).session
        defer { session.invalidateAndCancel() }

        var invalid = URLRequest(url: server.url("/invalid"))
        invalid.setValue("00-00000000000000000000000000000000-00f067aa0ba902b7-01", forHTTPHeaderField: "traceparent")
        invalid.setValue("forged=1", forHTTPHeaderField: "tracestate")
        _ = try await session.data(for: invalid)
        var valid = URLRequest(url: server.url("/valid"))
        valid.setValue(example, forHTTPHeaderField: "traceparent")
        valid.setValue("rojo=1", forHTTPHeaderField: "tracestate")
        _ = try await session.data(for: valid)

        let replaced = try XCTUnwrap(try received(server, "/invalid").first)
        XCTAssertEqual(replaced.parent.traceID, ambient.traceID, "an invalid traceparent is replaced by the context's")
        XCTAssertEqual(replaced.state, "app=1", "and its tracestate with it")
        let continued = try XCTUnwrap(try received(server, "/valid").first)
        XCTAssertEqual(continued.parent.traceID, "4bf92f3577b34da6a3ce929d0e0e4736", "a valid traceparent on the request wins")
        XCTAssertEqual(continued.state, "rojo=1")
    }

    func testAnInvalidIncomingValueWithoutAContextStartsANewTraceAndDropsItsState() async throws {
        let server = try tracingServer()
        defer { server.shutdown() }
        let session = URLTaskManager(interceptors: [TraceContextInterceptor(sampled: false)]).session
        defer { session.invalidateAndCancel() }
        var request = URLRequest(url: server.url("/x"))
        request.setValue("not a traceparent", forHTTPHeaderField: "traceparent")
        request.setValue("rojo=1", forHTTPHeaderField: "tracestate")

        _ = try await session.data(for: request)

        let sent = try XCTUnwrap(try received(server, "/x").first)
        XCTAssertFalse(sent.parent.isSampled)
        XCTAssertNil(sent.state)
    }

    /// 200 tasks at once, observed: each gets exactly one `traceparent` event, its own trace, the
    /// same value the server saw; and no task leaves an entry behind in the observer directory.
    func testManyConcurrentTasksEachGetTheirOwnTraceInTheirOwnEventsAndLeaveNothingBehind() async throws {
        let server = try tracingServer()
        defer { server.shutdown() }
        let manager = URLTaskManager(interceptors: [TraceContextInterceptor()])
        defer { manager.invalidateAndCancel() }
        let collector = URLTaskEventTests.Collector(manager.events(bufferingNewest: 10_000))  // none lost: 5 events a task
        let session = manager.session

        try await withThrowingTaskGroup(of: Void.self) { group in
            for n in 0..<200 {
                group.addTask { _ = try await session.data(from: server.url("/many/\(n)")) }
            }
            try await group.waitForAll()
        }
        try await collector.waitForCompletions(200)

        var byTask: [URLTask.ID: [String]] = [:]
        for event in collector.all {
            if case .annotated("traceparent", let value) = event.kind { byTask[event.task, default: []].append(value) }
        }
        XCTAssertEqual(byTask.count, 200)
        XCTAssertTrue(byTask.values.allSatisfy { $0.count == 1 })
        let annotated = Set(byTask.values.flatMap { $0 })
        let received = Set(server.requests.compactMap { $0.headers["traceparent"] })
        XCTAssertEqual(annotated, received)
        XCTAssertEqual(Set(annotated.compactMap { TraceContext(traceparent: $0)?.traceID }).count, 200)
        let ids = Array(byTask.keys)
        try await waitUntil("every observer left the directory") {
            ids.allSatisfy { !TaskEventRecorderDirectory.shared.hasEntry(for: $0) }
        }
    }
}
