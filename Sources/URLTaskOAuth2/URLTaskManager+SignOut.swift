import Foundation
import URLTaskManager

extension URLTaskManager {
    /// Signs `authenticator` out, stops every task of this session that carries its
    /// credential or waits on it, and then revokes the credential at the server as
    /// ``OAuth2Authenticator/signOut()`` does.
    ///
    /// In this order: the local sign-out (the credential forgotten, the store cleared); then the
    /// tasks: requests held in a batch or queued for a connection with the old token never go
    /// out, requests on the network are cancelled, and each fails with a `URLTaskError` coded
    /// `URLTaskError.Code.authenticationFailed` carrying ``OAuth2Error/notSignedIn``; then the
    /// revocation (RFC 7009, if configured), which the tasks never wait for. Requests started
    /// afterwards go without a token (and their 401 reaches the caller). Signing out through
    /// the authenticator alone leaves requests that already carry the token to go out with it.
    ///
    /// Returns what the revocation did (a failure there leaves the sign-out done); throws only
    /// the store's error when it could not be cleared, after the tasks were stopped and the
    /// revocation ran.
    @discardableResult
    public func signOut(of authenticator: OAuth2Authenticator) async throws -> OAuth2Revocation {
        let signedOut = await authenticator.signOutLocally()
        let key = ObjectIdentifier(authenticator)
        failTasks(with: URLTaskError(code: .authenticationFailed, underlying: OAuth2Error.notSignedIn)) { task in
            task.attemptValues[AppliedCredentialVersions.self]?[key] != nil
        }
        let revocation = await authenticator.revocation(after: signedOut)
        try signedOut.cleared.get()
        return revocation
    }
}
