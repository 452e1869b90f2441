import Foundation
import URLTaskManager

/// Why the OAuth2 kit could not produce a token.
///
/// Requests fail with these as the `URLTaskError.underlying` error of a `URLTaskError` coded
/// `URLTaskError.Code.authenticationFailed`, whichever path found the problem (a
/// 401 that triggered a refresh, a token renewed before it expired, a sign-out through
/// `URLTaskManager.signOut(of:)`), so an app handles "the session is over" in one place.
///
/// Three kinds of failure call for three different reactions, and the two properties tell them
/// apart: ``requiresSignIn`` (the user must sign in again), ``isConfigurationError`` (the app or
/// the server's client registration is wrong: signing in again would not help, a developer must
/// look), and neither (temporary: the next request tries again).
public enum OAuth2Error: Error, Sendable, Equatable {
    /// There is no credential to refresh: never signed in, or signed out meanwhile.
    case notSignedIn
    /// The credential has no refresh token, so the refresh-token grant cannot renew it.
    case noRefreshToken
    /// The token endpoint answered with an error (RFC 6749 §5.2): `error` is its code, such as
    /// `invalid_grant` for a refresh token that was revoked, expired or already rotated. `url`
    /// is the endpoint's, without its query, user, password or fragment (see ``url``): `nil`
    /// only in an error made by hand.
    case tokenRequestRejected(status: Int, error: String?, description: String?, url: URL? = nil)
    /// The token endpoint answered 2xx with something that is not a usable bearer token
    /// response: no `access_token`, another `token_type`, or an `expires_in` that is not a
    /// positive number of seconds; or a body meant as JSON (an `application/json` or `+json`
    /// `Content-Type`, or a body that starts with `{` or `[`) that is not a JSON object: cut
    /// short or otherwise malformed (`reason` "the body is not valid JSON"), or an array or
    /// another value ("the body is not a JSON object"). The server's faulty answer, not the app's configuration:
    /// temporary (neither ``isConfigurationError`` nor ``requiresSignIn``), so the next request
    /// that needs a token tries again after the authenticator's back-off. `reason` is the kit's
    /// own text, never the body. `url` is the endpoint's, as in
    /// ``tokenRequestRejected(status:error:description:url:)``.
    case invalidTokenResponse(reason: String, url: URL? = nil)
    /// What answered at the token endpoint's URL is not a token endpoint: a 404 or a 405, or an
    /// answer that is not JSON and does not claim to be (an HTML page, plain text, an empty
    /// 2xx) with a 2xx or 4xx status. The URL is
    /// wrong (a typo, a path of another server's layout, the authorization endpoint), or the
    /// server takes no `POST` there. A configuration error (``isConfigurationError``): signing
    /// in again would fail the same way. `url` is the endpoint's, without its query, user,
    /// password or fragment; `mediaType` is the answer's `Content-Type` without parameters, if
    /// it had one. A 5xx page from a proxy (a 502 in HTML) stays a temporary
    /// ``tokenRequestRejected(status:error:description:url:)``. A body meant as JSON that does
    /// not parse (a JSON `Content-Type`, or a first byte `{` or `[`: a truncated
    /// `{"access_token": "ab`) is not this but the server's faulty answer: with a 2xx,
    /// ``invalidTokenResponse(reason:url:)``; with a 4xx or 5xx,
    /// ``tokenRequestRejected(status:error:description:url:)`` without a code.
    case notATokenEndpoint(url: URL, status: Int, mediaType: String?)
    /// The token endpoint's answer was longer than `limit` bytes
    /// (``OAuth2TokenEndpoint/answerSizeLimit``), announced by its `Content-Length` or counted
    /// as it arrived: the transfer was cancelled there, and nothing of the body is kept. A token
    /// answer is a few hundred bytes; one this long is a broken or hostile server (or a wrong
    /// URL serving a large file), and reading it whole would cost the app its size in memory.
    /// Temporary, like a 5xx: the next request that needs a token tries again (after the
    /// authenticator's back-off). `url` is the endpoint's, as in
    /// ``tokenRequestRejected(status:error:description:url:)``.
    case tokenAnswerTooLarge(limit: Int, url: URL? = nil)

    /// The token endpoint URL the failed request went to, without its query, user, password or
    /// fragment (what an error may show: a query can carry a secret), for every error about a
    /// token endpoint's answer; `nil` for ``notSignedIn`` and ``noRefreshToken``, which sent
    /// nothing, and in an error made by hand without one. ``description`` names it: a token URL
    /// that points at the wrong server (the API itself, which answers 401) reads as the wrong
    /// URL it is, not only as a client-credentials problem.
    public var url: URL? {
        switch self {
        case .notSignedIn, .noRefreshToken: nil
        case .tokenRequestRejected(_, _, _, let url), .invalidTokenResponse(_, let url), .tokenAnswerTooLarge(_, let url): url
        case .notATokenEndpoint(let url, _, _): url
        }
    }

    /// This error with `url` (shown without its query, user, password or fragment) as the
    /// endpoint's, where the case carries one and has none yet.
    func naming(_ url: URL) -> OAuth2Error {
        let shown = OAuth2TokenEndpoint.displayed(url)
        switch self {
        case .tokenRequestRejected(let status, let error, let description, nil):
            return .tokenRequestRejected(status: status, error: error, description: description, url: shown)
        case .invalidTokenResponse(let reason, nil): return .invalidTokenResponse(reason: reason, url: shown)
        case .tokenAnswerTooLarge(let limit, nil): return .tokenAnswerTooLarge(limit: limit, url: shown)
        default: return self
        }
    }

    /// The `error` code the token endpoint answered with, as it sent it (RFC 6749 §5.2), or
    /// `nil`. The server chose this text: it may echo anything the request carried, so log it
    /// only where a secret may be logged. ``description`` names only registered codes.
    public var serverErrorCode: String? {
        guard case .tokenRequestRejected(_, let error, _, _) = self else { return nil }
        return error
    }

    /// The token endpoint's `error_description`, as it sent it, or `nil`. Never part of
    /// ``description``: a server may echo the refresh token, the client's credentials or the
    /// password in it, and this library does not know every form an echo can take. For apps
    /// that want the server's words, knowing what they may contain.
    public var serverDescription: String? {
        guard case .tokenRequestRejected(_, _, let description, _) = self else { return nil }
        return description
    }

    /// The error codes ``description`` names: RFC 6749 §5.2 and §4.1.2.1, RFC 6750 §3.1,
    /// RFC 8628 §3.5 and RFC 8693 §2.2.2. Any other code is the server's text, which may hold
    /// anything (see ``serverErrorCode``).
    static let registeredErrorCodes: Set<String> = [
        "invalid_request", "invalid_client", "invalid_grant", "unauthorized_client", "unsupported_grant_type", "invalid_scope",
        "access_denied", "server_error", "temporarily_unavailable", "invalid_token", "insufficient_scope",
        "authorization_pending", "slow_down", "expired_token", "invalid_target",
    ]

    /// The RFC 6749 §5.2 codes that say the client, not the user's grant, is wrong.
    static let configurationErrorCodes: Set<String> = [
        "invalid_client", "invalid_request", "invalid_scope", "unauthorized_client", "unsupported_grant_type",
    ]

    /// Whether only a new sign-in can fix this. The authenticator then stops asking the token
    /// endpoint (and stops sending requests) until ``OAuth2Authenticator/signIn(_:)``: retrying
    /// a refresh token the server has rejected cannot succeed.
    ///
    /// Only a 4xx `invalid_grant` counts (the grant, that is the refresh token, is revoked,
    /// expired or already used), besides having no credential or no refresh token at all. A
    /// 400 or 401 with another code or none is not the user's to fix (see
    /// ``isConfigurationError``), and a 5xx, a malformed answer (malformed JSON included) or a
    /// transport error is temporary: the next request tries again.
    public var requiresSignIn: Bool {
        switch self {
        case .notSignedIn, .noRefreshToken: true
        case .tokenRequestRejected(let status, let error, _, _): (400..<500).contains(status) && error == "invalid_grant"
        case .invalidTokenResponse, .notATokenEndpoint, .tokenAnswerTooLarge: false
        }
    }

    /// Whether the token endpoint refused the client rather than the user's grant: a wrong
    /// client ID or secret, a client authentication method the server does not accept, a grant
    /// or scope the client is not registered for. Signing in again would fail the same way, so
    /// an app should report it (to its developers) rather than show a sign-in screen.
    ///
    /// The codes `invalid_client`, `invalid_request`, `invalid_scope`, `unauthorized_client` and
    /// `unsupported_grant_type` count, and so does a 401 without `invalid_grant` (with another
    /// code or no body at all): a token endpoint answers 401 when client authentication failed
    /// (RFC 6749 §5.2). A 400 without a code is neither this nor ``requiresSignIn``: it is
    /// treated as temporary. The authenticator does not end the session on a configuration
    /// error, so a fix on the server's side is picked up by the next request.
    /// ``notATokenEndpoint(url:status:mediaType:)`` counts: the URL is wrong. (So does a token
    /// URL that points at another server, such as the API, which answers 401: the description
    /// names the ``url``, so that it can be checked first.) Malformed JSON does not: it is the
    /// server's faulty answer (``invalidTokenResponse(reason:url:)`` for a 2xx), temporary.
    public var isConfigurationError: Bool {
        if case .notATokenEndpoint = self { return true }
        guard case .tokenRequestRejected(let status, let error, _, _) = self else { return false }
        if let error, Self.configurationErrorCodes.contains(error) { return true }
        return status == 401 && error != "invalid_grant"
    }
}

extension OAuth2Error: CustomStringConvertible, LocalizedError {
    /// What happened, with the token endpoint's ``url`` (without query, user, password or
    /// fragment), the status and a registered error code; never a token, a secret or a password,
    /// whatever the server echoed. Nothing the server wrote freely is part of it:
    /// its `error_description` is ``serverDescription``, an unregistered code
    /// ``serverErrorCode``.
    public var description: String {
        switch self {
        case .notSignedIn:
            "Not signed in"
        case .noRefreshToken:
            "The credential has no refresh token"
        case .tokenRequestRejected(let status, let error, let description, let url):
            "The token endpoint\(Self.at(url)) answered \(status)"
                + (error.map { Self.registeredErrorCodes.contains($0) ? " \($0)" : " with an unregistered error code" } ?? "")
                + (description == nil ? "" : " (its error_description is in serverDescription)")
                + (isConfigurationError
                    ? " (a client configuration problem: check the token endpoint URL, the client ID, secret, authentication method, grant and scope)"
                    : "")
        case .invalidTokenResponse(let reason, let url):
            "The answer of the token endpoint\(Self.at(url)) is not a bearer token: \(reason)"
        case .notATokenEndpoint(let url, let status, let mediaType):
            "\(OAuth2TokenEndpoint.displayed(url).absoluteString) is not a token endpoint: it answered \(status)"
                + (status == 404 || status == 405 ? "" : mediaType.map { " with \($0), not JSON" } ?? " with a body that is not JSON")
                + " (a client configuration problem: check the token endpoint URL, for example the `token_endpoint` of the"
                + " server's metadata, and that it accepts POST)"
        case .tokenAnswerTooLarge(let limit, let url):
            "The answer of the token endpoint\(Self.at(url)) was longer than \(limit) bytes; the transfer was cancelled"
        }
    }

    /// " at <url>", or nothing without a URL. The URL is shown without query, user, password or
    /// fragment whatever it holds.
    private static func at(_ url: URL?) -> String {
        url.map { " at \(OAuth2TokenEndpoint.displayed($0).absoluteString)" } ?? ""
    }

    /// The same text as ``description``: what `localizedDescription` and the `NSError` form show.
    public var errorDescription: String? { description }
}
