import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a sign-out's revocation (RFC 7009) did at the authorization server.
///
/// ``OAuth2Authenticator/signOut()`` and `URLTaskManager.signOut(of:)` sign out locally first,
/// always, and then revoke the tokens they dropped; this says how that second part ended. A
/// sign-out whose revocation failed is still a sign-out: the credential is gone from the
/// authenticator and its store. What failed is the server's side, where the tokens stay valid
/// until they expire (the access token) or are revoked another way (the refresh token): an app
/// that must be sure may tell the user, or try again later with
/// ``OAuth2TokenEndpoint/revoke(_:)`` on the credential it read before signing out.
public enum OAuth2Revocation: Sendable {
    /// The server answered 200 to every revocation request sent: the refresh token (if the
    /// credential had one), then the access token. RFC 7009 §2.2 answers 200 for a token it
    /// does not know too, so this is also the answer for a token already revoked or expired.
    case revoked
    /// There was nothing to revoke: the authenticator held no credential (it was signed out
    /// already, or another sign-out, running at the same time, revokes it), or, in a fleet, the
    /// fleet was signed out by another process, which revokes. Nothing was sent.
    case nothingToRevoke
    /// No revocation is configured: the token endpoint has no
    /// ``OAuth2TokenEndpoint/revocationURL``, or the authenticator's own `refresh` came without
    /// a `revoke`. The sign-out was local only, as before revocation existed; nothing was sent.
    case notConfigured
    /// A revocation request failed: an ``OAuth2RevocationError`` for an answer other than 200,
    /// a timeout or a server that could not be reached (it names the revocation URL and which
    /// token), or the error of a store that could not be read, or whatever your own `revoke`
    /// reported. The local sign-out stands.
    case failed(any Error)

    /// The error of ``failed(_:)``, or `nil`.
    public var error: (any Error)? {
        guard case .failed(let error) = self else { return nil }
        return error
    }
}

extension OAuth2Revocation: CustomStringConvertible {
    /// The outcome in a few words, with the failure's own description (which, for the kit's
    /// errors, names no token or secret).
    public var description: String {
        switch self {
        case .revoked: "revoked"
        case .nothingToRevoke: "nothing to revoke"
        case .notConfigured: "no revocation configured"
        case .failed(let error): "revocation failed: \(error)"
        }
    }
}

/// A revocation request (RFC 7009) that did not end with the server's 200.
///
/// Its own type rather than new ``OAuth2Error`` cases: the token requests' errors are switched
/// over by apps, and a revocation is never a token request's failure (it comes after the
/// sign-out, which it cannot undo). Every field is safe to log: the ``url`` without its query,
/// user, password or fragment, which token it was about (never the token), the status and a
/// registered error code only.
public struct OAuth2RevocationError: Error, Sendable, Equatable {
    /// Which token the failed request was revoking (its `token_type_hint`).
    public enum Token: String, Sendable, Equatable {
        /// `token_type_hint=refresh_token`: revoked first.
        case refreshToken = "refresh_token"
        /// `token_type_hint=access_token`.
        case accessToken = "access_token"
    }

    /// Why the request failed.
    public enum Reason: Sendable, Equatable {
        /// The server answered `status`, not 200. `error` is the answer's `error` code when it
        /// is a registered one (RFC 7009 §2.2.1's `unsupported_token_type`, RFC 6749 §5.2's
        /// `invalid_client`...), else `nil`: a server's own text may echo what it was sent.
        /// A 503 (RFC 7009 §2.2.1) means try again later.
        case rejected(status: Int, error: String?)
        /// No answer: the request timed out (`URLError.Code.timedOut`, at the endpoint's
        /// ``OAuth2TokenEndpoint/timeout``, which bounds the whole revocation, both tokens), or
        /// the server could not be reached (`cannotConnectToHost`, `cannotFindHost`,
        /// `notConnectedToInternet`...). The access token's request is then not sent.
        case transport(URLError.Code)
        /// The answer's body was longer than the endpoint's ``OAuth2TokenEndpoint/answerSizeLimit``;
        /// the transfer was cancelled.
        case answerTooLarge(limit: Int)
    }

    /// The revocation URL, without its query, user, password or fragment.
    public let url: URL
    /// Which token's revocation failed.
    public let token: Token
    /// Why.
    public let reason: Reason

    /// An error about `url` (shown without its query, user, password or fragment).
    public init(url: URL, token: Token, reason: Reason) {
        self.url = OAuth2TokenEndpoint.displayed(url)
        self.token = token
        self.reason = reason
    }

    /// The codes an ``Reason/rejected(status:error:)`` keeps: RFC 7009 §2.2.1's and the
    /// token endpoint's registered ones.
    static let registeredErrorCodes = OAuth2Error.registeredErrorCodes.union(["unsupported_token_type"])
}

extension OAuth2RevocationError: CustomStringConvertible, LocalizedError {
    /// What happened, naming the revocation URL (without query, user, password or fragment)
    /// and which token; never a token or a secret.
    public var description: String {
        let what = "Revoking the \(token == .refreshToken ? "refresh" : "access") token at \(url.absoluteString)"
        switch reason {
        case .rejected(let status, let error):
            return "\(what) failed: the server answered \(status)" + (error.map { " \($0)" } ?? "")
                + (status == 503 ? " (try again later)" : "")
        case .transport(let code):
            return code == .timedOut
                ? "\(what) failed: no answer within the endpoint's timeout"
                : "\(what) failed: the server could not be reached (URLError \(code.rawValue))"
        case .answerTooLarge(let limit):
            return "\(what) failed: the answer was longer than \(limit) bytes; the transfer was cancelled"
        }
    }

    /// The same text as ``description``.
    public var errorDescription: String? { description }
}

extension OAuth2TokenEndpoint {
    /// Revokes `credential` at ``revocationURL`` (RFC 7009): its refresh token first, then its
    /// access token, each a form `POST` of `token` and `token_type_hint`, with the token
    /// requests' client authentication (HTTP Basic or the form for a confidential client,
    /// `client_id` for a public one), `Connection: close`, and its answer read up to
    /// ``answerSizeLimit``.
    ///
    /// The refresh token goes first: a server that revokes it also revokes the access tokens of
    /// its grant (RFC 7009 §2.1 says it should), so a sign-out interrupted between the two
    /// requests leaves at most a short-lived token behind. ``timeout`` bounds the whole
    /// revocation, both requests: the second gets what the first left. A request the server
    /// answered with an error does not stop the other one; a timeout or an unreachable server
    /// does (the access token's request would meet the same). The first failure is reported.
    ///
    /// ``OAuth2Authenticator/signOut()`` calls this after its local sign-out; call it yourself
    /// to revoke a credential you hold otherwise. Returns ``OAuth2Revocation/notConfigured``
    /// without a ``revocationURL``.
    public func revoke(_ credential: OAuth2Credential) async -> OAuth2Revocation {
        guard let revocationURL else { return .notConfigured }
        let deadline = timeout.map { ContinuousClock.now + $0.clampedWait }
        var tokens: [(String, OAuth2RevocationError.Token)] = []
        if let refreshToken = credential.refreshToken, !refreshToken.isEmpty { tokens.append((refreshToken, .refreshToken)) }
        if !credential.accessToken.isEmpty { tokens.append((credential.accessToken, .accessToken)) }
        var failure: (any Error)?
        for (token, kind) in tokens {
            let remaining = deadline.map { ContinuousClock.now.duration(to: $0) }
            do {
                try await revoke(token, kind, at: revocationURL, within: remaining)
            } catch let error as OAuth2RevocationError {
                if failure == nil { failure = error }
                if case .transport = error.reason { break }
            } catch {
                // Cancelled: nothing more is sent.
                if failure == nil { failure = error }
                break
            }
        }
        return failure.map { .failed($0) } ?? .revoked
    }

    /// One revocation request; throws an ``OAuth2RevocationError`` for anything but a 200
    /// (a `CancellationError` when the caller's task was cancelled).
    private func revoke(_ token: String, _ kind: OAuth2RevocationError.Token, at target: URL, within limit: Duration?) async throws {
        func failure(_ reason: OAuth2RevocationError.Reason) -> OAuth2RevocationError {
            OAuth2RevocationError(url: target, token: kind, reason: reason)
        }
        if let limit, limit <= .zero { throw failure(.transport(.timedOut)) }
        let request = formRequest(to: target, ["token": token, "token_type_hint": kind.rawValue], transportTimeout: limit)
        let status: Int
        let body: Data
        do {
            let (data, response) = try await send(request, within: limit)
            status = (response as? HTTPURLResponse)?.statusCode ?? 0
            body = data
        } catch let error as URLError {
            throw failure(.transport(error.code))
        } catch OAuth2Error.tokenAnswerTooLarge(let limit, _) {
            throw failure(.answerTooLarge(limit: limit))
        } catch OAuth2Error.tokenRequestRejected(let status, _, _, _) {
            // A 401 challenge the token session refused (a wrong client secret).
            throw failure(.rejected(status: status, error: nil))
        }
        guard status == 200 else {
            let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any]
            let code = (object?["error"] as? String).flatMap { OAuth2RevocationError.registeredErrorCodes.contains($0) ? $0 : nil }
            throw failure(.rejected(status: status, error: code))
        }
    }
}

extension OAuth2Authenticator {
    /// Revokes a credential the authenticator signed out of (see ``OAuth2Revocation``): given
    /// to ``init(origins:store:refreshLeeway:refreshBackoff:isTokenRequest:onRefreshFailure:revoke:refresh:)``,
    /// called once per credential signed out, after the local sign-out, and never with the
    /// actor's isolation (it may take as long as a request does).
    public typealias Revoke = @Sendable (OAuth2Credential) async -> OAuth2Revocation

    /// The revocation at `endpoint`'s ``OAuth2TokenEndpoint/revocationURL``, or `nil` without one.
    static func revoker(for endpoint: OAuth2TokenEndpoint) -> Revoke? {
        guard endpoint.revocationURL != nil else { return nil }
        return { credential in await endpoint.revoke(credential) }
    }

    /// What a sign-out's local part dropped, for its revocation.
    struct SignedOut: Sendable {
        /// The credential dropped; `nil` if none was held.
        let credential: OAuth2Credential?
        /// Why no credential is known: the store could not be read before it was cleared.
        let loadError: (any Error)?
        /// How the store's clear ended.
        let cleared: Result<Void, any Error>
    }

    /// The revocation of what `signedOut` dropped: run on a task of its own, so that it runs to
    /// its end (bounded by the endpoint's timeout) even if the caller is cancelled meanwhile.
    nonisolated func revocation(after signedOut: SignedOut) async -> OAuth2Revocation {
        guard let revoker else { return .notConfigured }
        guard let credential = signedOut.credential else {
            return signedOut.loadError.map { .failed($0) } ?? .nothingToRevoke
        }
        return await Task { await revoker(credential) }.value
    }
}
