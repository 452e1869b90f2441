import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

/// Redirects are followed by the manager's pipeline (the inner session never follows one): the
/// caller sees the same final response, URL, method and body as with a plain session, and its
/// delegate is asked about each redirect as a plain session's is.
final class RedirectParityTests: XCTestCase {
    private var harness: ParityHarness!
    private let codes = [301, 302, 303, 307, 308]
    private let body = Data("form=1&redirected=yes".utf8)

    override func setUpWithError() throws {
        harness = try ParityHarness()
        harness.route("/target") { ParityHarness.echo($1) }
        let port = harness.server.port
        for code in codes {
            harness.route("/redirect/\(code)/absolute") { side, _ in
                .redirect(to: "http://127.0.0.1:\(port)\(side.pathPrefix)/target", status: code)
            }
            harness.route("/redirect/\(code)/path") { side, _ in .redirect(to: "\(side.pathPrefix)/target", status: code) }
            harness.route("/redirect/\(code)/relative") { _, _ in .redirect(to: "../../target", status: code) }
        }
        for (name, location) in Self.foreignLocations(port: port) {
            harness.route("/foreign/\(name)") { _, _ in .redirect(to: location, status: 302) }
        }
        harness.route("/loop") { side, _ in .redirect(to: "\(side.pathPrefix)/loop", status: 302) }
        harness.route("/chain/1") { side, _ in .redirect(to: "\(side.pathPrefix)/chain/2", status: 301) }
        harness.route("/chain/2") { side, _ in .redirect(to: "http://127.0.0.1:\(port)\(side.pathPrefix)/chain/3", status: 302) }
        harness.route("/chain/3") { side, _ in .redirect(to: "\(side.pathPrefix)/target", status: 307) }
    }

    override func tearDown() {
        harness.shutdown()
        harness = nil
    }

    func testGETRedirectsWithAbsoluteAndRelativeLocations() async throws {
        let target = "http://127.0.0.1:\(harness.server.port)/{side}/target"
        for code in codes {
            for kind in ["absolute", "path", "relative"] {
                let result = try await harness.both { client in
                    await client.asyncData(URLRequest(url: client.url("/redirect/\(code)/\(kind)")))
                }
                XCTAssertParity(result, "GET \(code) \(kind) Location")
                if kind == "relative" {
                    #if canImport(FoundationNetworking)
                    // corelibs resolves a path-relative Location against the host root, not
                    // against the redirecting URL (plain and manager alike):
                    // "../../target" from /x/redirect/301/relative becomes /../../target.
                    XCTAssertEqual(result.plain.url, "http://127.0.0.1:\(harness.server.port)/../../target")
                    XCTAssertEqual(result.plain.status, 404)
                    #endif
                    continue
                }
                XCTAssertEqual(result.manager.status, 200)
                XCTAssertEqual(result.manager.header("X-Method"), "GET")
                XCTAssertEqual(result.manager.url, target)
            }
        }
    }

    func testPOSTRedirects() async throws {
        for code in codes {
            let result = try await harness.both { client in
                var request = URLRequest(url: client.url("/redirect/\(code)/absolute"))
                request.httpMethod = "POST"
                request.httpBody = body
                return try await client.completionData(request)
            }
            let method = result.plain.header("X-Method") ?? "?"
            let length = result.plain.header("X-Body-Length") ?? "?"
            XCTAssertEqual(result.manager.status, 200)
            XCTAssertEqual(result.manager.header("X-Method"), method, "POST \(code)")
            switch code {
            case 303:
                XCTAssertParity(result, "POST \(code) -> \(method), body \(length) B")
                XCTAssertEqual(method, "GET", "a 303 turns POST into GET")
                XCTAssertEqual(length, "0")
            case 307, 308:
                XCTAssertEqual(method, "POST", "\(code) keeps the method")
                // The manager resends the body, as RFC 9110 and Apple's URLSession do.
                XCTAssertEqual(result.manager.header("X-Body-Length"), String(body.count))
                XCTAssertEqual(result.manager.header("X-Received-Content-Type"), "application/x-www-form-urlencoded")
                #if canImport(FoundationNetworking)
                // corelibs resends the POST WITHOUT its body on 307/308; Apple platforms resend it.
                XCTAssertEqual(length, "0")
                ParityLog.record("POST \(code) body resent", plain: length, manager: result.manager.header("X-Body-Length") ?? "?")
                #else
                XCTAssertParity(result, "POST \(code) -> \(method), body \(length) B")
                #endif
            default:
                XCTAssertParity(result, "POST \(code) -> \(method), body \(length) B")
            }
        }
    }

    /// Redirects that leave HTTP: nothing listens for FTP on the server's port, so a session
    /// that followed one would fail late with a transport error, not as a plain session does.
    /// (corelibs resolves a `file:` or `data:` Location as a path on the redirecting server.)
    static func foreignLocations(port: Int) -> [(String, String)] {
        [
            ("ftp", "ftp://127.0.0.1:\(port)/file"), ("file", "file:///etc/hostname"), ("data", "data:text/plain,hello"),
            ("custom", "x-app://127.0.0.1/path"), ("gopher", "gopher://127.0.0.1:\(port)/1"), ("dict", "dict://127.0.0.1:\(port)/d:x"),
            ("telnet", "telnet://127.0.0.1:\(port)"), ("imap", "imap://127.0.0.1:\(port)/INBOX"),
        ]
    }

    /// A redirect may only lead to http or https: any other scheme fails as a plain session
    /// fails it, through every API and whatever the delegate answers, and is never fetched.
    func testARedirectToAnotherSchemeFailsAsAPlainSessionFailsIt() async throws {
        for (name, _) in Self.foreignLocations(port: harness.server.port) {
            let async = try await harness.both { await $0.asyncData(URLRequest(url: $0.url("/foreign/\(name)"))) }
            XCTAssertParity(async, "async: redirect to \(name)")
            let completion = try await harness.both { try await $0.completionData(URLRequest(url: $0.url("/foreign/\(name)"))) }
            XCTAssertParity(completion, "completion handler: redirect to \(name)")
            if name != "file" && name != "data" {
                XCTAssertNil(async.manager.status, "\(name): never fetched")
                XCTAssertEqual(async.manager.errorCode, name == "custom" ? NSURLErrorBadURL : NSURLErrorUnsupportedURL, name)
                XCTAssertNil(completion.manager.status, name)
            }
            let delegate = try await harness.both { client in
                let delegate = RecordingDelegate()
                let (outcome, record, _) = try await client.delegateTask(delegate) { $0.dataTask(with: client.url("/foreign/\(name)")) }
                return [outcome.description, "redirect callbacks: \(record.redirectCount)"]
            }
            XCTAssertParity(delegate, "delegate: redirect to \(name)")
        }
    }

    /// An `Authorization` from the configuration's `httpAdditionalHeaders` and a caller-set
    /// `Cookie` stay with their origin: a redirect to another port (another origin) carries
    /// neither, while a header that is no credential still follows, and a same-origin redirect
    /// keeps them all. A plain session sends both across (printed as the control).
    func testACrossOriginRedirectCarriesNoAuthorizationOrCookieWhateverSetThem() async throws {
        let other = try LoopbackServer()
        defer { other.shutdown() }
        other.route("/landing") { request in
            .text("landed").with { response in
                for name in ["Authorization", "Cookie", "X-Extra"] { response.headers["X-Got-" + name] = request.headers[name] ?? "none" }
            }
        }
        harness.route("/cross") { _, _ in .redirect(to: other.url("/landing").absoluteString) }
        harness.route("/same") { side, _ in .redirect(to: "\(side.pathPrefix)/landing") }
        harness.route("/landing") { _, request in
            .text("landed").with { response in
                for name in ["Authorization", "Cookie", "X-Extra"] { response.headers["X-Got-" + name] = request.headers[name] ?? "none" }
            }
        }
        let configuration = {
            let configuration = ParityHarness.defaultConfiguration()
            configuration.httpAdditionalHeaders = ["Authorization": "Bearer from-configuration", "X-Extra": "extra"]
            return configuration
        }
        let result = try await harness.both(configuration: configuration) { client in
            var results: [String] = []
            for path in ["/cross", "/same"] {
                var request = URLRequest(url: client.url(path))
                request.setValue("session=caller", forHTTPHeaderField: "Cookie")
                let outcome = await client.asyncData(request)
                results.append(
                    ["Authorization", "Cookie", "X-Extra"].map { outcome.header("X-Got-" + $0) ?? "?" }.joined(separator: " | "))
            }
            return results
        }
        printFigures("CROSS-ORIGIN| plain: \(result.plain) manager: \(result.manager)")
        XCTAssertEqual(result.manager[0], "none | none | extra", "cross-origin: no credential, the other header follows")
        XCTAssertEqual(result.manager[1], "Bearer from-configuration | session=caller | extra", "same origin: all kept")
        XCTAssertEqual(result.manager[1], result.plain[1], "same origin, as plain")
        let first = harness.server.requests(path: Side.manager.pathPrefix + "/cross").map { $0.headers["Authorization"] ?? "none" }
        XCTAssertEqual(first, ["Bearer from-configuration"], "the first request carries the configuration's header")
    }

    func testRedirectChain() async throws {
        let result = try await harness.both { client in
            try await client.completionData(URLRequest(url: client.url("/chain/1")))
        }
        XCTAssertParity(result, "301 -> 302 -> 307 chain")
        XCTAssertEqual(result.manager.status, 200)
        XCTAssertEqual(result.manager.url, "http://127.0.0.1:\(harness.server.port)/{side}/target")
    }

    func testRedirectLoopFailsTheSameWay() async throws {
        struct LoopResult: Equatable {
            let outcome: Outcome
            let requestsSeen: Int
        }
        let result = try await harness.both { client in
            let outcome = await client.asyncData(URLRequest(url: client.url("/loop")))
            return LoopResult(outcome: outcome, requestsSeen: harness.server.requestCount(path: client.path("/loop")))
        }
        XCTAssertParity(result, "redirect loop")
        XCTAssertEqual(result.manager.outcome.errorDomain, NSURLErrorDomain)
        XCTAssertEqual(result.manager.outcome.errorCode, NSURLErrorHTTPTooManyRedirects)
        XCTAssertGreaterThan(result.manager.requestsSeen, 1)
    }

    /// The caller's delegate is asked about each redirect, with the caller's task, as by a
    /// plain session.
    func testDelegateIsAskedAboutEachRedirect() async throws {
        let result = try await harness.both { client in
            let delegate = RecordingDelegate()
            let (outcome, record, _) = try await client.delegateTask(delegate) { $0.dataTask(with: client.url("/chain/1")) }
            return [outcome.description, "redirect callbacks: \(record.redirectCount)"]
        }
        XCTAssertParity(result, "delegate, 301 -> 302 -> 307 chain")
        XCTAssertEqual(result.manager[1], "redirect callbacks: 3")
    }

    /// A delegate that answers `nil` gets the redirect response itself, body included.
    func testADelegateThatRefusesGetsTheRedirectResponse() async throws {
        let result = try await harness.both { client in
            let delegate = RecordingDelegate(redirect: { _ in nil })
            let (outcome, record, _) = try await client.delegateTask(delegate) { $0.dataTask(with: client.url("/redirect/302/absolute")) }
            return [
                outcome.description, "redirect callbacks: \(record.redirectCount)",
                "target requests: \(harness.server.requestCount(path: client.path("/target")))",
            ]
        }
        XCTAssertParity(result, "delegate answers nil to a 302")
        XCTAssertTrue(result.manager[0].hasPrefix("302"), result.manager[0])
        XCTAssertEqual(result.manager[2], "target requests: 0")
    }

    /// The request a delegate answers with is what is sent, and it passes the interceptors
    /// again, like any resend.
    func testTheDelegatesRequestIsSentThroughTheInterceptors() async throws {
        let delegate = RecordingDelegate(redirect: { request in
            var changed = request
            changed.setValue("from-delegate", forHTTPHeaderField: "X-Redirected")
            return changed
        })
        let counter = AttemptStampingInterceptor()
        let manager = URLTaskManager(interceptors: [counter], configuration: ParityHarness.defaultConfiguration(), delegate: delegate)
        defer { manager.invalidateAndCancel() }
        let task = manager.session.dataTask(with: harness.server.url(Side.manager.pathPrefix + "/redirect/302/absolute"))
        task.resume()
        try await delegate.completion(of: task, timeout: .seconds(10))
        XCTAssertEqual(delegate.outcome(for: task, side: .manager).status, 200)
        let seen = harness.server.requests(path: Side.manager.pathPrefix + "/target")
        XCTAssertEqual(seen.map { $0.headers["X-Redirected"] ?? "none" }, ["from-delegate"])
        XCTAssertEqual(seen.map { $0.headers["X-Attempt"] ?? "none" }, ["2"], "the interceptors ran again, on attempt 2")
        XCTAssertEqual(counter.calls, 2)
    }
}

/// Counts its calls and stamps the attempt number on the request.
private final class AttemptStampingInterceptor: URLTaskInterceptor, @unchecked Sendable {  // `count` is guarded by `lock`.
    private let lock = NSLock()
    private var count = 0
    var calls: Int { lock.withLock { count } }

    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        lock.withLock { count += 1 }
        task.request.setValue(String(task.attempt), forHTTPHeaderField: "X-Attempt")
        return .execute
    }
}
