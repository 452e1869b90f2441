import Foundation
import URLTaskManager

/// Renews an ``OAuth2Authenticator``'s credential when a request that carried its token comes
/// back 401, then sends the request again with the new token.
///
/// It runs with `URLTaskReactorConfiguration.authentication`: one refresh however many
/// requests are refused at once (they all wait for it), and requests that have not been sent
/// yet wait too instead of going out with the token being replaced. On success every waiting
/// request is sent again through the interceptors; on failure they all fail with
/// `URLTaskError.Code.authenticationFailed` carrying the ``OAuth2Error`` (a `URLError` arrives
/// as itself), the authenticator's
/// `onRefreshFailure` is called once for the failure episode, and 401s that arrive within its
/// ``OAuth2Authenticator/refreshBackoff`` fail the same way without another token request.
/// A token endpoint that could not be reached (refused or lost connection, unresolvable host,
/// offline) fails the waiting requests with its `URLError` but starts no back-off: the next
/// 401 tries the refresh again, so the first one after the endpoint is back gets a token.
///
/// **What the API must answer.** A 401, the answer RFC 6750 §3.1 gives an expired, revoked or
/// malformed token (with `WWW-Authenticate: Bearer error="invalid_token"`); the status is what
/// counts. A 403 is not taken: it reaches the caller as the API sent it, and no token request is
/// made. RFC 6750 answers `insufficient_scope` with 403, which a new token for the same grant
/// does not fix, and a 403 for a permission says nothing about the token; refreshing on it would
/// cost a token request for every forbidden request. An API that answers an expired token with
/// a bare 403 (django-oauth-toolkit's default `ProtectedResourceView`) must be made to answer
/// 401 (its `ProtectedResourceMetadataView` does): the OAuth2 article's "What the API must
/// answer".
///
/// It only takes 401s to requests the ``BearerInterceptor`` gave this authenticator's token
/// to: a 401 from another host, or to a request sent while signed out, reaches the caller as
/// is. Its requests to other origins and to the token endpoint are exempt, so a refresh of one
/// backend's token never holds another backend's requests, and the token endpoint is never
/// held behind the refresh it is part of.
///
/// A 401 to a token the authenticator has replaced since the request left (a request that was
/// already in flight when the refresh happened) does not refresh again: the request is sent
/// again with the current token.
public struct OAuth2RefreshReactor: URLTaskReactor {
    /// The credential's owner.
    public let authenticator: OAuth2Authenticator
    public let configuration: URLTaskReactorConfiguration

    /// Renews `authenticator`'s credential on 401.
    ///
    /// - Parameters:
    ///   - authenticator: The credential's owner, shared with the ``BearerInterceptor``.
    ///   - configuration: Defaults to `URLTaskReactorConfiguration.authentication`.
    ///     Its `exempts` is extended with the token endpoint and every other origin.
    public init(authenticator: OAuth2Authenticator, configuration: URLTaskReactorConfiguration = .authentication) {
        self.authenticator = authenticator
        var configuration = configuration
        let exempts = configuration.exempts
        configuration.exempts = { request in
            guard let url = request.url, authenticator.authorizes(url) else { return true }
            return authenticator.isTokenRequest(request) || exempts(request)
        }
        self.configuration = configuration
    }

    public func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
        outcome.statusCode == 401 && credentialVersion(of: task) != nil
    }

    public func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
        guard let sent = credentialVersion(of: task) else { return }
        // Whether this 401 is late is the engine's decision (its runs and the versions this
        // reactor reports, judged in one place): a late one never gets here. The authenticator's
        // own check below is about its credential, which changes outside this engine too (a
        // proactive renewal by the interceptor, the app's `refresh()`, another manager sharing
        // the authenticator) between the engine's decision and this call.
        // The engine cancels the work only when the run's timeout has passed (its waiters have
        // then failed with `reactorTimedOut`). A refresh through a token endpoint runs on,
        // bounded by the endpoint (its answer may carry the only valid refresh token); one of
        // the app's own `refresh`, which nothing else bounds, stops too.
        do {
            try await withTaskCancellationHandler {
                try await authenticator.refresh(ifUnchangedSince: sent)
            } onCancel: {
                Task { [authenticator] in await authenticator.abandonRefresh() }
            }
        } catch {
            throw Self.failure(error)
        }
    }

    /// What a refresh's failure is for the requests that needed it: an ``OAuth2Error`` becomes
    /// a `URLTaskError` coded `URLTaskError.Code.authenticationFailed` (the
    /// pipeline names the component); anything else, a `URLError` from the token endpoint
    /// included, is left to the `URLTaskError` rule. Shared with ``BearerInterceptor``, so a
    /// refresh fails its requests the same way whichever path started it.
    static func failure(_ error: any Error) -> any Error {
        guard let oauth = error as? OAuth2Error else { return error }
        return URLTaskError(code: .authenticationFailed, underlying: oauth)
    }

    /// The authenticator's credential version the ``BearerInterceptor`` applied to `task`: the
    /// one version the engine judges this reactor's requests by.
    public func credentialVersion(of task: URLTask) -> Int? {
        task.attemptValues[AppliedCredentialVersions.self]?[ObjectIdentifier(authenticator)]
    }

    /// The authenticator's credential version now: it changes on sign-in, sign-out and every
    /// renewal, including the ones the interceptor makes before a token expires.
    public func currentCredentialVersion() -> Int? {
        authenticator.version
    }
}
