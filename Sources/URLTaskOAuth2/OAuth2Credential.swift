import Foundation
import URLTaskManager

/// An OAuth 2.0 access token with what is needed to renew it.
///
/// Store it with a ``CredentialStore``; hand it to an ``OAuth2Authenticator`` with
/// ``OAuth2Authenticator/signIn(_:)``. It is `Codable` so a Keychain or file store can keep it
/// as JSON. Its ``description`` never prints the tokens: a credential that ends up in a log line
/// or a crash report must not be usable by whoever reads it.
public struct OAuth2Credential: Codable, Sendable, Hashable, CustomStringConvertible {
    /// The bearer token sent in `Authorization: Bearer ...`.
    public var accessToken: String
    /// The token that obtains a new access token (RFC 6749 §6). `nil` when the server issued
    /// none: such a credential can only be renewed by a custom refresh (or a new sign-in).
    public var refreshToken: String?
    /// When the access token stops working, by the client's clock. A token response without
    /// `expires_in` gets `Date.distantFuture`: it is then renewed only when a 401 says so.
    public var expiresAt: Date
    /// The scope granted, as the server spelled it, if it said.
    public var scope: String?

    /// Creates a credential.
    public init(accessToken: String, refreshToken: String? = nil, expiresAt: Date, scope: String? = nil) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.expiresAt = expiresAt
        self.scope = scope
    }

    /// Whether the access token is expired, or will be within `leeway` of `now`.
    ///
    /// A leeway covers the time a request spends in flight and the skew between the client's
    /// clock and the server's: a token that expires while its request is on the wire earns a
    /// 401 and a second round trip, so it is better renewed a little early.
    public func isExpired(within leeway: Duration = .zero, at now: Date = Date()) -> Bool {
        expiresAt.timeIntervalSince(now) <= leeway / .seconds(1)
    }

    /// The token lengths and expiry, never the tokens themselves.
    public var description: String {
        let refresh = refreshToken.map { "<\($0.count) characters>" } ?? "nil"
        return
            "OAuth2Credential(accessToken: <\(accessToken.count) characters>, refreshToken: \(refresh), expiresAt: \(expiresAt), scope: \(scope ?? "nil"))"
    }
}
