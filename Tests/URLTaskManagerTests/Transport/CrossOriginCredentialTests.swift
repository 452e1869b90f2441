import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskResilience
import XCTest

/// A credential stays on its origin when a redirect leaves it: two loopback servers (two ports of
/// 127.0.0.1 are two origins), a 302 from A to B, and what B received, through both doors (the
/// session and the manager's own `data(for:)`), for each place a header comes from: the
/// caller's request, the configuration's `httpAdditionalHeaders` and a `HeaderInterceptor`.
final class CrossOriginCredentialTests: XCTestCase {
    /// The origin the caller asks for: `/away/<door>` redirects to B, `/home/<door>` to A's own
    /// `/landing/<door>`.
    private var a: LoopbackServer!
    /// Another origin: the same host on another port.
    private var b: LoopbackServer!

    /// The two ways into a manager.
    private enum Door: String, CaseIterable {
        case session, methods
    }

    override func setUpWithError() throws {
        a = try LoopbackServer()
        b = try LoopbackServer()
        let other = b.url("/landing/").absoluteString
        a.route(prefix: "/away/") { request in .redirect(to: other + (request.path.split(separator: "/").last.map(String.init) ?? "")) }
        a.route(prefix: "/home/") { request in .redirect(to: "/landing/" + (request.path.split(separator: "/").last.map(String.init) ?? ""))
        }
        a.route(prefix: "/landing/") { _ in .text("landed on A") }
        a.route(prefix: "/direct/") { _ in .text("A") }
        b.route(prefix: "/") { _ in .text("landed on B") }
        let home = a.url("/returned/").absoluteString
        b.route(prefix: "/back/") { request in .redirect(to: home + (request.path.split(separator: "/").last.map(String.init) ?? "")) }
        a.route(prefix: "/round/") { request in
            .redirect(
                to: other.replacingOccurrences(of: "/landing/", with: "/back/")
                    + (request.path.split(separator: "/").last.map(String.init) ?? ""))
        }
        a.route(prefix: "/returned/") { _ in .text("back on A") }
        let failures = LockedList<String>()
        a.route(prefix: "/flaky/") { request in
            // The first request of each door fails with a 503 a retry answers.
            guard !failures.all.contains(request.path) else { return .text("A, the second time") }
            failures.append(request.path)
            return .status(503).with { $0.headers["Retry-After"] = "0" }
        }
    }

    override func tearDown() {
        a.shutdown()
        b.shutdown()
        a = nil
        b = nil
    }

    private static func configuration(additionalHeaders: [String: String] = [:]) -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.timeoutIntervalForRequest = 30
        if !additionalHeaders.isEmpty { configuration.httpAdditionalHeaders = additionalHeaders }
        return configuration
    }

    /// Sends `request` through `door` and returns the final status.
    private func send(_ request: URLRequest, through door: Door, on manager: URLTaskManager) async throws -> Int {
        let response: URLResponse
        switch door {
        case .session: (_, response) = try await manager.session.data(for: request)
        case .methods: (_, response) = try await manager.data(for: request)
        }
        return (response as? HTTPURLResponse)?.statusCode ?? -1
    }

    /// The only request `server` received at `path`, failing the test when there is not one.
    private func only(
        _ server: LoopbackServer, _ path: String, file: StaticString = #filePath, line: UInt = #line
    ) throws -> RecordedRequest {
        let seen = server.requests(path: path)
        XCTAssertEqual(seen.count, 1, "requests at \(path)", file: file, line: line)
        return try XCTUnwrap(seen.first, file: file, line: line)
    }

    /// Every header the library's `Redaction` calls a credential (the names of its
    /// `defaultHeaders`, and names secret by their last word or ending), whether the caller's
    /// request or the configuration's `httpAdditionalHeaders` set it, stays on A when a 302 sends
    /// the request to B; a header that is no credential (`Idempotency-Key` among them) follows,
    /// and a same-origin redirect keeps them all.
    func testACrossOriginRedirectDropsEveryHeaderRedactionCallsACredentialThroughBothDoors() async throws {
        let callers: KeyValuePairs<String, String> = [
            "Authorization": "Bearer caller-token", "Cookie": "session=caller", "X-API-Key": "caller-key",
            "Proxy-Authorization": "Basic cHJveHk6c2VjcmV0", "X-Auth-Token": "caller-auth-token", "Idempotency-Key": "order-7",
            "X-Extra": "extra",
        ]
        let configured = ["X-Config-Key": "config-key", "X-Config-Plain": "config-plain"]
        let manager = URLTaskManager(configuration: Self.configuration(additionalHeaders: configured))
        defer { manager.invalidateAndCancel() }
        let names = callers.map(\.key) + configured.keys.sorted()
        let secret = Set(names.filter { Redaction.standard.isSecret(headerName: $0) })
        XCTAssertEqual(
            secret, ["Authorization", "Cookie", "X-API-Key", "Proxy-Authorization", "X-Auth-Token", "X-Config-Key"],
            "the names Redaction calls credentials")
        let values = Dictionary(uniqueKeysWithValues: callers.map { ($0.key, $0.value) }).merging(configured) { $1 }

        for door in Door.allCases {
            for start in ["/away/", "/home/"] {
                var request = URLRequest(url: a.url(start + door.rawValue))
                for (name, value) in callers { request.setValue(value, forHTTPHeaderField: name) }
                let status = try await send(request, through: door, on: manager)
                XCTAssertEqual(status, 200, "\(door) \(start)")
            }
            let first = try only(a, "/away/\(door)")
            let landedOnB = try only(b, "/landing/\(door)")
            let landedOnA = try only(a, "/landing/\(door)")
            for name in names {
                XCTAssertEqual(first.headers[name], values[name], "\(door): A got \(name) on the first request")
                XCTAssertEqual(landedOnA.headers[name], values[name], "\(door): a same-origin redirect keeps \(name)")
                if secret.contains(name) {
                    XCTAssertNil(landedOnB.headers[name], "\(door): the credential \(name) reached the other origin")
                } else {
                    XCTAssertEqual(landedOnB.headers[name], values[name], "\(door): \(name) is no credential and follows")
                }
            }
        }
    }

    /// A `HeaderInterceptor` made as before (no origins named) adds its secret-named headers,
    /// fixed or computed, only on the origin of the caller's request: the redirected request to
    /// B gets its other headers, and none of its credentials; a same-origin redirect gets them all.
    func testAHeaderInterceptorAddsItsSecretsOnlyOnTheCallersOriginThroughBothDoors() async throws {
        let computed = LockedList<String>()
        let manager = URLTaskManager(
            interceptors: [
                HeaderInterceptor([
                    "Authorization": "Bearer interceptor-token", "X-App": "app-7",
                    "X-Session-Token": .computed { task in
                        computed.append(task.request.url?.absoluteString ?? "")
                        return "computed-token"
                    },
                ])
            ], configuration: Self.configuration())
        defer { manager.invalidateAndCancel() }

        for door in Door.allCases {
            for start in ["/away/", "/home/"] {
                let status = try await send(URLRequest(url: a.url(start + door.rawValue)), through: door, on: manager)
                XCTAssertEqual(status, 200, "\(door) \(start)")
            }
            let first = try only(a, "/away/\(door)")
            let landedOnB = try only(b, "/landing/\(door)")
            let landedOnA = try only(a, "/landing/\(door)")
            for request in [first, landedOnA] {
                XCTAssertEqual(request.headers["Authorization"], "Bearer interceptor-token", "\(door) \(request.path)")
                XCTAssertEqual(request.headers["X-Session-Token"], "computed-token", "\(door) \(request.path)")
                XCTAssertEqual(request.headers["X-App"], "app-7", "\(door) \(request.path)")
            }
            XCTAssertNil(landedOnB.headers["Authorization"], "\(door): the interceptor's token reached the other origin")
            XCTAssertNil(landedOnB.headers["X-Session-Token"], "\(door): the computed token reached the other origin")
            XCTAssertEqual(landedOnB.headers["X-App"], "app-7", "\(door): a header that is no credential is added on every origin")
        }
        let otherOrigin = b.url("/").absoluteString
        XCTAssertEqual(computed.all.count, 6, "computed for A's three requests per door: \(computed.all)")
        XCTAssertFalse(computed.all.contains { $0.hasPrefix(otherOrigin) }, "a secret is not even computed for the other origin")
    }

    /// ``HeaderInterceptor/Origins/only(_:)`` keeps every header of the interceptor on the
    /// origins it names: a redirect to another origin and a request sent there directly get none
    /// of them, while a redirect to a named origin gets them; and a secret reaches another
    /// origin only when its user asks for that by name
    /// (``HeaderInterceptor/Origins/everyOriginSecretsIncluded``).
    func testAHeaderInterceptorLimitedToOriginsAddsNothingElsewhereAndOnlyAnExplicitAskSendsASecretAcross() async throws {
        let manager = URLTaskManager(
            interceptors: [
                HeaderInterceptor(["Authorization": "Bearer for-a", "X-App": "app-a"], origins: .only([a.url("/some/path")])),
                HeaderInterceptor(["X-API-Key": "for-b"], origins: .only([b.url("/")])),
                HeaderInterceptor(["X-Tenant-Token": "for-everyone"], origins: .everyOriginSecretsIncluded),
            ], configuration: Self.configuration())
        defer { manager.invalidateAndCancel() }

        for door in Door.allCases {
            for url in [a.url("/away/\(door)"), b.url("/direct/\(door)")] {
                let status = try await send(URLRequest(url: url), through: door, on: manager)
                XCTAssertEqual(status, 200, "\(door) \(url)")
            }
            let first = try only(a, "/away/\(door)")
            let landedOnB = try only(b, "/landing/\(door)")
            let direct = try only(b, "/direct/\(door)")
            XCTAssertEqual(first.headers["Authorization"], "Bearer for-a", door.rawValue)
            XCTAssertEqual(first.headers["X-App"], "app-a", door.rawValue)
            XCTAssertNil(first.headers["X-API-Key"], "\(door): B's key on a request for A")
            for request in [landedOnB, direct] {
                XCTAssertNil(request.headers["Authorization"], "\(door) \(request.path): A's token on B")
                XCTAssertNil(request.headers["X-App"], "\(door) \(request.path): limited to A, no header of it goes to B")
                XCTAssertEqual(request.headers["X-API-Key"], "for-b", "\(door) \(request.path): B's key, named for B")
            }
            for request in [first, landedOnB, direct] {
                XCTAssertEqual(request.headers["X-Tenant-Token"], "for-everyone", "\(door) \(request.path): asked for every origin")
            }
        }
    }

    /// The default's "first origin" is the one the request had when the interceptor first saw
    /// it: an interceptor before it that sends the caller's placeholder URL to A does not cost
    /// the token on a retry there, a redirect from A to B still does, and a redirect from B back
    /// to A gets it again.
    func testAHeaderInterceptorKeepsItsSecretOnItsFirstOriginAcrossARetryAndARoundTrip() async throws {
        let manager = URLTaskManager(
            interceptors: [
                MovingInterceptor(to: a.url("/")),
                HeaderInterceptor(["Authorization": "Bearer interceptor-token"]),
            ], reactors: [RetryReactor(policy: .default)], configuration: Self.configuration())
        defer { manager.invalidateAndCancel() }

        for door in Door.allCases {
            for path in ["/flaky/", "/round/", "/away/"] {
                let placeholder = URL(string: "https://api.invalid\(path)\(door)")!
                let status = try await send(URLRequest(url: placeholder), through: door, on: manager)
                XCTAssertEqual(status, 200, "\(door) \(path)")
            }
            let flaky = a.requests(path: "/flaky/\(door)")
            XCTAssertEqual(flaky.count, 2, "\(door): a 503, then the retry")
            XCTAssertEqual(
                flaky.map { $0.headers["Authorization"] }, ["Bearer interceptor-token", "Bearer interceptor-token"], door.rawValue)
            XCTAssertEqual(try only(a, "/round/\(door)").headers["Authorization"], "Bearer interceptor-token", door.rawValue)
            XCTAssertNil(try only(b, "/back/\(door)").headers["Authorization"], "\(door): the token reached B on the way")
            XCTAssertEqual(try only(a, "/returned/\(door)").headers["Authorization"], "Bearer interceptor-token", "\(door): back on A")
            XCTAssertNil(try only(b, "/landing/\(door)").headers["Authorization"], "\(door): the token reached B")
        }
    }
}

/// Sends every request whose host is `api.invalid` to `base`'s origin, keeping its path: an
/// interceptor that moves a request before a `HeaderInterceptor` sees it.
private struct MovingInterceptor: URLTaskInterceptor {
    let base: URL

    init(to base: URL) {
        self.base = base
    }

    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        guard let url = task.request.url, url.host == "api.invalid", var parts = URLComponents(url: url, resolvingAgainstBaseURL: false)
        else { return .execute }
        parts.scheme = base.scheme
        parts.host = base.host
        parts.port = base.port
        task.request.url = parts.url
        return .execute
    }
}
