import URLTaskManager
/// A ``CredentialStore`` that keeps the credential in memory only: nothing survives a relaunch.
///
/// The default store, and the one to use in tests (it can be pre-filled, and read back to see
/// what was saved).
public actor InMemoryCredentialStore: CredentialStore {
    private var credential: OAuth2Credential?

    /// A store holding `credential` (or nothing).
    public init(_ credential: OAuth2Credential? = nil) {
        self.credential = credential
    }

    public func load() async throws -> OAuth2Credential? {
        credential
    }

    public func save(_ credential: OAuth2Credential) async throws {
        self.credential = credential
    }

    public func clear() async throws {
        credential = nil
    }
}
