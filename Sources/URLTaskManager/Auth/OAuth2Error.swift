/// Why the OAuth2 kit could not produce a token.
///
/// Requests fail with these wrapped in ``URLTaskError/reactorFailed(reactor:underlying:)``,
/// whichever path found the problem (a 401 that triggered a refresh, or a token renewed before
/// it expired), so an app handles "the session is over" in one place.
public enum OAuth2Error: Error, Sendable, Equatable {
    /// There is no credential to refresh: never signed in, or signed out meanwhile.
    case notSignedIn
    /// The credential has no refresh token, so the refresh-token grant cannot renew it.
    case noRefreshToken
    /// The token endpoint answered with an error (RFC 6749 §5.2): `error` is its code, such as
    /// `invalid_grant` for a refresh token that was revoked, expired or already rotated.
    case tokenRequestRejected(status: Int, error: String?, description: String?)
    /// The token endpoint answered 2xx with something that is not a bearer token response.
    case invalidTokenResponse(reason: String)

    /// Whether only a new sign-in can fix this. The authenticator then stops asking the token
    /// endpoint (and stops sending requests) until ``OAuth2Authenticator/signIn(_:)``: retrying
    /// a refresh token the server has rejected cannot succeed. A 400 or 401 from the token
    /// endpoint counts; a 5xx, a malformed answer or a transport error does not (the next
    /// request tries again).
    public var requiresSignIn: Bool {
        switch self {
        case .notSignedIn, .noRefreshToken: true
        case .tokenRequestRejected(let status, _, _): status == 400 || status == 401
        case .invalidTokenResponse: false
        }
    }
}

extension OAuth2Error: CustomStringConvertible, LocalizedError {
    public var description: String {
        switch self {
        case .notSignedIn:
            "Not signed in"
        case .noRefreshToken:
            "The credential has no refresh token"
        case .tokenRequestRejected(let status, let error, let description):
            "The token endpoint answered \(status)" + (error.map { " \($0)" } ?? "") + (description.map { ": \($0)" } ?? "")
        case .invalidTokenResponse(let reason):
            "The token endpoint's answer is not a bearer token: \(reason)"
        }
    }

    public var errorDescription: String? { description }
}
