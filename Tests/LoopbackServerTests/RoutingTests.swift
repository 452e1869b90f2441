import Foundation
import LoopbackServer
import XCTest

/// Route precedence and replacement, plus `HTTPFields` semantics.
final class RoutingTests: XCTestCase {
    private var server: LoopbackServer!
    private var connection: RawHTTPConnection!

    override func setUpWithError() throws {
        server = try LoopbackServer()
        connection = try RawHTTPConnection(port: server.port, readTimeout: .seconds(5))
    }

    override func tearDown() {
        connection.close()
        server.shutdown()
    }

    private func body(_ method: String, _ target: String) throws -> String {
        try connection.send("\(method) \(target) HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        let response = try connection.readResponse(forHEAD: method == "HEAD")
        return response.status == 200 ? response.bodyText : "\(response.status)"
    }

    func testPrecedence() throws {
        server.route(prefix: "/api") { _ in .text("prefix /api") }
        server.route(prefix: "/api/v1") { _ in .text("prefix /api/v1") }
        server.route("POST", prefix: "/api/v1") { _ in .text("POST prefix /api/v1") }
        server.route("/api/v1/users") { _ in .text("exact any") }
        server.route("GET", "/api/v1/users") { _ in .text("exact GET") }

        XCTAssertEqual(try body("GET", "/api/v1/users?page=2"), "exact GET")
        XCTAssertEqual(try body("DELETE", "/api/v1/users"), "exact any")
        XCTAssertEqual(try body("GET", "/api/v1/items"), "prefix /api/v1")
        XCTAssertEqual(try body("POST", "/api/v1/items"), "POST prefix /api/v1")
        XCTAssertEqual(try body("GET", "/api/v2"), "prefix /api")
        XCTAssertEqual(try body("GET", "/other"), "404")
    }

    func testLaterRegistrationReplaces() throws {
        server.route("GET", "/v") { _ in .text("first") }
        server.route("GET", "/v") { _ in .text("second") }
        XCTAssertEqual(try body("GET", "/v"), "second")
        server.removeAllRoutes()
        XCTAssertEqual(try body("GET", "/v"), "404")
    }

    func testAbsoluteFormTarget() throws {
        server.route("/abs") { request in .text(request.query ?? "none") }
        XCTAssertEqual(try body("GET", "http://example.com/abs?q=1"), "q=1")
        XCTAssertEqual(server.requests.first?.target, "http://example.com/abs?q=1")
    }

    /// An origin-form target whose query holds `://` (an unescaped `redirect_uri`) is not read
    /// as absolute-form.
    func testAQueryHoldingAURLIsNotAnAbsoluteFormTarget() throws {
        server.route("/authorize") { request in .text(request.query ?? "none") }
        XCTAssertEqual(
            try body("GET", "/authorize?redirect_uri=http://127.0.0.1:1/callback&state=s"),
            "redirect_uri=http://127.0.0.1:1/callback&state=s")
    }

    func testHTTPFields() {
        var fields: HTTPFields = ["Content-Type": "text/plain", "X-A": "1"]
        fields.append("x-a", "2")
        XCTAssertEqual(fields["content-type"], "text/plain")
        XCTAssertEqual(fields.values(for: "X-A"), ["1", "2"])
        XCTAssertEqual(fields.map(\.name), ["Content-Type", "X-A", "x-a"])
        fields["X-a"] = "3"
        XCTAssertEqual(fields.values(for: "x-a"), ["3"])
        XCTAssertEqual(fields.map(\.name), ["Content-Type", "X-A"])
        fields["content-type"] = nil
        XCTAssertFalse(fields.contains("Content-Type"))
        XCTAssertEqual(fields, ["x-a": "3"])
    }
}
