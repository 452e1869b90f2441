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

/// A ``CredentialStore`` several authenticators use at once, each in a process of its own (or
/// each with its own store value in one process): a file that command-line tools, workers or an
/// app and its helper share.
///
/// Each authenticator holds its own copy of the credential, and a server that rotates refresh
/// tokens accepts each one once. Without coordination, the first process to renew the
/// credential makes every other's refresh token useless, and their next refresh fails with
/// `invalid_grant` while the store holds a valid credential. An authenticator whose store is
/// shared therefore renews inside ``withRefreshLock(waitingAtMost:_:)``:
///
/// 1. it reads the store again first, and adopts a credential another holder saved instead of
///    renewing its own (no token request when the stored one is still good; a refresh with the
///    stored refresh token, the only one the server still accepts, when it is about to expire);
///    a store emptied by another holder's sign-out signs this one out too;
/// 2. it saves the new credential before the lock is released, so whoever waited reads it;
/// 3. after a refusal (`invalid_grant`) it reads the store once more and adopts a credential
///    with another refresh token, saved by a holder that renewed without the lock (one that
///    waited past the timeout, or an older version of the app), instead of failing.
///
/// ``FileCredentialStore`` is one (an `flock` beside the file). ``InMemoryCredentialStore`` and
/// `KeychainCredentialStore` are not: one process, one authenticator. A fleet of machines shares
/// its credential through `URLTaskRedis`'s `FleetCredential`, whose refresh coordinates itself.
public protocol SharedCredentialStore: CredentialStore {
    /// Runs `body` while no other authenticator sharing this store runs its own, waiting at
    /// most `timeout` for them; past it, `body` runs anyway: a holder stopped in a debugger or
    /// by a signal must not stop every other one (and step 3 above covers the race).
    ///
    /// The lock must not outlive its holder: a process that crashes or is killed while holding
    /// it must leave it free (an `flock` does; a lock file that is merely present does not).
    func withRefreshLock<T: Sendable>(waitingAtMost timeout: Duration, _ body: @Sendable () async throws -> T) async throws -> T
}
