import URLTaskManager
/// Where an ``OAuth2Authenticator`` keeps its credential between launches.
///
/// The authenticator calls ``load()`` once, lazily, before the first request that needs a
/// token, and ``save(_:)`` after every sign-in and every refresh. Saving after a refresh
/// matters: a server that rotates refresh tokens invalidates the old one as soon as it issues
/// the new one, so a store that kept the old one would force a new sign-in at the next launch.
///
/// The authenticator writes one at a time: a ``save(_:)`` or ``clear()`` starts only once
/// the previous one has returned, in the order of the changes they record, so a store that is not
/// an actor needs no lock of its own to end up holding the latest credential. For the same
/// reason a store must not call back into its authenticator's ``OAuth2Authenticator/signIn(_:)``
/// or ``OAuth2Authenticator/signOut()``: that call would wait for the very write it is made from.
///
/// The default is ``InMemoryCredentialStore``. ``FileCredentialStore`` keeps the credential in a
/// file only its owner can read, replaced atomically; on Apple platforms `KeychainCredentialStore`
/// keeps it in the Keychain. A store of your own is three methods:
///
/// ```swift
/// struct KeychainStore: CredentialStore {
///     func load() async throws -> OAuth2Credential? {
///         try Keychain.data(for: "api").map { try JSONDecoder().decode(OAuth2Credential.self, from: $0) }
///     }
///     func save(_ credential: OAuth2Credential) async throws {
///         try Keychain.set(JSONEncoder().encode(credential), for: "api")
///     }
///     func clear() async throws { try Keychain.remove("api") }
/// }
/// ```
public protocol CredentialStore: Sendable {
    /// The stored credential, or `nil` when signed out.
    func load() async throws -> OAuth2Credential?
    /// Replaces the stored credential.
    func save(_ credential: OAuth2Credential) async throws
    /// Forgets the stored credential.
    func clear() async throws
}
