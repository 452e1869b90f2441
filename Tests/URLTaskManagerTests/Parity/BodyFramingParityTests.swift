import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskResilience
import TestSupport

/// What goes on the wire frames exactly the bytes sent: a caller's `Content-Length` that
/// disagrees with the body never reaches the server, so the rest of the body cannot be read
/// as a second request on the same connection.
final class BodyFramingParityTests: XCTestCase {
    private var server: LoopbackServer!
    /// Sixteen bytes, then a whole request: under `Content-Length: 16` the server would read the
    /// tail as a request the caller never made.
    private static let smuggling = Data("0123456789abcdef".utf8) + Data("GET /smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)

    override func setUpWithError() throws {
        server = try LoopbackServer()
        server.route("POST", "/upload") { request in
            .text("\(request.bodyLength)").with {
                $0.headers["X-Content-Length"] = request.headers["content-length"] ?? "none"
                $0.headers["X-Chunked"] = String(request.wasChunked)
            }
        }
        server.route("/smuggled") { _ in .text("smuggled", status: 404) }
    }

    override func tearDown() {
        server.shutdown()
        server = nil
    }

    private func request(_ kind: String) -> URLRequest {
        var request = URLRequest(url: server.url("/upload"))
        request.httpMethod = "POST"
        request.setValue("16", forHTTPHeaderField: "Content-Length")
        if kind == "stream" {
            request.httpBodyStream = InputStream(data: Self.smuggling)
        } else {
            request.httpBody = Self.smuggling
        }
        return request
    }

    /// How the server framed what it received, and how many requests it read from the body.
    private func send(_ request: URLRequest, through session: URLSession) async -> (result: Fetched, framing: String, smuggled: Int) {
        server.resetRecords()
        let result = await fetched(session, request)
        var framing = "?"
        if case .response(_, let headers, _) = result {
            framing = headers["x-chunked"] == "true" ? "chunked" : "Content-Length: \(headers["x-content-length"] ?? "?")"
        }
        // A request read from the body is answered before the next one on the connection.
        _ = await fetched(session, URLRequest(url: server.url("/smuggled-check")))
        return (result, framing, server.requestCount(path: "/smuggled"))
    }

    /// The bare manager, a manager with a reactor (whose stream body is buffered for replay)
    /// and one whose interceptor replaced the body: every byte arrives as the one request's
    /// body under the length of what was sent, and no second request is read from it.
    func testACallersContentLengthThatDisagreesWithTheBodyNeverFramesIt() async throws {
        let managers = [
            ("bare manager", URLTaskManager(configuration: ParityHarness.defaultConfiguration())),
            ("manager with a reactor", URLTaskManager(reactors: [RetryReactor()], configuration: ParityHarness.defaultConfiguration())),
        ]
        defer { managers.forEach { $0.1.invalidateAndCancel() } }
        for (name, manager) in managers {
            for kind in ["stream", "data"] {
                let label = "\(name), \(kind) body"
                let sent = await send(request(kind), through: manager.session)
                printFigures("FRAMING| \(label): \(sent.framing), \(sent.smuggled) smuggled")
                XCTAssertEqual(sent.result.text, String(Self.smuggling.count), "\(label): the whole body is one request's")
                XCTAssertTrue(["chunked", "Content-Length: \(Self.smuggling.count)"].contains(sent.framing), "\(label): \(sent.framing)")
                XCTAssertEqual(sent.smuggled, 0, "\(label): no request was read from the body")
            }
        }
    }

    /// The control: a plain session sends a stream chunked, as the manager does. (corelibs
    /// sends an `httpBody` under the caller's wrong length; the manager does not copy that.)
    func testAPlainSessionSendsAStreamBodyChunked() async throws {
        let plain = URLSession(configuration: ParityHarness.defaultConfiguration())
        defer { plain.invalidateAndCancel() }
        let stream = await send(request("stream"), through: plain)
        XCTAssertEqual(stream.framing, "chunked")
        XCTAssertEqual(stream.smuggled, 0)
        let data = await send(request("data"), through: plain)
        printFigures("FRAMING| plain, data body: \(data.framing), \(data.smuggled) smuggled")
    }
}
