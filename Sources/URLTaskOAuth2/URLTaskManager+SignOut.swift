import Foundation
import URLTaskManager

extension URLTaskManager {
    /// Signs `authenticator` out and stops every task of this session that carries its
    /// credential or waits on it: requests held in a batch or queued for a connection with
    /// the old token never go out, requests on the network are cancelled, and each fails with a
    /// `URLTaskError` coded `URLTaskError.Code.authenticationFailed` carrying
    /// ``OAuth2Error/notSignedIn``. Requests started afterwards go without a token (and their
    /// 401 reaches the caller). Signing out through the authenticator alone leaves requests
    /// that already carry the token to go out with it.
    public func signOut(of authenticator: OAuth2Authenticator) async throws {
        try await authenticator.signOut()
        let key = ObjectIdentifier(authenticator)
        failTasks(with: URLTaskError(code: .authenticationFailed, underlying: OAuth2Error.notSignedIn)) { task in
            task.attemptValues[AppliedCredentialVersions.self]?[key] != nil
        }
    }

}
