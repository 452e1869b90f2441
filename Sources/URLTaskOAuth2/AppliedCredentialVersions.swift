import URLTaskManager
/// The credential version each ``BearerInterceptor`` applied to a task, by authenticator.
///
/// Written by the interceptor, read by the ``OAuth2RefreshReactor`` of the same authenticator to
/// tell a stale token (the credential changed since: just send again) from a rejected current
/// one (refresh). Keyed by authenticator so several can serve one manager.
enum AppliedCredentialVersions: URLTaskValueKey {
    typealias Value = [ObjectIdentifier: Int]
}
