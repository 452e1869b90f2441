import URLTaskManager
/// Applies an ``OAuth2Authenticator``'s access token as `Authorization: Bearer <token>`.
///
/// Only requests whose scheme, host and port are one of the authenticator's origins get the
/// token; every other request passes untouched, so a token never leaks to a third-party host, a
/// CDN, or a plain-HTTP twin of the API. (The manager also strips `Authorization` when a
/// redirect leaves the origin.) The authenticator's own token requests are skipped too.
///
/// The token is read from the authenticator on every send, including resends, so a requeued
/// task carries the token that replaced the one it was refused with. A token that expires
/// within the authenticator's ``OAuth2Authenticator/refreshLeeway`` is renewed first: the
/// requests that need it all wait for that one refresh and none is sent with the old token
/// (unless the token endpoint cannot be reached at all: see below).
///
/// An existing `Authorization` header on a request for one of the origins is replaced while
/// signed in, and left alone while signed out.
///
/// When the token cannot be had (the refresh was refused, or rejected earlier), the task fails
/// exactly as the tasks whose 401 triggered a refresh that failed, naming
/// ``OAuth2RefreshReactor``, so one `catch` handles both: a `URLTaskError` coded
/// `URLTaskError.Code.authenticationFailed` carrying the ``OAuth2Error``, or
/// the `URLError` itself when the token request timed out.
///
/// When the refresh could not connect to the token endpoint at all (refused or lost
/// connection, unresolvable host, offline), the task is not failed here: it is sent with the
/// token it has (see ``OAuth2Authenticator/validCredential()``) and meets the outage as any
/// request: if its host is down too, it fails with that `URLError`, which an `OfflineHold`
/// holds and sends again through this interceptor (which then refreshes, once for every task
/// sent again) when a probe reaches the host; if its host is up, a 401 brings the
/// ``OAuth2RefreshReactor`` in.
///
/// Pair it with an ``OAuth2RefreshReactor`` on the same authenticator; use one pair per
/// credential (two backends with their own tokens are two pairs in one manager).
public struct BearerInterceptor: URLTaskInterceptor {
    /// The credential's owner.
    public let authenticator: OAuth2Authenticator

    /// Who a failed refresh is reported as when this interceptor meets it (it waited for the
    /// authenticator's own refresh): the refresh reactor, as when the reactor's run fails; the
    /// interceptor cannot know that reactor's index.
    static let refreshComponent = URLTaskError.Component(kind: .reactor, index: nil, name: String(describing: OAuth2RefreshReactor.self))

    private static let authorization = HeaderName("Authorization")

    /// Applies `authenticator`'s token to requests for its origins.
    public init(authenticator: OAuth2Authenticator) {
        self.authenticator = authenticator
    }

    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        if let command = try interceptWithoutSuspending(&task, context: context) { return command }
        let current: (credential: OAuth2Credential, version: Int)?
        do {
            current = try await authenticator.validCredential()
        } catch {
            throw URLTaskError.delivered(OAuth2RefreshReactor.failure(error), from: Self.refreshComponent, code: .reactorFailed)
        }
        return apply(current.map { ("Bearer " + $0.credential.accessToken, $0.version) }, to: &task)
    }

    private func apply(_ current: (authorization: String, version: Int)?, to task: inout URLTask) -> InterceptCommand {
        guard let current else { return .execute }
        task.request.replaceHeader(Self.authorization, with: current.authorization)
        var applied = task.attemptValues[AppliedCredentialVersions.self] ?? [:]
        applied[ObjectIdentifier(authenticator)] = current.version
        task.attemptValues[AppliedCredentialVersions.self] = applied
        return .execute
    }
}

extension BearerInterceptor: SynchronousInterceptor {
    /// Decides without the authenticator's actor while its credential is settled and fresh
    /// (``OAuth2Authenticator/credentialWithoutWaiting()``); a load, a refresh in flight, a
    /// standing rejection or a token about to expire take the asynchronous path.
    public func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand? {
        guard let url = task.request.url, authenticator.authorizes(url), !authenticator.isTokenRequest(task.request) else {
            return .execute
        }
        guard let current = authenticator.authorizationWithoutWaiting() else { return nil }
        return apply(current, to: &task)
    }
}
