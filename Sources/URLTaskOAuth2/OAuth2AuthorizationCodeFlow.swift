import Foundation
import URLTaskCrypto
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Sign-in with the authorization code grant and PKCE (RFC 6749 §4.1, RFC 7636): the flow
/// public clients (apps, command-line tools) must use, where the user signs in in a browser
/// and the app never sees the password.
///
/// 1. ``start(additionalParameters:)`` makes an ``OAuth2AuthorizationRequest``: the URL to open in
///    the browser, with a random `state` and an S256 `code_challenge` of a random verifier that
///    only the app knows.
/// 2. The authorization server sends the browser to the redirect URI with `code` and `state`;
///    the app hands that callback URL to ``signIn(_:callback:for:)`` (or
///    ``credential(fromCallback:for:)``), which checks `state`, turns an `error` into an
///    ``OAuth2AuthorizationError``, and exchanges the code and the verifier at the token
///    endpoint (`grant_type=authorization_code`).
///
/// ```swift
/// let flow = OAuth2AuthorizationCodeFlow(
///     authorizationEndpoint: URL(string: "https://auth.example.com/authorize")!,
///     tokenEndpoint: OAuth2TokenEndpoint(url: URL(string: "https://auth.example.com/token")!, clientID: "app"),
///     redirectURI: URL(string: "com.example.app:/oauth/callback")!,
///     scope: "profile")
/// let attempt = flow.start()
/// let callback = try await openInBrowser(attempt.url)  // ASWebAuthenticationSession, a loopback listener...
/// try await flow.signIn(auth, callback: callback, for: attempt)
/// ```
///
/// The code is bound to the verifier: someone who intercepts the redirect (another app
/// registered for the same scheme) cannot exchange the code without it. The ``tokenEndpoint``'s
/// `clientID` is the `client_id` of both requests.
///
/// **One exchange per attempt.** An attempt's code is exchanged at most once: a second callback
/// for the same attempt (a double delivery, a replayed redirect, a second tap) fails with
/// ``OAuth2AuthorizationError/attemptAlreadyExchanged`` and sends no token request, whether the
/// first exchange succeeded, failed or is still running. A server that sees a code twice must
/// refuse it and should revoke the tokens it issued for it (RFC 6749 §4.1.2), so a second
/// exchange could cost the sign-in that just succeeded. Copies of an attempt share this; an
/// attempt rebuilt with ``OAuth2AuthorizationRequest/init(url:state:codeVerifier:redirectURI:)``
/// (after a relaunch) is a new one.
///
/// **The issuer (RFC 9207).** Give ``issuer`` and a callback's `iss` parameter must equal it
/// (simple string comparison, RFC 9207 §2.4), or the callback fails with
/// ``OAuth2AuthorizationError/issuerMismatch(expected:received:)`` before anything is exchanged:
/// it defends a client of several authorization servers against a mix-up attack, where one
/// server's callback is made to look like another's. A callback without `iss` is accepted
/// unless ``requiresIssuer`` says the server always sends it (its metadata's
/// `authorization_response_iss_parameter_supported`).
public struct OAuth2AuthorizationCodeFlow: Sendable {
    /// The authorization endpoint the browser is sent to.
    public var authorizationEndpoint: URL
    /// Where the code is exchanged; its `clientID` is the client's `client_id`.
    public var tokenEndpoint: OAuth2TokenEndpoint
    /// Where the authorization server sends the browser back: a custom scheme, a claimed
    /// `https` link, or a loopback address (RFC 8252).
    public var redirectURI: URL
    /// The scope asked for, if any.
    public var scope: String?
    /// The authorization server's issuer identifier (its metadata's `issuer`), which a callback's
    /// `iss` parameter must equal (RFC 9207); `nil` checks no `iss`.
    public var issuer: String?
    /// Whether a callback must carry `iss` (the server's metadata says
    /// `authorization_response_iss_parameter_supported`): one without it then fails with
    /// ``OAuth2AuthorizationError/issuerMismatch(expected:received:)``. Needs ``issuer``.
    public var requiresIssuer: Bool

    /// Describes the flow of one client.
    ///
    /// - Parameters:
    ///   - authorizationEndpoint: The authorization endpoint.
    ///   - tokenEndpoint: The token endpoint, with the client's `clientID`.
    ///   - redirectURI: The redirect URI registered for the client.
    ///   - scope: The scope to ask for.
    ///   - issuer: The server's issuer identifier, which a callback's `iss` must equal (RFC 9207).
    ///   - requiresIssuer: Whether a callback without `iss` is refused.
    public init(
        authorizationEndpoint: URL, tokenEndpoint: OAuth2TokenEndpoint, redirectURI: URL, scope: String? = nil, issuer: String? = nil,
        requiresIssuer: Bool = false
    ) {
        self.authorizationEndpoint = authorizationEndpoint
        self.tokenEndpoint = tokenEndpoint
        self.redirectURI = redirectURI
        self.scope = scope
        self.issuer = issuer
        self.requiresIssuer = requiresIssuer
    }

    /// A new sign-in attempt: a fresh `state` and code verifier, and the URL to open.
    ///
    /// Keep the returned value until the callback arrives; each attempt's verifier and state are
    /// used once.
    ///
    /// - Parameter additionalParameters: More query items for the authorization URL, such as
    ///   `prompt` or `login_hint`; they cannot replace the flow's own.
    public func start(additionalParameters: [String: String] = [:]) -> OAuth2AuthorizationRequest {
        // 32 random bytes each: a 43-character verifier (RFC 7636 §4.1 asks for 43 to 128
        // unreserved characters and 256 bits of entropy) and an unguessable state.
        let verifier = RandomBytes.base64URL(RandomBytes.make(32))
        let state = RandomBytes.base64URL(RandomBytes.make(32))
        var fields = additionalParameters
        fields["response_type"] = "code"
        if let clientID = tokenEndpoint.clientID { fields["client_id"] = clientID }
        fields["redirect_uri"] = redirectURI.absoluteString
        if let scope { fields["scope"] = scope }
        fields["state"] = state
        fields["code_challenge"] = OAuth2AuthorizationRequest.challenge(for: verifier)
        fields["code_challenge_method"] = "S256"
        var parts = URLComponents(url: authorizationEndpoint, resolvingAgainstBaseURL: false) ?? URLComponents()
        let existing = parts.percentEncodedQuery.map { $0 + "&" } ?? ""
        parts.percentEncodedQuery = existing + OAuth2TokenEndpoint.formEncoded(fields)
        return OAuth2AuthorizationRequest(
            url: parts.url ?? authorizationEndpoint, state: state, codeVerifier: verifier, redirectURI: redirectURI)
    }

    /// The authorization code in `callback`, once it is known to answer `request`.
    ///
    /// Checked in this order: the callback is for the ``redirectURI`` (scheme, host, port and
    /// path), its `state` is the request's (else ``OAuth2AuthorizationError/stateMismatch``, even
    /// for an error answer, which could be forged), its `iss` is the ``issuer`` (RFC 9207; else
    /// ``OAuth2AuthorizationError/issuerMismatch(expected:received:)``, error answers included),
    /// an `error` parameter becomes ``OAuth2AuthorizationError/authorizationFailed(error:description:)``,
    /// and there is a `code`. Reading a code uses nothing up: ``exchange(code:for:)`` does.
    public func authorizationCode(from callback: URL, for request: OAuth2AuthorizationRequest) throws -> String {
        guard Self.sameEndpoint(callback, request.redirectURI) else { throw OAuth2AuthorizationError.redirectMismatch }
        let fields = Self.queryFields(of: callback)
        guard let state = fields["state"], Self.constantTimeEqual(state, request.state) else {
            throw OAuth2AuthorizationError.stateMismatch
        }
        if let issuer {
            let received = fields["iss"]
            // RFC 9207 §2.4: a simple string comparison, before the answer is processed.
            if received.map({ $0 != issuer }) ?? requiresIssuer {
                throw OAuth2AuthorizationError.issuerMismatch(expected: issuer, received: received)
            }
        }
        if let error = fields["error"] {
            throw OAuth2AuthorizationError.authorizationFailed(error: error, description: fields["error_description"])
        }
        guard let code = fields["code"], !code.isEmpty else { throw OAuth2AuthorizationError.missingCode }
        return code
    }

    /// Exchanges `code` and the request's verifier for a credential at the token endpoint
    /// (`grant_type=authorization_code`, RFC 6749 §4.1.3, RFC 7636 §4.5). A code that is wrong,
    /// used before or bound to another verifier is ``OAuth2Error/tokenRequestRejected(status:error:description:url:)``
    /// with `invalid_grant`. Once per attempt: a second call for `request` (or a copy of it)
    /// throws ``OAuth2AuthorizationError/attemptAlreadyExchanged`` and sends nothing.
    public func exchange(code: String, for request: OAuth2AuthorizationRequest) async throws -> OAuth2Credential {
        guard request.exchanges.exchangeRequested() else { throw OAuth2AuthorizationError.attemptAlreadyExchanged }
        return try await tokenEndpoint.requestToken([
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": request.redirectURI.absoluteString,
            "code_verifier": request.codeVerifier,
        ])
    }

    /// ``authorizationCode(from:for:)`` then ``exchange(code:for:)``.
    public func credential(fromCallback callback: URL, for request: OAuth2AuthorizationRequest) async throws -> OAuth2Credential {
        try await exchange(code: authorizationCode(from: callback, for: request), for: request)
    }

    /// Completes the sign-in: checks the callback, exchanges the code, and signs `authenticator`
    /// in with the credential (stored in its ``CredentialStore``, as ``OAuth2Authenticator/signIn(_:)``
    /// does). Nothing is stored when any step fails.
    public func signIn(_ authenticator: OAuth2Authenticator, callback: URL, for request: OAuth2AuthorizationRequest) async throws {
        try await authenticator.signIn(credential(fromCallback: callback, for: request))
    }

    /// The query of `url` as form fields (`+` is a space), the first value of each name.
    static func queryFields(of url: URL) -> [String: String] {
        guard let query = URLComponents(url: url, resolvingAgainstBaseURL: false)?.percentEncodedQuery else { return [:] }
        var fields: [String: String] = [:]
        for pair in query.split(separator: "&") {
            let pieces = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map {
                $0.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String($0)
            }
            if fields[pieces[0]] == nil { fields[pieces[0]] = pieces.count == 2 ? pieces[1] : "" }
        }
        return fields
    }

    /// Same scheme, host, port and path.
    private static func sameEndpoint(_ a: URL, _ b: URL) -> Bool {
        func parts(_ url: URL) -> [String?] {
            let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
            return [
                components?.scheme?.lowercased(), components?.host?.lowercased(), components?.port.map(String.init),
                components?.percentEncodedPath,
            ]
        }
        return parts(a) == parts(b)
    }

    /// Compares without stopping at the first difference, so the time taken tells nothing.
    private static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

/// One authorization code sign-in attempt: the URL to open, and the `state` and PKCE code
/// verifier the callback and the token request are checked against.
///
/// Its ``description`` shows the URL (which holds only the challenge) and never the verifier.
public struct OAuth2AuthorizationRequest: Sendable, Hashable, CustomStringConvertible {
    /// The authorization URL to open in the browser.
    public let url: URL
    /// The random `state` the callback must carry back.
    public let state: String
    /// The PKCE code verifier (RFC 7636 §4.1): a secret until the exchange, sent only to the
    /// token endpoint.
    public let codeVerifier: String
    /// The redirect URI the URL names, which the exchange repeats.
    public let redirectURI: URL
    /// Whether this attempt was exchanged: shared by its copies, so that one attempt is
    /// exchanged once (see ``OAuth2AuthorizationCodeFlow``). Not part of equality.
    let exchanges = AuthorizationAttemptStorage()

    /// The S256 challenge sent in the URL: `BASE64URL(SHA256(codeVerifier))`.
    public var codeChallenge: String { Self.challenge(for: codeVerifier) }

    /// A request with these values: for an app that keeps attempts across a relaunch, or a test.
    public init(url: URL, state: String, codeVerifier: String, redirectURI: URL) {
        self.url = url
        self.state = state
        self.codeVerifier = codeVerifier
        self.redirectURI = redirectURI
    }

    /// Equal when every public value is: whether either was exchanged plays no part.
    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.url == rhs.url && lhs.state == rhs.state && lhs.codeVerifier == rhs.codeVerifier && lhs.redirectURI == rhs.redirectURI
    }

    /// By the public values, as ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(url)
        hasher.combine(state)
        hasher.combine(codeVerifier)
        hasher.combine(redirectURI)
    }

    /// The URL to open; never the code verifier.
    public var description: String {
        "OAuth2AuthorizationRequest(url: \(url.absoluteString), codeVerifier: <\(codeVerifier.count) characters>)"
    }

    /// `BASE64URL(SHA256(ASCII(verifier)))`, RFC 7636 §4.2.
    static func challenge(for verifier: String) -> String {
        RandomBytes.base64URL(SHA256Digest.hash(Array(verifier.utf8)))
    }
}

/// Why a callback did not yield an authorization code.
public enum OAuth2AuthorizationError: Error, Sendable, Equatable, CustomStringConvertible, LocalizedError {
    /// The callback's `state` is missing or is not the attempt's: it answers another attempt, or
    /// it was forged (cross-site request forgery, RFC 6749 §10.12). Nothing was exchanged.
    case stateMismatch
    /// The callback is not for the flow's redirect URI.
    case redirectMismatch
    /// The callback has the right `state` but neither a `code` nor an `error`.
    case missingCode
    /// The authorization server answered with an error (RFC 6749 §4.1.2.1): `access_denied`
    /// when the user declined, `invalid_request`, `invalid_scope`... `description` is the
    /// server's `error_description`, its own words.
    case authorizationFailed(error: String, description: String?)

    /// Whether the user declined (`access_denied`): show the sign-in screen again, not an error.
    public var userDeclined: Bool { errorCode == "access_denied" }

    /// The attempt's code was already exchanged (or its exchange is under way): a second
    /// callback, or a replayed one, for the same attempt. No token request was sent. Start a new
    /// attempt if the user must sign in again.
    case attemptAlreadyExchanged
    /// The callback's `iss` is not the flow's ``OAuth2AuthorizationCodeFlow/issuer``, or is
    /// missing where ``OAuth2AuthorizationCodeFlow/requiresIssuer`` says it must be there
    /// (`received` is then `nil`): the answer may come from another authorization server (a
    /// mix-up attack, RFC 9207). Nothing was exchanged. `received` is the callback's text.
    case issuerMismatch(expected: String, received: String?)

    /// The server's error code, if the server answered with one.
    public var errorCode: String? {
        guard case .authorizationFailed(let error, _) = self else { return nil }
        return error
    }

    /// What went wrong, naming only registered error codes (the server's free text may echo
    /// anything the request carried).
    public var description: String {
        switch self {
        case .stateMismatch: "The callback's state does not match the sign-in attempt"
        case .redirectMismatch: "The callback is not for the flow's redirect URI"
        case .missingCode: "The callback carries no authorization code"
        case .attemptAlreadyExchanged: "The sign-in attempt's code was already exchanged; nothing was sent"
        case .issuerMismatch(let expected, let received):
            received == nil
                ? "The callback carries no iss parameter, which \(expected) always sends; nothing was exchanged"
                : "The callback's iss parameter is not \(expected); nothing was exchanged"
        case .authorizationFailed(let error, _):
            "The authorization server refused"
                + (OAuth2Error.registeredErrorCodes.contains(error) ? ": \(error)" : " with an unregistered error code")
        }
    }

    /// The same text as ``description``.
    public var errorDescription: String? { description }
}
