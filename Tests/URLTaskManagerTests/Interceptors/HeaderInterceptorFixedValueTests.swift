import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
import TestSupport

/// A `HeaderInterceptor` of fixed values checks its names and values once, when it is made, and
/// sets all its fields in one write: the same answers as checking them on every task.
final class HeaderInterceptorFixedValueTests: OKServerTestCase {
    func testAFixedValueWithCRLFIsRefusedUnlessTheCallersValueIsKept() async throws {
        let replacing = URLTaskManager(interceptors: [HeaderInterceptor(["X-Fine": "1", "X-Bad": "a\r\nInjected: yes"])])
        defer { replacing.invalidateAndCancel() }
        let refused = await fetched(replacing.session, URLRequest(url: server.url("/refused")))
        XCTAssertEqual(refused.taskError?.code, .invalidHeader, "\(refused)")
        XCTAssertEqual(refused.taskError?.headerName, "X-Bad")

        let keeping = URLTaskManager(interceptors: [HeaderInterceptor(["X-Bad": "a\nb"], conflict: .keepExisting)])
        defer { keeping.invalidateAndCancel() }
        var callerSetIt = URLRequest(url: server.url("/kept"))
        callerSetIt.setValue("caller", forHTTPHeaderField: "x-bad")
        let kept = await fetched(keeping.session, callerSetIt)
        XCTAssertEqual(kept.status, 200, "the caller's value is kept, so the interceptor's is never sent: \(kept)")
        let notSet = await fetched(keeping.session, URLRequest(url: server.url("/refused")))
        XCTAssertEqual(notSet.taskError?.code, .invalidHeader, "\(notSet)")

        XCTAssertEqual(server.requests.map(\.path), ["/kept"], "no refused request may reach the server")
        XCTAssertEqual(server.requests.first?.headers.values(for: "X-Bad"), ["caller"])
    }

    func testSeveralFixedFieldsReplaceEverySpellingInOneWrite() async throws {
        let manager = URLTaskManager(interceptors: [
            HeaderInterceptor(["x-a": "1", "X-B": "2"]), HeaderInterceptor(["X-A": "3", "x-c": "4"]),
        ])
        defer { manager.invalidateAndCancel() }
        var request = URLRequest(url: server.url("/fields"))
        request.allHTTPHeaderFields = ["X-A": "caller", "x-b": "caller", "X-Caller": "yes"]
        let result = await fetched(manager.session, request)
        XCTAssertEqual(result.status, 200, "\(result)")
        let seen = try XCTUnwrap(server.requests(path: "/fields").first)
        XCTAssertEqual(seen.headers.values(for: "X-A"), ["3"], "\(seen.headers)")
        XCTAssertEqual(seen.headers.values(for: "X-B"), ["2"], "\(seen.headers)")
        XCTAssertEqual(seen.headers.values(for: "X-C"), ["4"], "\(seen.headers)")
        XCTAssertEqual(seen.headers.values(for: "X-Caller"), ["yes"], "\(seen.headers)")
    }

    /// The send path looks `Content-Length` and the policy's header up with `headerValue`, which
    /// must answer as `value(forHTTPHeaderField:)` does under every spelling.
    func testHeaderValueAnswersAsValueForHTTPHeaderField() {
        let fieldSets: [[String: String]] = [
            [:], ["Content-Length": "3"], ["content-length": "4", "X-A": "1"], ["CONTENT-LENGTH": "5"], ["X-Content-Length": "6"],
            ["X-URLTaskManager-Policy": "p"], ["x-urltaskmanager-policy": "q", "Accept": "*/*"],
        ]
        for fields in fieldSets {
            var request = URLRequest(url: URL(string: "http://127.0.0.1/")!)
            if !fields.isEmpty { request.allHTTPHeaderFields = fields }
            for name in ["Content-Length", "content-length", "X-URLTaskManager-Policy", "Accept", "X-Absent"] {
                XCTAssertEqual(request.headerValue(HeaderName(name)), request.value(forHTTPHeaderField: name), "\(name) in \(fields)")
            }
        }
    }
}
