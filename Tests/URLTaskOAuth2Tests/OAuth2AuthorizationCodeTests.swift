import Foundation
import LoopbackServer
import XCTest

@testable import URLTaskManager
import URLTaskCrypto
@testable import URLTaskOAuth2
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The authorization code grant with PKCE (RFC 6749 §4.1, RFC 7636) against OAuthServer over
/// loopback HTTP: the authorization URL, the callback's checks, the exchange, and the server's
/// refusals of a wrong verifier and a reused code.
final class OAuth2AuthorizationCodeTests: XCTestCase {
    private var oauth: OAuthServer!
    private var flow: OAuth2AuthorizationCodeFlow!

    override func setUpWithError() throws {
        oauth = try OAuthServer()
        oauth.server.route("GET", "/callback") { _ in .text("signed in, you can close this window") }
        flow = OAuth2AuthorizationCodeFlow(
            authorizationEndpoint: oauth.authorizeURL, tokenEndpoint: oauth.endpoint, redirectURI: oauth.server.url("/callback"),
            scope: "profile email")
    }

    override func tearDown() {
        oauth.shutdown()
    }

    /// What a browser does: opens the authorization URL and follows the redirect to the
    /// callback, whose URL the app is then handed.
    private func browse(_ url: URL) async throws -> URL {
        let session = URLSession(configuration: .ephemeral)
        defer { session.finishTasksAndInvalidate() }
        let (_, response) = try await session.data(from: url)
        return try XCTUnwrap(response.url)
    }

    func testTheChallengeIsS256OfTheVerifierAsInRFC7636AppendixB() {
        XCTAssertEqual(
            RandomBytes.hex(SHA256Digest.hash(Array("abc".utf8))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(
            RandomBytes.hex(SHA256Digest.hash(Array(repeating: UInt8(ascii: "a"), count: 1_000))),
            "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3")
        XCTAssertEqual(
            OAuth2AuthorizationRequest.challenge(for: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
    }

    func testTheAuthorizationURLCarriesEveryParameterAndEachAttemptIsFresh() throws {
        let attempt = flow.start(additionalParameters: ["login_hint": "ada", "state": "not-this-one"])
        let query = OAuth2AuthorizationCodeFlow.queryFields(of: attempt.url)
        XCTAssertEqual(
            query,
            [
                "response_type": "code", "client_id": "tests", "redirect_uri": oauth.server.url("/callback").absoluteString,
                "scope": "profile email", "state": attempt.state, "code_challenge": attempt.codeChallenge, "code_challenge_method": "S256",
                "login_hint": "ada",
            ])
        XCTAssertTrue(attempt.url.absoluteString.hasPrefix(oauth.authorizeURL.absoluteString + "?"))
        XCTAssertEqual(attempt.codeVerifier.count, 43)
        let unreserved = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
        XCTAssertTrue(attempt.codeVerifier.unicodeScalars.allSatisfy(unreserved.contains))
        XCTAssertFalse(attempt.url.absoluteString.contains(attempt.codeVerifier), "the verifier never leaves before the exchange")
        XCTAssertFalse("\(attempt)".contains(attempt.codeVerifier))
        let another = flow.start()
        XCTAssertNotEqual(another.state, attempt.state)
        XCTAssertNotEqual(another.codeVerifier, attempt.codeVerifier)
    }

    func testSigningInEndToEndStoresTheCredentialAndTheAPIAcceptsIt() async throws {
        // DocC authorization-code: begin
        let store = InMemoryCredentialStore()
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: oauth.endpoint, store: store)
        let flow = OAuth2AuthorizationCodeFlow(
            authorizationEndpoint: oauth.authorizeURL,
            tokenEndpoint: OAuth2TokenEndpoint(url: oauth.tokenURL, clientID: "tests"),  // a public client: no secret
            redirectURI: oauth.server.url("/callback"),  // a loopback redirect (RFC 8252); or com.example.app:/callback
            scope: "profile email")
        let attempt = flow.start()  // a fresh state and code verifier
        let callback = try await browse(attempt.url)  // the browser signs in and lands on the redirect URI
        try await flow.signIn(auth, callback: callback, for: attempt)  // state checked, code exchanged, credential stored
        // DocC authorization-code: end

        let stored = try await store.load()
        XCTAssertEqual(stored?.accessToken, "a-access-1")
        XCTAssertEqual(stored?.refreshToken, "a-refresh-1")
        let form = OAuthServer.decodeForm(try XCTUnwrap(oauth.tokenRequests.first?.bodyText))
        XCTAssertEqual(
            form,
            [
                "grant_type": "authorization_code", "code": "a-code-1", "redirect_uri": oauth.server.url("/callback").absoluteString,
                "code_verifier": attempt.codeVerifier, "client_id": "tests",
            ])
        let session = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)]
        )
        .session
        defer { session.invalidateAndCancel() }
        let (_, response) = try await session.data(from: oauth.apiURL("/me"))
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
    }

    func testAWrongVerifierIsRefusedAndNothingIsStored() async throws {
        let store = InMemoryCredentialStore()
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: oauth.endpoint, store: store)
        let attempt = flow.start()
        let callback = try await browse(attempt.url)
        // Someone who intercepted the redirect has the code and the state, not the verifier.
        let attacker = OAuth2AuthorizationRequest(
            url: attempt.url, state: attempt.state, codeVerifier: flow.start().codeVerifier, redirectURI: attempt.redirectURI)

        do {
            try await flow.signIn(auth, callback: callback, for: attacker)
            XCTFail("a wrong verifier was accepted")
        } catch let error as OAuth2Error {
            XCTAssertEqual(error, .tokenRequestRejected(status: 400, error: "invalid_grant", description: nil, url: oauth.endpoint.url))
        }
        XCTAssertEqual(oauth.authorizationCodeRefusals, ["code_verifier mismatch"])
        let stored = try await store.load()
        XCTAssertNil(stored)
        // The code was used up by that attempt: the right verifier is now too late.
        do {
            _ = try await flow.credential(fromCallback: callback, for: attempt)
            XCTFail("a used code was accepted")
        } catch let error as OAuth2Error {
            XCTAssertTrue(error.requiresSignIn)
        }
    }

    /// The server refuses a code presented twice: here by an attempt rebuilt from its values (as
    /// after a relaunch), which the flow cannot tell from a new one.
    func testAReusedCodeIsRefused() async throws {
        let attempt = flow.start()
        let callback = try await browse(attempt.url)
        let first = try await flow.credential(fromCallback: callback, for: attempt)
        XCTAssertEqual(first.accessToken, "a-access-1")

        let rebuilt = OAuth2AuthorizationRequest(
            url: attempt.url, state: attempt.state, codeVerifier: attempt.codeVerifier, redirectURI: attempt.redirectURI)
        XCTAssertEqual(rebuilt, attempt, "equal by value")
        do {
            _ = try await flow.credential(fromCallback: callback, for: rebuilt)
            XCTFail("a code was accepted twice")
        } catch let error as OAuth2Error {
            XCTAssertEqual(error.serverErrorCode, "invalid_grant")
        }
        XCTAssertEqual(oauth.authorizationCodeRefusals, ["code reused"])
        XCTAssertEqual(oauth.currentAccess, "a-access-1", "no token was issued for the reuse")
    }

    /// A second callback for one attempt, or a replayed one (a copy of the attempt included),
    /// whether the first exchange succeeded or failed, or runs at the same time: a typed error
    /// and no second token request (0.2.0 sent it, and a server then should revoke what it
    /// issued for the code, RFC 6749 §4.1.2).
    func testAnAttemptIsExchangedOnce() async throws {
        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: oauth.endpoint)
        let attempt = flow.start()
        let callback = try await browse(attempt.url)
        try await flow.signIn(auth, callback: callback, for: attempt)
        XCTAssertEqual(oauth.tokenRequestCount, 1)
        let copy = attempt
        for request in [attempt, copy] {
            do {
                try await flow.signIn(auth, callback: callback, for: request)
                XCTFail("an attempt was exchanged twice")
            } catch let error as OAuth2AuthorizationError {
                XCTAssertEqual(error, .attemptAlreadyExchanged)
                XCTAssertFalse(error.description.contains("a-code-1"))
            }
            do {
                _ = try await flow.exchange(code: "a-code-1", for: request)
                XCTFail("an attempt was exchanged twice")
            } catch let error as OAuth2AuthorizationError {
                XCTAssertEqual(error, .attemptAlreadyExchanged)
            }
        }
        XCTAssertEqual(oauth.tokenRequestCount, 1, "no second token request")
        XCTAssertEqual(oauth.authorizationCodeRefusals, [])
        XCTAssertEqual(oauth.currentAccess, "a-access-1", "the sign-in that succeeded stands")

        // A failed exchange used the attempt up too: the code may have reached the server.
        let failing = flow.start()
        let failingCallback = try await browse(failing.url)
        oauth.setTokenAnswer(.reject(status: 503, error: "temporarily_unavailable"))
        do {
            _ = try await flow.credential(fromCallback: failingCallback, for: failing)
            XCTFail("a 503 gave a credential")
        } catch let error as OAuth2Error {
            XCTAssertEqual(error.serverErrorCode, "temporarily_unavailable")
        }
        oauth.setTokenAnswer(.issue)
        do {
            _ = try await flow.credential(fromCallback: failingCallback, for: failing)
            XCTFail("a failed attempt was exchanged again")
        } catch let error as OAuth2AuthorizationError {
            XCTAssertEqual(error, .attemptAlreadyExchanged)
        }
        XCTAssertEqual(oauth.tokenRequestCount, 2)

        // Two callbacks at once: one token request.
        let raced = flow.start()
        let racedCallback = try await browse(raced.url)
        let flow = self.flow!
        let outcomes = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<8 { group.addTask { (try? await flow.credential(fromCallback: racedCallback, for: raced)) != nil } }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        XCTAssertEqual(outcomes.filter { $0 }.count, 1)
        XCTAssertEqual(oauth.tokenRequestCount, 3)
        XCTAssertEqual(oauth.authorizationCodeRefusals, [], "the server never saw a code twice")
    }

    /// RFC 9207: a callback whose `iss` is not the flow's issuer, or lacks one the server always
    /// sends, is refused before anything is exchanged, an error answer included.
    func testTheIssuerIsCheckedWhenPresentOrRequired() async throws {
        var checked = flow!
        checked.issuer = oauth.baseURL.absoluteString
        func with(_ callback: URL, iss: String?) -> URL {
            var parts = URLComponents(url: callback, resolvingAgainstBaseURL: false)!
            parts.queryItems = (parts.queryItems ?? []) + (iss.map { [URLQueryItem(name: "iss", value: $0)] } ?? [])
            return parts.url!
        }
        let attempt = checked.start()
        let callback = try await browse(attempt.url)
        let issuer = oauth.baseURL.absoluteString
        for wrong in ["https://evil.example", issuer + "/", issuer.uppercased(), ""] {
            do {
                _ = try await checked.credential(fromCallback: with(callback, iss: wrong), for: attempt)
                XCTFail("iss \(wrong) accepted")
            } catch let error as OAuth2AuthorizationError {
                XCTAssertEqual(error, .issuerMismatch(expected: issuer, received: wrong))
                XCTAssertFalse(error.description.contains("evil"), "the callback's text stays out of the description")
            }
        }
        var refused = URLComponents(url: with(callback, iss: "https://evil.example"), resolvingAgainstBaseURL: false)!
        refused.queryItems = (refused.queryItems ?? []).filter { $0.name != "code" } + [URLQueryItem(name: "error", value: "access_denied")]
        XCTAssertThrowsError(try checked.authorizationCode(from: refused.url!, for: attempt)) { error in
            XCTAssertEqual(error as? OAuth2AuthorizationError, .issuerMismatch(expected: issuer, received: "https://evil.example"))
        }
        var strict = checked
        strict.requiresIssuer = true
        XCTAssertThrowsError(try strict.authorizationCode(from: callback, for: attempt)) { error in
            XCTAssertEqual(error as? OAuth2AuthorizationError, .issuerMismatch(expected: issuer, received: nil))
        }
        XCTAssertEqual(oauth.tokenRequestCount, 0, "nothing exchanged")
        // Without `iss`, accepted unless required; with the right one, accepted.
        XCTAssertEqual(try checked.authorizationCode(from: callback, for: attempt), "a-code-1")
        let credential = try await strict.credential(fromCallback: with(callback, iss: issuer), for: attempt)
        XCTAssertEqual(credential.accessToken, "a-access-1")
        XCTAssertEqual(oauth.tokenRequestCount, 1)
        // No issuer configured: `iss` is not checked.
        let unchecked = flow.start()
        let uncheckedCallback = try await browse(unchecked.url)
        XCTAssertNotNil(try flow.authorizationCode(from: with(uncheckedCallback, iss: "https://evil.example"), for: unchecked))
    }

    func testACallbackForAnotherAttemptOrAnotherRedirectIsRefusedWithoutATokenRequest() async throws {
        let attempt = flow.start()
        let other = flow.start()
        let callback = try await browse(other.url)

        XCTAssertThrowsError(try flow.authorizationCode(from: callback, for: attempt)) { error in
            XCTAssertEqual(error as? OAuth2AuthorizationError, .stateMismatch)
        }
        var noState = URLComponents(url: callback, resolvingAgainstBaseURL: false)!
        noState.queryItems = noState.queryItems?.filter { $0.name != "state" }
        XCTAssertThrowsError(try flow.authorizationCode(from: noState.url!, for: other)) { error in
            XCTAssertEqual(error as? OAuth2AuthorizationError, .stateMismatch)
        }
        var elsewhere = URLComponents(url: callback, resolvingAgainstBaseURL: false)!
        elsewhere.path = "/elsewhere"
        XCTAssertThrowsError(try flow.authorizationCode(from: elsewhere.url!, for: other)) { error in
            XCTAssertEqual(error as? OAuth2AuthorizationError, .redirectMismatch)
        }
        do {
            try await flow.signIn(
                OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: oauth.endpoint), callback: callback, for: attempt)
            XCTFail("signed in with another attempt's callback")
        } catch let error as OAuth2AuthorizationError {
            XCTAssertEqual(error, .stateMismatch)
        }
        XCTAssertEqual(oauth.tokenRequestCount, 0)
        XCTAssertEqual(try flow.authorizationCode(from: callback, for: other), "a-code-1", "the right attempt still works")
    }

    func testARefusalBecomesATypedErrorWithoutTheServersWords() async throws {
        oauth.setAuthorizationAnswer(.refuse(error: "access_denied"))
        let attempt = flow.start()
        var callback = try await browse(attempt.url)
        XCTAssertThrowsError(try flow.authorizationCode(from: callback, for: attempt)) { error in
            XCTAssertEqual(error as? OAuth2AuthorizationError, .authorizationFailed(error: "access_denied", description: nil))
            XCTAssertTrue((error as? OAuth2AuthorizationError)?.userDeclined == true)
        }

        // A server's free text (which may echo anything) stays out of the description.
        var parts = URLComponents(url: callback, resolvingAgainstBaseURL: false)!
        parts.queryItems = [
            URLQueryItem(name: "error", value: "custom_error_secret-42"), URLQueryItem(name: "error_description", value: "echo secret-42"),
            URLQueryItem(name: "state", value: attempt.state),
        ]
        callback = parts.url!
        XCTAssertThrowsError(try flow.authorizationCode(from: callback, for: attempt)) { error in
            let typed = error as? OAuth2AuthorizationError
            XCTAssertEqual(typed, .authorizationFailed(error: "custom_error_secret-42", description: "echo secret-42"))
            XCTAssertFalse("\(error)".contains("secret-42"))
            XCTAssertFalse(error.localizedDescription.contains("secret-42"))
        }
    }

    func testTheAuthorizeEndpointRefusesARequestWithoutPKCE() async throws {
        var parts = URLComponents(url: oauth.authorizeURL, resolvingAgainstBaseURL: false)!
        parts.queryItems = [
            URLQueryItem(name: "response_type", value: "code"), URLQueryItem(name: "client_id", value: "tests"),
            URLQueryItem(name: "redirect_uri", value: oauth.server.url("/callback").absoluteString),
            URLQueryItem(name: "state", value: "s"),
        ]
        let callback = try await browse(parts.url!)
        let fields = OAuth2AuthorizationCodeFlow.queryFields(of: callback)
        XCTAssertEqual(fields, ["error": "invalid_request", "state": "s"])
        XCTAssertEqual(oauth.authorizationCodesIssued, 0)
    }
}
