import Foundation
import LoopbackServer
import XCTest

@testable import URLTaskManager
import URLTaskCrypto
@testable import URLTaskOAuth2

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
            XCTAssertEqual(error, .tokenRequestRejected(status: 400, error: "invalid_grant", description: nil))
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

    func testAReusedCodeIsRefused() async throws {
        let attempt = flow.start()
        let callback = try await browse(attempt.url)
        let first = try await flow.credential(fromCallback: callback, for: attempt)
        XCTAssertEqual(first.accessToken, "a-access-1")

        do {
            _ = try await flow.credential(fromCallback: callback, for: attempt)
            XCTFail("a code was accepted twice")
        } catch let error as OAuth2Error {
            XCTAssertEqual(error.serverErrorCode, "invalid_grant")
        }
        XCTAssertEqual(oauth.authorizationCodeRefusals, ["code reused"])
        XCTAssertEqual(oauth.currentAccess, "a-access-1", "no token was issued for the reuse")
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
