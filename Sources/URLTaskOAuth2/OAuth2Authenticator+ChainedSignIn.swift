import URLTaskManager
extension OAuth2Authenticator {
    /// Signs in to two services where the second's token is obtained with the first's (a token
    /// exchange, an SSO hop): both credentials are stored, or neither is.
    ///
    /// Nothing is stored until both tokens are in hand, so if the second service refuses, the
    /// first one's new token is dropped too: the app is never left signed in to half of a login
    /// that has to be started over. If storing the second credential fails after the first was
    /// stored, the first authenticator is put back as it was.
    ///
    /// ```swift
    /// try await OAuth2Authenticator.signIn(
    ///     identity, using: { try await identityEndpoint.signIn(username: user, password: password) },
    ///     then: payments, using: { identityToken in try await paymentsEndpoint.exchange(identityToken) }
    /// )
    /// ```
    ///
    /// Longer chains nest the same way: obtain every credential first, then sign in to each.
    public static func signIn(
        _ first: OAuth2Authenticator,
        using obtainFirst: @Sendable () async throws -> OAuth2Credential,
        then second: OAuth2Authenticator,
        using obtainSecond: @Sendable (OAuth2Credential) async throws -> OAuth2Credential
    ) async throws {
        let firstCredential = try await obtainFirst()
        let secondCredential = try await obtainSecond(firstCredential)
        let previous = try await first.currentCredential()
        try await first.signIn(firstCredential)
        do {
            try await second.signIn(secondCredential)
        } catch {
            if let previous {
                try? await first.signIn(previous)
            } else {
                // Put back as it was: signed out locally, nothing revoked (as before revocation).
                _ = await first.signOutLocally()
            }
            throw error
        }
    }
}
