import Foundation
import LoopbackServer
import XCTest

@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Every surface the library produces or a debugger shows (description, debugDescription,
/// `dump`, `Mirror` children, cURL, events over HTTP, errors and their body prefixes) crossed
/// with every place a secret travels in (URL user, URL password, query, path parameter,
/// headers, a form body with and without a `Content-Type`, a JSON body with an escaped quote,
/// camelCase names): the secret never shows, and the text around it still does (a redaction
/// that blanked everything would pass a one-sided test).
final class RedactionSurfaceTests: XCTestCase {
    /// Which part of a request a surface shows.
    enum Part: CaseIterable, Sendable {
        case path, query, header, body
    }

    /// One place a secret travels in: the request carrying it, the secrets, and what must still
    /// be visible around them (by part, since not every surface shows every part).
    struct Placement: Sendable {
        let name: String
        let secrets: [String]
        let visible: [(text: String, part: Part)]
        let request: @Sendable (URL) -> URLRequest
    }

    /// `base` + a path and query, with `user` and `password` in the URL if given.
    private static func url(_ base: URL, _ pathAndQuery: String, user: String? = nil, password: String? = nil) -> URL {
        var parts = URLComponents(url: base, resolvingAgainstBaseURL: false)!
        parts.user = user
        parts.password = password
        let target = URL(string: parts.string! + pathAndQuery)!
        return target
    }

    private static func post(_ url: URL, _ body: String, contentType: String?) -> URLRequest {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBody = Data(body.utf8)
        if let contentType { request.setValue(contentType, forHTTPHeaderField: "Content-Type") }
        return request
    }

    static let placements: [Placement] = [
        Placement(
            name: "URL user (a token, as git hosts and Stripe use it)", secrets: ["S3CR3T-USER-01"],
            visible: [("/items", .path), ("page=2", .query)],
            request: { URLRequest(url: url($0, "/items?page=2", user: "S3CR3T-USER-01")) }),
        Placement(
            name: "URL user with an empty password", secrets: ["S3CR3T-USER-02"], visible: [("/items", .path), ("page=2", .query)],
            request: { URLRequest(url: url($0, "/items?page=2", user: "S3CR3T-USER-02", password: "")) }),
        Placement(
            name: "URL password", secrets: ["S3CR3T-PASS-03"], visible: [("/items", .path), ("page=2", .query)],
            request: { URLRequest(url: url($0, "/items?page=2", user: "visible-user", password: "S3CR3T-PASS-03")) }),
        Placement(
            name: "query", secrets: ["S3CR3T-QUERY-04", "S3CR3T-QUERY-05", "S3CR3T-QUERY-06"],
            visible: [("/items", .path), ("page=2", .query)],
            request: {
                URLRequest(url: url($0, "/items?access_token=S3CR3T-QUERY-04&page=2&api_key=S3CR3T-QUERY-05&session=S3CR3T-QUERY-06"))
            }),
        Placement(
            name: "query, camelCase and kebab-case names", secrets: ["S3CR3T-CAMEL-07", "S3CR3T-KEBAB-08"],
            visible: [("/items", .path), ("page=2", .query)],
            request: { URLRequest(url: url($0, "/items?accessToken=S3CR3T-CAMEL-07&page=2&api-key=S3CR3T-KEBAB-08")) }),
        Placement(
            name: "path parameter", secrets: ["S3CR3T-PATH-09"], visible: [("/items", .path), ("page=2", .query)],
            request: { URLRequest(url: url($0, "/items;jsessionid=S3CR3T-PATH-09?page=2")) }),
        Placement(
            name: "headers", secrets: ["S3CR3T-BEARER-10", "S3CR3T-APIKEY-11", "S3CR3T-COOKIE-12", "S3CR3T-AUTHTOKEN-13"],
            visible: [("/items", .path), ("visible-app", .header)],
            request: {
                var request = URLRequest(url: url($0, "/items"))
                request.setValue("Bearer S3CR3T-BEARER-10", forHTTPHeaderField: "Authorization")
                request.setValue("S3CR3T-APIKEY-11", forHTTPHeaderField: "X-API-Key")
                request.setValue("session=S3CR3T-COOKIE-12", forHTTPHeaderField: "Cookie")
                request.setValue("S3CR3T-AUTHTOKEN-13", forHTTPHeaderField: "X-Auth-Token")
                request.setValue("visible-app", forHTTPHeaderField: "X-App")
                return request
            }),
        Placement(
            name: "form body without a Content-Type", secrets: ["S3CR3T-FORM-14"],
            visible: [("/token", .path), ("grant_type=refresh_token", .body), ("client_id=visible-app", .body)],
            request: {
                post(url($0, "/token"), "grant_type=refresh_token&refresh_token=S3CR3T-FORM-14&client_id=visible-app", contentType: nil)
            }),
        Placement(
            name: "form body with its Content-Type", secrets: ["S3CR3T-FORM-15"],
            visible: [("/token", .path), ("username=visible-user", .body)],
            request: {
                post(
                    url($0, "/token"), "grant_type=password&username=visible-user&password=S3CR3T-FORM-15",
                    contentType: "application/x-www-form-urlencoded")
            }),
        Placement(
            name: "JSON body, a value with an escaped quote", secrets: ["S3CR3T-JSONHEAD-16", "S3CR3T-JSONTAIL-17"],
            visible: [("/token", .path), ("visible-name", .body)],
            request: {
                post(
                    url($0, "/token"), #"{"refresh_token":"S3CR3T-JSONHEAD-16\"S3CR3T-JSONTAIL-17","name":"visible-name"}"#,
                    contentType: "application/json")
            }),
        Placement(
            name: "JSON body, camelCase names", secrets: ["S3CR3T-CAMELJSON-18", "S3CR3T-APIKEYJSON-19"],
            visible: [("/token", .path), ("visible-name", .body)],
            request: {
                post(
                    url($0, "/token"), #"{"accessToken": "S3CR3T-CAMELJSON-18", "apiKey":"S3CR3T-APIKEYJSON-19", "name": "visible-name"}"#,
                    contentType: "application/json")
            }),
    ]

    /// What `dump(_:)` prints.
    static func dumped(_ value: Any) -> String {
        var text = ""
        dump(value, to: &text)
        return text
    }

    /// `Mirror(reflecting:)`'s children, one line each, as a debugger's variables view lists them.
    static func mirrored(_ value: Any) -> String {
        Mirror(reflecting: value).children.map { "\($0.label ?? "-"): \(String(describing: $0.value))" }.joined(separator: "\n")
    }

    /// Fails for each secret of `placement` in `text`, and for each visible text of a part
    /// `shown` that is missing.
    private func check(
        _ text: String, _ surface: String, shows shown: Set<Part>, _ placement: Placement, file: StaticString = #filePath,
        line: UInt = #line
    ) {
        for secret in placement.secrets {
            XCTAssertFalse(text.contains(secret), "\(surface) shows \(placement.name)'s \(secret):\n\(text)", file: file, line: line)
        }
        for (visible, part) in placement.visible where shown.contains(part) {
            XCTAssertTrue(text.contains(visible), "\(surface) lost \(placement.name)'s \(visible):\n\(text)", file: file, line: line)
        }
    }

    /// A task's description, debugDescription, dump and mirror; its cURL description.
    func testATaskAndItsCURLDescriptionNeverShowASecret() throws {
        let base = URL(string: "https://api.example.com")!
        for placement in Self.placements {
            let task = URLTask(request: placement.request(base))
            check("\(task)", "\"\\(task)\"", shows: [.path, .query], placement)
            check(String(reflecting: task), "String(reflecting: task)", shows: [.path, .query], placement)
            check(Self.dumped(task), "dump(task)", shows: [.path, .query, .header], placement)
            check(Self.mirrored(task), "Mirror(task).children", shows: [.path, .query, .header], placement)
            check(CURLDescription(task).command, "CURLDescription(task)", shows: Set(Part.allCases), placement)
            check(
                CURLDescription(placement.request(base)).command, "CURLDescription(request)", shows: Set(Part.allCases), placement)
            check(task.curlDescription(), "task.curlDescription()", shows: Set(Part.allCases), placement)
        }
    }

    /// Over HTTP: each placement's request through a manager with a `CURLDescriptionInterceptor`
    /// and response validation, to a server that answers 422 echoing what it received (the
    /// target, the credential headers, the body): the events (the manager's own and the `curl`
    /// annotations) and the caller's `URLTaskError` (its texts, dump, mirror and body prefix).
    func testEventsAndErrorsOverHTTPNeverShowASecret() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(prefix: "/") { request in
            let headers = ["Authorization", "X-API-Key", "Cookie", "X-Auth-Token", "X-App"].compactMap { name in
                request.headers[name].map { "\(name): \($0)" }
            }
            let echo = "\(request.method) \(request.target)\n" + headers.joined(separator: "\n") + "\n\n" + request.bodyText
            return .text(echo, status: 422)
        }
        let manager = URLTaskManager(
            interceptors: [CURLDescriptionInterceptor()], reactors: [],
            options: .init(responseValidation: .successfulStatusCodes))
        defer { manager.invalidateAndCancel() }
        let collector = URLTaskEventTests.Collector(manager.events())

        for (index, placement) in Self.placements.enumerated() {
            let result = await fetched(manager.session, placement.request(server.baseURL))
            try await collector.waitForCompletions(index + 1)
            let error = try XCTUnwrap(result.taskError, "\(placement.name): \(result.label)")
            XCTAssertEqual(error.code, .responseRejected, placement.name)

            let events = collector.all.filter { $0.task == collector.all.last?.task }
            check(events.map(\.description).joined(separator: "\n"), "events", shows: Set(Part.allCases), placement)
            check(Self.dumped(events), "dump(events)", shows: Set(Part.allCases), placement)
            let created = events.compactMap { event -> URL? in
                if case .created(_, let url) = event.kind { return url }
                return nil
            }
            check(created.map(\.absoluteString).joined(), "the created event's URL", shows: [.path], placement)

            let texts = ["\(error)", String(reflecting: error), error.localizedDescription, (error as NSError).description]
            for text in texts { check(text, "the error's text", shows: [.path], placement) }
            check(Self.dumped(error), "dump(error)", shows: Set(Part.allCases), placement)
            check(Self.mirrored(error), "Mirror(error).children", shows: Set(Part.allCases), placement)
            let prefix = String(decoding: try XCTUnwrap(error.bodyPrefix), as: UTF8.self)
            check(prefix, "the error's bodyPrefix", shows: Set(Part.allCases), placement)
        }
    }

    /// The OAuth2 kit's values: the credential, the token endpoint (client secret, and a URL
    /// with a password and a secret query), the authorization request (code verifier), an
    /// authenticator holding a credential and a header interceptor holding an API key.
    func testTheOAuth2ValuesAndAHeaderInterceptorNeverShowASecret() async throws {
        let credential = OAuth2Credential(
            accessToken: "S3CR3T-AT-20", refreshToken: "S3CR3T-RT-21", expiresAt: .distantFuture, scope: "visible-scope")
        let endpoint = OAuth2TokenEndpoint(
            url: URL(string: "https://visible-user:S3CR3T-PW-22@auth.example.com/token?client_secret=S3CR3T-CS-23&tenant=visible-tenant")!,
            clientID: "visible-client", clientSecret: "S3CR3T-CS-24")
        let authorization = OAuth2AuthorizationRequest(
            url: URL(string: "https://auth.example.com/authorize?state=visible-state")!, state: "visible-state",
            codeVerifier: "S3CR3T-CV-25", redirectURI: URL(string: "app://visible-callback")!)
        let authenticator = OAuth2Authenticator(
            origins: [URL(string: "https://api.example.com")!], tokenEndpoint: endpoint, store: InMemoryCredentialStore(credential))
        try await authenticator.signIn(credential)
        let headers = HeaderInterceptor(["X-API-Key": "S3CR3T-HK-26", "X-App": "visible-app"])

        let cases: [(name: String, value: Any, secrets: [String], visible: [String])] = [
            ("OAuth2Credential", credential, ["S3CR3T-AT-20", "S3CR3T-RT-21"], ["visible-scope"]),
            (
                "OAuth2TokenEndpoint", endpoint, ["S3CR3T-PW-22", "S3CR3T-CS-23", "S3CR3T-CS-24"],
                ["visible-client", "visible-tenant", "262144"]
            ),
            ("OAuth2AuthorizationRequest", authorization, ["S3CR3T-CV-25"], ["visible-state", "visible-callback"]),
            ("OAuth2Authenticator", authenticator, ["S3CR3T-AT-20", "S3CR3T-RT-21", "S3CR3T-CS-24"], ["visible-scope"]),
            ("HeaderInterceptor", headers, ["S3CR3T-HK-26"], ["visible-app"]),
        ]
        for (name, value, secrets, visible) in cases {
            let placement = Placement(name: name, secrets: secrets, visible: visible.map { ($0, .body) }, request: { URLRequest(url: $0) })
            check(Self.dumped(value), "dump(\(name))", shows: [.body], placement)
            check(Self.mirrored(value), "Mirror(\(name)).children", shows: name == "OAuth2Authenticator" ? [] : [.body], placement)
            check(String(describing: value), "String(describing: \(name))", shows: [], placement)
            check(String(reflecting: value), "String(reflecting: \(name))", shows: [], placement)
        }
    }

    /// Over HTTP: an `OAuth2Error` from a token endpoint that echoes the refresh token and the
    /// client secret in its `error_description` and in an unregistered error code.
    func testAnOAuth2ErrorNeverShowsWhatTheTokenEndpointEchoes() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("POST", "/token") { request in
            .json(["error": "odd \(request.bodyText)", "error_description": "refused \(request.bodyText)"], status: 400)
        }
        let endpoint = OAuth2TokenEndpoint(
            url: server.url("/token"), clientID: "visible-client", clientSecret: "S3CR3T-CS-27", clientAuthentication: .requestBody)
        let credential = OAuth2Credential(accessToken: "S3CR3T-AT-28", refreshToken: "S3CR3T-RT-29", expiresAt: .distantPast)
        do {
            _ = try await endpoint.refresh(credential)
            XCTFail("the refresh succeeded")
        } catch let error as OAuth2Error {
            XCTAssertTrue(error.serverDescription?.contains("S3CR3T-RT-29") ?? false, "the server's words stay available")
            let placement = Placement(
                name: "echo", secrets: ["S3CR3T-CS-27", "S3CR3T-RT-29"], visible: [("400", .body)], request: { URLRequest(url: $0) })
            for (surface, text) in [
                ("description", "\(error)"), ("debugDescription", String(reflecting: error)), ("dump", Self.dumped(error)),
                ("Mirror", Self.mirrored(error)), ("localizedDescription", error.localizedDescription),
            ] {
                check(text, "OAuth2Error's \(surface)", shows: [.body], placement)
            }
        }
    }

    /// Over HTTP (issue 37, finding 5): a rejected answer whose body holds a secret in each shape
    /// a server may echo one in (JSON escaped in a JSON string, `[name, value]` arrays, HTML
    /// hidden inputs either way round, XML elements): the error's body prefix and its dump show
    /// none, and the structure around it still shows.
    func testARejectedBodyPrefixShowsNoSecretInAnyShape() async throws {
        let bodies: [(body: String, visible: [String])] = [
            (#"{"payload":"{\"access_token\":\"S3CR3T-B1\",\"scope\":\"visible-scope\"}"}"#, ["payload", "visible-scope"]),
            (#"[["password","S3CR3T-B2"],["user","visible-user"]]"#, ["password", "visible-user"]),
            (#"{"headers":[["Authorization","Bearer S3CR3T-B3"],["X-App","visible-app"]]}"#, ["Bearer", "visible-app"]),
            (#"<input type="hidden" name="csrf_token" value="S3CR3T-B4"><p>visible-text</p>"#, ["csrf_token", "visible-text"]),
            (#"<input value="S3CR3T-B5" name="csrf_token" type="hidden">"#, ["csrf_token", "hidden"]),
            ("<r><password>S3CR3T-B6</password><AccessToken>S3CR3T-B7</AccessToken><n>visible-n</n></r>", ["<password>", "visible-n"]),
        ]
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(prefix: "/shape/") { request in
            let index = Int(request.target.split(separator: "/").last ?? "") ?? 0
            return .text(bodies[index].body, status: 422)
        }
        let manager = URLTaskManager(options: .init(responseValidation: .successfulStatusCodes))
        defer { manager.invalidateAndCancel() }
        for (index, shape) in bodies.enumerated() {
            let result = await fetched(manager.session, URLRequest(url: server.url("/shape/\(index)")))
            let error = try XCTUnwrap(result.taskError, "\(shape.body): \(result.label)")
            let prefix = String(decoding: try XCTUnwrap(error.bodyPrefix), as: UTF8.self)
            for (surface, text) in [("bodyPrefix", prefix), ("dump(error)", Self.dumped(error))] {
                XCTAssertFalse(text.contains("S3CR3T"), "\(surface) shows a secret of \(shape.body):\n\(text)")
                for visible in shape.visible {
                    XCTAssertTrue(text.contains(visible), "\(surface) lost \(visible) of \(shape.body):\n\(text)")
                }
            }
        }
    }
}
