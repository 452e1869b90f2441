import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// What a token endpoint URL answers, and the durations the kit takes from a caller or a
/// server, over HTTP.
final class OAuth2InputTests: XCTestCase {
    private var server: LoopbackServer!

    override func setUpWithError() throws {
        server = try LoopbackServer()
        let html = Data("<!doctype html><title>Not here</title>".utf8)
        @Sendable func page(_ status: Int, _ type: String = "text/html; charset=utf-8") -> ServerResponse {
            ServerResponse(status: status, headers: ["Content-Type": type], body: .data(html))
        }
        server.route("/missing") { _ in page(404) }
        server.route("/get-only") { _ in .status(405) }
        server.route("/spa") { _ in page(200) }
        server.route("/refused") { _ in page(400) }
        server.route("/forbidden") { _ in page(403, "text/plain") }
        server.route("/array") { _ in .json(Data("[1,2]".utf8)) }
        server.route("/proxy") { _ in page(502) }
        server.route("/empty400") { _ in .status(400) }
        server.route("/unauthorized") { _ in page(401) }
        server.route("/api/me") { _ in .json(Data(#"{"error":"unauthorized"}"#.utf8), status: 401) }
        // A token answer cut short, with the start of a token in it.
        let truncated = Data(#"{"access_token": "S3CR3T-PARTIAL"#.utf8)
        @Sendable func body(_ data: Data, _ status: Int, _ type: String?) -> ServerResponse {
            ServerResponse(status: status, headers: type.map { ["Content-Type": $0] } ?? [:], body: .data(data))
        }
        server.route("/truncated-json") { _ in body(truncated, 200, "application/json; charset=utf-8") }
        server.route("/truncated-untyped") { _ in body(Data(" \r\n".utf8) + truncated, 200, nil) }
        server.route("/truncated-text") { _ in body(truncated, 200, "text/plain") }
        server.route("/fragment-plus-json") { _ in body(Data(#""S3CR3T-PARTIAL"#.utf8), 200, "application/vnd.example+json") }
        server.route("/empty-json") { _ in body(Data(), 200, "application/json") }
        server.route("/truncated400") { _ in body(truncated, 400, "application/json") }
        server.route("/truncated401") { _ in body(truncated, 401, "application/json") }
        server.route("/truncated503") { _ in body(truncated, 503, nil) }
    }

    override func tearDown() {
        server.shutdown()
    }

    /// A token URL that is wrong: 404, 405, or a page that is not JSON. A configuration error
    /// that names the URL (without its query, user, password or fragment) and says what to
    /// check; 0.2.0 called a 404 "an unregistered error code", temporary, without the URL.
    func testAWrongTokenURLIsAConfigurationErrorThatNamesIt() async throws {
        let cases: [(path: String, status: Int, mediaType: String?)] = [
            ("/missing", 404, "text/html"), ("/get-only", 405, nil), ("/spa", 200, "text/html"), ("/refused", 400, "text/html"),
            ("/forbidden", 403, "text/plain"),
        ]
        for (path, status, mediaType) in cases {
            var parts = URLComponents(url: server.url(path), resolvingAgainstBaseURL: false)!
            parts.user = "client"
            parts.password = "pass-secret"
            parts.query = "client_secret=query-secret"
            parts.fragment = "frag"
            let endpoint = OAuth2TokenEndpoint(url: parts.url!, clientID: "app", clientSecret: "s3cret")
            let shown = server.url(path)
            do {
                _ = try await endpoint.refresh(OAuth2Credential(accessToken: "a", refreshToken: "refresh-secret", expiresAt: .distantPast))
                XCTFail("\(path) gave a credential")
            } catch let error as OAuth2Error {
                XCTAssertEqual(error, .notATokenEndpoint(url: shown, status: status, mediaType: mediaType), path)
                XCTAssertTrue(error.isConfigurationError, path)
                XCTAssertFalse(error.requiresSignIn, path)
                let text = error.description
                XCTAssertTrue(text.contains(shown.absoluteString), text)
                XCTAssertTrue(text.contains("check the token endpoint URL"), text)
                for secret in ["secret", "s3cret", "frag", "client@"] { XCTAssertFalse(text.contains(secret), "\(secret) in \(text)") }
            }
        }
    }

    /// Issue 47: a body meant as JSON (a JSON `Content-Type`, or a first byte `{` or `[`) that is
    /// not a JSON object is the server's faulty answer, temporary: with a 2xx an
    /// ``OAuth2Error/invalidTokenResponse(reason:url:)``, with a 4xx or 5xx a
    /// ``OAuth2Error/tokenRequestRejected(status:error:description:url:)`` without a code. 0.3.0
    /// called the 2xx ones (and the 400) ``OAuth2Error/notATokenEndpoint(url:status:mediaType:)``,
    /// a configuration error. An HTML page stays that; no description shows the body.
    func testMalformedJSONIsTheServersFaultyAnswerAndAnHTMLPageAWrongURL() async throws {
        let notJSON = "the body is not valid JSON"
        let notAnObject = "the body is not a JSON object"
        let cases: [(path: String, expected: (URL) -> OAuth2Error, configuration: Bool)] = [
            ("/truncated-json", { .invalidTokenResponse(reason: notJSON, url: $0) }, false),
            ("/truncated-untyped", { .invalidTokenResponse(reason: notJSON, url: $0) }, false),
            ("/truncated-text", { .invalidTokenResponse(reason: notJSON, url: $0) }, false),
            ("/fragment-plus-json", { .invalidTokenResponse(reason: notJSON, url: $0) }, false),
            ("/empty-json", { .invalidTokenResponse(reason: notJSON, url: $0) }, false),
            ("/array", { .invalidTokenResponse(reason: notAnObject, url: $0) }, false),
            ("/truncated400", { .tokenRequestRejected(status: 400, error: nil, description: nil, url: $0) }, false),
            // A 401 is the client's authentication, as with any body (RFC 6749 §5.2).
            ("/truncated401", { .tokenRequestRejected(status: 401, error: nil, description: nil, url: $0) }, true),
            ("/truncated503", { .tokenRequestRejected(status: 503, error: nil, description: nil, url: $0) }, false),
            ("/spa", { .notATokenEndpoint(url: $0, status: 200, mediaType: "text/html") }, true),
        ]
        for (path, expected, configuration) in cases {
            let shown = server.url(path)
            let endpoint = OAuth2TokenEndpoint(url: shown, clientID: "app", clientSecret: "s3cret")
            do {
                _ = try await endpoint.refresh(OAuth2Credential(accessToken: "a", refreshToken: "refresh-secret", expiresAt: .distantPast))
                XCTFail("\(path) gave a credential")
            } catch let error as OAuth2Error {
                XCTAssertEqual(error, expected(shown), path)
                XCTAssertEqual(error.isConfigurationError, configuration, path)
                XCTAssertFalse(error.requiresSignIn, path)
                let text = error.description
                XCTAssertTrue(text.contains(shown.absoluteString), text)
                XCTAssertEqual(text.contains("check the token endpoint URL"), configuration, text)
                for secret in ["S3CR3T", "s3cret", "refresh-secret"] { XCTAssertFalse(text.contains(secret), "\(secret) in \(text)") }
            }
        }
        XCTAssertEqual(
            OAuth2Error.invalidTokenResponse(reason: notJSON, url: server.url("/truncated-json")).description,
            "The answer of the token endpoint at \(server.url("/truncated-json").absoluteString) is not a bearer token: \(notJSON)")
    }

    /// Through the kit, a token endpoint answering 200 with malformed JSON fails the request with
    /// the temporary ``OAuth2Error/invalidTokenResponse(reason:url:)``, backs off (a request
    /// within ``OAuth2Authenticator/refreshBackoff`` fails the same way without a token request),
    /// calls the hook once, and ends nothing: the store keeps the credential, and once the
    /// endpoint answers properly the first request after the back-off refreshes and is answered.
    /// Had the error required a sign-in, that request would fail until one.
    func testMalformedJSONFromTheTokenEndpointBacksOffAndDoesNotEndTheSession() async throws {
        let api = try OAuthServer(access: nil)
        defer { api.shutdown() }
        let broken = LockedBox(true)
        api.server.route("POST", "/oauth/truncated") { _ in .json(Data(#"{"access_token": "ab"#.utf8)) }
        let truncatedURL = api.server.url("/oauth/truncated")
        let tokenURL = api.tokenURL
        let hooks = LockedBox<[OAuth2Error?]>([])
        let firstHook = Latch<Void>("onRefreshFailure")
        let backoff = Duration.milliseconds(600)
        let store = InMemoryCredentialStore(api.credential(access: "stale"))
        let auth = OAuth2Authenticator(
            origins: [api.baseURL], store: store, refreshBackoff: backoff,
            onRefreshFailure: { error in
                hooks.withLock { $0.append(error as? OAuth2Error) }
                firstHook.fulfill(())
            },
            refresh: { credential in
                try await OAuth2TokenEndpoint(url: broken.snapshot ? truncatedURL : tokenURL, clientID: "tests").refresh(credential)
            })
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        defer { manager.invalidateAndCancel() }

        let started = ContinuousClock.now
        let first = await fetched(manager.session, URLRequest(url: api.apiURL()))
        // The back-off started when the refresh failed, before the first request ended.
        let firstEnded = ContinuousClock.now
        let second = await fetched(manager.session, URLRequest(url: api.apiURL()))
        let withinBackoff = started.duration(to: .now) < backoff
        let expected = OAuth2Error.invalidTokenResponse(reason: "the body is not valid JSON", url: truncatedURL)
        for result in [first, second] {
            XCTAssertEqual(result.taskError?.code, .authenticationFailed, result.label)
            XCTAssertEqual(result.taskError?.component?.name, "OAuth2RefreshReactor", result.label)
            XCTAssertEqual(result.taskError?.underlying as? OAuth2Error, expected, result.label)
        }
        if withinBackoff {
            XCTAssertEqual(api.server.requestCount(path: "/oauth/truncated"), 1, "the second request came within the back-off")
        }
        try await firstHook.wait(timeout: .seconds(10))
        XCTAssertEqual(hooks.snapshot, [expected], "one hook call, with the temporary error")
        XCTAssertEqual(hooks.snapshot.first??.requiresSignIn, false)
        XCTAssertEqual(hooks.snapshot.first??.isConfigurationError, false)
        let kept = try await store.load()
        XCTAssertEqual(kept?.accessToken, "stale", "a faulty answer does not end the session")

        // The back-off is the subject: wait until it has passed; the endpoint answers properly now.
        broken.withLock { $0 = false }
        try await Task.sleep(until: firstEnded + backoff, clock: .continuous)
        let after = await fetched(manager.session, URLRequest(url: api.apiURL()))
        XCTAssertEqual(after.status, 200, after.label)
        XCTAssertEqual(api.tokenRequestCount, 1, "one refresh after the back-off, no sign-in")
        XCTAssertEqual(hooks.snapshot.count, 1)
    }

    /// Issue 42: a token URL that points at the API host, which answers 401 with JSON, is
    /// reported with the URL it went to (scheme, host, port and path; never the query, user or
    /// password), not only as a client-credentials problem. So are a proxy's 5xx page and a
    /// registered error code.
    func testATokenEndpointsErrorNamesItsURLWithoutTheQueryUserOrPassword() async throws {
        for (path, status) in [("/api/me", 401), ("/proxy", 502), ("/empty400", 400)] {
            var parts = URLComponents(url: server.url(path), resolvingAgainstBaseURL: false)!
            parts.user = "S3CR3T-USER-42"
            parts.password = "S3CR3T-PW-42"
            parts.query = "client_secret=S3CR3T-QUERY-42"
            let endpoint = OAuth2TokenEndpoint(url: parts.url!, clientID: "app", clientSecret: "S3CR3T-CS-42")
            do {
                _ = try await endpoint.refresh(OAuth2Credential(accessToken: "a", refreshToken: "S3CR3T-RT-42", expiresAt: .distantPast))
                XCTFail("\(path) gave a credential")
            } catch let error as OAuth2Error {
                let shown = server.url(path)
                guard case .tokenRequestRejected(status, _, _, shown) = error else { return XCTFail("\(path): \(error)") }
                XCTAssertEqual(error.url, shown, path)
                for text in [error.description, error.localizedDescription, String(reflecting: error), "\(error as NSError)"] {
                    XCTAssertTrue(text.contains(shown.absoluteString), "\(path): \(text)")
                    XCTAssertFalse(text.contains("S3CR3T"), "\(path): \(text)")
                    XCTAssertFalse(text.contains("?"), "\(path): \(text)")
                }
            }
        }
        let wrong = OAuth2TokenEndpoint(url: server.url("/api/me"), clientID: "app")
        do {
            _ = try await wrong.refresh(OAuth2Credential(accessToken: "a", refreshToken: "r", expiresAt: .distantPast))
            XCTFail("/api/me gave a credential")
        } catch let error as OAuth2Error {
            XCTAssertTrue(error.isConfigurationError)
            XCTAssertEqual(
                error.description,
                "The token endpoint at \(server.url("/api/me").absoluteString) answered 401 with an unregistered error code"
                    + " (a client configuration problem: check the token endpoint URL, the client ID, secret, authentication method,"
                    + " grant and scope)")
        }
    }

    /// Answers a token endpoint itself gives keep their meaning: a proxy's 502 page is
    /// temporary, an empty 400 too, a 401 is the client's authentication.
    func testATokenEndpointsOwnFailuresKeepTheirMeaning() async throws {
        for (path, status, configuration) in [("/proxy", 502, false), ("/empty400", 400, false), ("/unauthorized", 401, true)] {
            let endpoint = OAuth2TokenEndpoint(url: server.url(path), clientID: "app")
            do {
                _ = try await endpoint.refresh(OAuth2Credential(accessToken: "a", refreshToken: "r", expiresAt: .distantPast))
                XCTFail("\(path) gave a credential")
            } catch let error as OAuth2Error {
                guard case .tokenRequestRejected(status, nil, nil, server.url(path)) = error else { return XCTFail("\(path): \(error)") }
                XCTAssertEqual(error.isConfigurationError, configuration, path)
            }
        }
    }

    /// Through the kit: a request whose token needs renewing fails with the configuration error
    /// as the `URLTaskError`'s underlying error, and the session is not ended.
    func testTheKitReportsAWrongTokenURLAsAConfigurationError() async throws {
        let api = try OAuthServer()
        defer { api.shutdown() }
        let wrong = OAuth2TokenEndpoint(url: api.server.url("/oauth/tokn"), clientID: "tests")
        api.server.route("POST", "/oauth/tokn") { _ in
            ServerResponse(status: 404, headers: ["Content-Type": "text/html"], body: .data(Data("<h1>404</h1>".utf8)))
        }
        let store = InMemoryCredentialStore(api.credential(access: "stale", expiresIn: -10))
        let auth = OAuth2Authenticator(origins: [api.baseURL], tokenEndpoint: wrong, store: store)
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        defer { manager.invalidateAndCancel() }
        let result = await fetched(manager.session, URLRequest(url: api.apiURL("/me")))
        let underlying = result.taskError?.underlying as? OAuth2Error
        XCTAssertEqual(
            underlying, .notATokenEndpoint(url: api.server.url("/oauth/tokn"), status: 404, mediaType: "text/html"), result.label)
        XCTAssertEqual(underlying?.isConfigurationError, true)
        let kept = try await store.load()
        XCTAssertNotNil(kept, "a configuration error does not end the session")
    }

    /// `expires_in` at its extremes in a real token answer: clamped to ten years or refused with
    /// a typed error, never a trap.
    func testExpiresInExtremesOverHTTP() async throws {
        let values = [
            "1e300", "-1e300", "0", "-1", "9223372036854775807", "9223372036854775808", "1e-300", "\"NaN\"", "\"inf\"",
            "\"1e400\"", "null", "true",
        ]
        for (index, value) in values.enumerated() {
            server.route("POST", "/token\(index)") { _ in
                .json(Data(#"{"access_token":"a","token_type":"Bearer","expires_in":\#(value)}"#.utf8))
            }
            let endpoint = OAuth2TokenEndpoint(url: server.url("/token\(index)"))
            do {
                let credential = try await endpoint.refresh(
                    OAuth2Credential(accessToken: "old", refreshToken: "r", expiresAt: .distantPast))
                if value == "null" {
                    XCTAssertEqual(credential.expiresAt, .distantFuture, "left out: renewed when a 401 says so")
                } else {
                    XCTAssertLessThanOrEqual(credential.expiresAt, Date().addingTimeInterval(10 * 365 * 24 * 3600 + 60), value)
                }
            } catch let error as OAuth2Error {
                guard case .invalidTokenResponse = error else { return XCTFail("\(value): \(error)") }
            }
        }
    }

    /// The kit's own durations at their extremes: a token request timeout corelibs would trap on
    /// (0.2.0 handed it 9.2e18 s), a leeway and a back-off beyond any clock, both ways.
    func testTheKitsDurationsAtTheirExtremes() async throws {
        for duration in [Duration.seconds(Int64.max), .seconds(Int64.min), .seconds(1e16), .zero] {
            // A server each: a refresh whose waiters timed out at once still completes in the
            // background (`lateAnswerLimit`) and rotates the refresh token of its server.
            let api = try OAuthServer()
            defer { api.shutdown() }
            let endpoint = OAuth2TokenEndpoint(url: api.tokenURL, clientID: "tests", timeout: duration)
            let auth = OAuth2Authenticator(
                origins: [api.baseURL], tokenEndpoint: endpoint,
                store: InMemoryCredentialStore(api.credential(access: "stale", expiresIn: 30)),
                refreshLeeway: duration, refreshBackoff: duration)
            let manager = URLTaskManager(
                interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
            defer { manager.invalidateAndCancel() }
            let result = await fetched(manager.session, URLRequest(url: api.apiURL("/me")))
            // A zero or negative timeout ends the token request at once: `URLError.timedOut`.
            let timedOut = duration <= .zero && result.urlErrorCode == .timedOut
            XCTAssertTrue(result.status == 200 || timedOut, "\(duration): \(result.label)")
        }
    }
}
