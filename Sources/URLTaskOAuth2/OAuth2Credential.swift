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
    /// When the access token was issued, by the client's clock, if known: with ``expiresAt`` it
    /// gives the token's lifetime, which bounds how early it is renewed (see
    /// ``refreshLeeway(upTo:)``). The kit's token requests set it (to when the request left);
    /// `nil` in a credential stored by an earlier version or made without it.
    public var issuedAt: Date?

    /// The largest part of a token's lifetime renewed ahead of its expiry: a quarter, so a token
    /// is used for at least three quarters of its life however short it is.
    public static let maximumLeewayFraction = 0.25

    /// Creates a credential.
    ///
    /// Pass `issuedAt` when you know it (the time your token request left, for instance): a
    /// token living shorter than an authenticator's `refreshLeeway` is then renewed a quarter of
    /// its lifetime ahead of its expiry rather than on its first use.
    public init(accessToken: String, refreshToken: String? = nil, expiresAt: Date, scope: String? = nil, issuedAt: Date? = nil) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.expiresAt = expiresAt
        self.scope = scope
        self.issuedAt = issuedAt
    }

    /// How long before its expiry this credential is renewed by an authenticator whose
    /// `refreshLeeway` is `leeway`: `leeway`, but at most ``maximumLeewayFraction`` of the token's
    /// lifetime when ``issuedAt`` says what it is.
    ///
    /// Why a bound: a leeway covers a request's time in flight and the clock skew, a minute by
    /// default. A token that lives 3 seconds (or 50) would be within a minute of its expiry from
    /// the moment it was issued, and renewed by the first request after every sign-in and every
    /// refresh, in every process sharing it. A quarter of its lifetime still covers the time in
    /// flight of any request the token is good for. A token issued in the future or after its
    /// expiry (a clock set back) counts as having no lifetime: it is renewed at its expiry.
    public func refreshLeeway(upTo leeway: Duration) -> Duration {
        guard let issuedAt, expiresAt != .distantFuture else { return leeway }
        let lifetime = max(0, expiresAt.timeIntervalSince(issuedAt))
        return min(leeway, .seconds(lifetime * Self.maximumLeewayFraction))
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
            "OAuth2Credential(accessToken: <\(accessToken.count) characters>, refreshToken: \(refresh), expiresAt: \(expiresAt), scope: \(scope ?? "nil")"
            + (issuedAt.map { ", issuedAt: \($0))" } ?? ")")
    }
}
