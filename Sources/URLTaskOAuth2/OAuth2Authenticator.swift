import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The one owner of an OAuth 2.0 credential: it loads it, hands it out, renews it once for
/// everyone, and saves it.
///
/// A manager uses it through a ``BearerInterceptor`` (which applies the token to requests for
/// the authenticator's origins, renewing it first when it is about to expire) and an
/// ``OAuth2RefreshReactor`` (which renews it when a request comes back 401). Both only ask the
/// authenticator; it is an actor so that, however many requests ask at once, there is one
/// credential, one refresh in flight, and one answer.
///
/// ```swift
/// let auth = OAuth2Authenticator(
///     origins: [URL(string: "https://api.example.com")!],
///     tokenEndpoint: OAuth2TokenEndpoint(url: URL(string: "https://auth.example.com/token")!, clientID: "app"),
///     store: KeychainStore(),
///     onRefreshFailure: { _ in await MainActor.run { AppModel.shared.showSignIn() } }
/// )
/// let manager = URLTaskManager(
///     interceptors: [BearerInterceptor(authenticator: auth)],
///     reactors: [OAuth2RefreshReactor(authenticator: auth)]
/// )
/// ```
///
/// Two backends with their own tokens are two authenticators and two pairs in one manager;
/// each pair only touches its own origins, and one backend's refresh never holds the other's
/// requests:
///
/// ```swift
/// let manager = URLTaskManager(
///     interceptors: [BearerInterceptor(authenticator: api), BearerInterceptor(authenticator: media)],
///     reactors: [OAuth2RefreshReactor(authenticator: api), OAuth2RefreshReactor(authenticator: media), RetryReactor()]
/// )
/// ```
///
/// When one service's token is needed to obtain another's, sign in to both with
/// ``signIn(_:using:then:using:)``: both are stored, or neither.
///
/// **Versions.** Every change of the credential (sign-in, refresh, sign-out) increments
/// ``version``. The interceptor records on each task the version it applied; when that task
/// comes back 401 after the credential already changed, the reactor does not refresh again, the
/// task is just sent again with the current token (the "late 401" of a storm of requests that
/// all left with the old token).
///
/// **Hard cases.**
/// - A refresh that fails because the server rejected the refresh token (`invalid_grant`, see
///   ``OAuth2Error/requiresSignIn``) is final: `onRefreshFailure` is called once, and every
///   request for these origins then fails at once with the same error, without touching the
///   network, until ``signIn(_:)``. Other refusals (a 5xx, an answer that is no token, a token
///   request that timed out waiting for a hung endpoint, a client configuration error such as
///   `invalid_client`, see ``OAuth2Error/isConfigurationError``) are tried again by the first
///   request that needs a token once ``refreshBackoff`` has passed, so a fix on the server's
///   side is picked up without a relaunch; until then, requests that need a refresh fail at
///   once with the same error, without a token request (an endpoint failing fast would
///   otherwise be asked once per arriving request).
/// - A token endpoint that cannot be reached at all (the connection is refused or lost, its
///   host cannot be resolved, the device is offline: `URLError` `cannotConnectToHost`,
///   `cannotFindHost`, `dnsLookupFailed`, `notConnectedToInternet`, `networkConnectionLost`; or
///   it closed the connection before a byte of an answer, a `badServerResponse` the token
///   request tells apart from an answer that could not be read) is an outage, not a refusal: it starts no back-off, and the requests that need the token are
///   sent with the credential held (see ``validCredential()``), to meet the outage as any
///   request does. With an `OfflineHold` in the stack they are held while their host is down
///   and sent again, with a token refreshed once, when it answers; without one they fail with
///   the `URLError`. The first request after the endpoint is back refreshes: token lifetime
///   2 s, backend and token endpoint down 2 s from the expiry, the three GETs made meanwhile and
///   GETs 0.5 s and 1.5 s after the return all end 200 with one refresh (they failed with the
///   stale `URLError` until the back-off ended).
/// - `onRefreshFailure` runs on a task of its own and nobody waits for it: the requests
///   waiting for the refresh fail as soon as the token endpoint's answer arrives, even while the
///   hook is still showing a sign-in screen. It is called once per failure episode: at the
///   first failed refresh after a success or a sign-in (an unreachable endpoint included:
///   once, however many requests try it during the outage), and again only if a later one in
///   the same episode requires signing in (see `RefreshFailureStateMachine`).
/// - Signing in or out while a refresh is in flight wins: the refresh's result is dropped.
/// - Writes to the store happen one at a time, in the order of the changes they record, so the
///   store ends up holding what the last change made even when a slow `save` (a Keychain write)
///   is overtaken. Once ``signOut()`` returns, the store is empty and no refresh begun before it
///   can store or apply a credential: a refresh's save that is still under way is waited for
///   and then cleared, and one that has not started yet is skipped. Likewise a ``signIn(_:)``
///   overtaking a refresh's save is what the store keeps.
/// - A refreshed credential is made current before it is saved: the server may have rotated the
///   refresh token, making the old one useless. If saving fails, requests still use the new
///   credential and `onRefreshFailure` hears the store's error, because at the next launch the
///   user will have to sign in again.
/// - A token living shorter than ``refreshLeeway`` would be renewed by the first request after
///   every sign-in and every refresh. The leeway is therefore at most a quarter of the token's
///   lifetime, when its ``OAuth2Credential/issuedAt`` says what that is (the kit's token
///   requests set it): a 3 s token is renewed 2.25 s after it was issued. A credential of
///   unknown lifetime that this authenticator just refreshed is renewed early only once it has
///   actually expired.
/// - Authenticators sharing a store (processes sharing a ``FileCredentialStore``: see
///   ``SharedCredentialStore``) renew under the store's lock, read the store first and adopt
///   what another one saved, and read it again after a refusal: one token request per expiry,
///   no refresh token sent twice. The lock is waited for as long as another holder's refresh
///   may run (the token endpoint's `timeout` plus its `lateAnswerLimit`, a minute with your own
///   `refresh`).
/// - A refresh that has started runs to its end even if every request waiting for it is
///   cancelled or gave up: the new token is still worth keeping, and cancelling a rotation
///   half-way could lose the new refresh token (a server that processed the grant has already
///   made the old one invalid). The requests waiting for it fail with `URLError.timedOut` after
///   ``OAuth2TokenEndpoint/timeout``, but its answer is read on for
///   ``OAuth2TokenEndpoint/lateAnswerLimit`` more and stored when it arrives; meanwhile a
///   request that needs a refresh waits for that one (again at most `timeout`) instead of
///   sending the old refresh token. With your own `refresh`, nothing bounds it but the
///   ``OAuth2RefreshReactor`` run's timeout, which cancels it.
public actor OAuth2Authenticator {
    /// Obtains a new credential from the current one.
    public typealias Refresh = @Sendable (OAuth2Credential) async throws -> OAuth2Credential

    /// How long before its expiry a token is renewed instead of sent: at most, since a token's
    /// own lifetime bounds it to a quarter of that lifetime
    /// (``OAuth2Credential/refreshLeeway(upTo:)``).
    public nonisolated let refreshLeeway: Duration

    /// How long after a refused refresh (one that does not require signing in: a 5xx, an answer
    /// that is no token, a timeout, a configuration error) requests that need a new token fail
    /// at once with that failure's error instead of asking the token endpoint again. The first
    /// request after it tries again.
    ///
    /// A token endpoint that could not be reached at all (no connection: refused, lost,
    /// unresolvable host, offline; or closed before a byte of an answer) starts no back-off: that says nothing about what the
    /// endpoint would answer, and the first request after it is back must reach it. Those
    /// requests go out with the credential held instead (see ``validCredential()``).
    public nonisolated let refreshBackoff: Duration

    /// The ``refreshBackoff`` unless you pass another: long enough that a storm of requests
    /// against a failing token endpoint costs one token request, short enough that a
    /// recovered endpoint is used again within seconds.
    public static let defaultRefreshBackoff: Duration = .seconds(5)

    private nonisolated let origins: Set<URLOrigin>
    /// The origins' descriptions (`scheme://host:port`), which a request's origin is compared
    /// with as a string (``URLOrigin/description(of:)`` reads it without parsing a plainly spelled
    /// URL). An array: an app has one or a few origins, and comparing a string is cheaper than
    /// hashing it.
    private nonisolated let originKeys: [String]
    private nonisolated let tokenRequestMatcher: @Sendable (URLRequest) -> Bool
    private let refresher: Refresh
    /// Revokes a credential signed out of (RFC 7009), if the app configured a revocation: the
    /// token endpoint's ``OAuth2TokenEndpoint/revocationURL``, or its own `revoke`.
    nonisolated let revoker: Revoke?
    /// How long a request waits for a refresh in flight before it fails with `URLError.timedOut`
    /// (the token endpoint's `timeout`), and the endpoint that error names; `nil` (your own
    /// `refresh`) waits for the refresh's end. The refresh itself runs on (see the hard cases).
    private let refreshWait: (limit: Duration, tokenEndpoint: URL)?
    private let store: any CredentialStore
    /// How long a refresh waits for a ``SharedCredentialStore``'s lock: as long as another
    /// holder's refresh may run (the token endpoint's `timeout` plus its `lateAnswerLimit`), a
    /// minute with your own `refresh`.
    private let lockWait: Duration
    private let onRefreshFailure: (@Sendable (any Error) async -> Void)?

    private var credential: OAuth2Credential? { didSet { publish() } }
    private var loaded = false { didSet { publish() } }
    private var loading: Task<OAuth2Credential?, any Error>?
    /// The one refresh in flight. This single flight is the authenticator's own, beside the
    /// engine's (one run of `OAuth2RefreshReactor` for every task of a manager that got a 401),
    /// because refreshes start where no engine run is: the `BearerInterceptor` renewing a token
    /// about to expire, the app's ``refresh()``, and every manager that shares this
    /// authenticator (each has its own engine). Both are needed; neither decides whether a 401
    /// is late for a manager's tasks, which only that manager's engine does.
    private var refreshing: Task<OAuth2Credential, any Error>? { didSet { publish() } }
    /// The version a refresh produced last: it is not renewed early (see the hard cases).
    private var refreshedVersion: Int? { didSet { publish() } }
    /// Failed refreshes: the back-off after a temporary failure, a rejection that only a
    /// sign-in ends, and whether the failure hook heard of the current episode.
    private var failures: RefreshFailureStateMachine { didSet { publish() } }
    /// The store write enqueued last. Each write starts once the one before it has ended, so
    /// the store's calls land in the order of the changes they record (see the hard cases).
    private var lastWrite: Task<Void, any Error>?

    /// The credential version: incremented on every change of the credential (sign-in, refresh,
    /// sign-out). Readable without awaiting, because the manager's engine compares it with the
    /// version a request was sent with when deciding whether a 401 is late (see
    /// ``OAuth2RefreshReactor/credentialVersion(of:)``).
    public nonisolated var version: Int { published.value.version }
    private var storedVersion = 0 { didSet { publish() } }
    /// What the actor's state says about the credential, readable without awaiting (see
    /// ``credentialWithoutWaiting()``); republished on every change of that state.
    private nonisolated let published = PublishedCredential()

    /// An authenticator that renews its credential with the refresh-token grant (RFC 6749 §6).
    ///
    /// - Parameters:
    ///   - origins: The scheme, host and port of every API the token is for, such as
    ///     `https://api.example.com`. The token is never sent anywhere else: origins compare as
    ///     `URLOrigin`s, so `https://api.example.com` covers neither `http://api.example.com` (the
    ///     token would cross the network in clear), `https://api.example.com:8443`, nor
    ///     `https://evil.api.example.com`.
    ///   - tokenEndpoint: Where refresh tokens are exchanged. Its requests are never given the
    ///     bearer token nor held behind a refresh, even if they go through the manager.
    ///   - store: Where the credential is kept between launches. Loaded lazily, on first use.
    ///   - refreshLeeway: Renew a token that expires within this long instead of sending it
    ///     (at most a quarter of the token's lifetime, when it is known).
    ///   - refreshBackoff: After a refused refresh, requests that need a new token fail with its
    ///     error for this long without asking the token endpoint (``defaultRefreshBackoff``); an
    ///     endpoint that could not be reached starts none.
    ///   - onRefreshFailure: Called once per failure episode (and when a refreshed credential
    ///     could not be saved): the place to show a sign-in screen. It runs on a task of its own;
    ///     the requests waiting for the refresh fail without waiting for it, so it may take as
    ///     long as the user does. Check ``OAuth2Error/requiresSignIn`` before asking the user to
    ///     sign in: a configuration error or an unreachable server is not the user's to fix.
    public init(
        origins: [URL],
        tokenEndpoint: OAuth2TokenEndpoint,
        store: any CredentialStore = InMemoryCredentialStore(),
        refreshLeeway: Duration = .seconds(60),
        refreshBackoff: Duration = OAuth2Authenticator.defaultRefreshBackoff,
        onRefreshFailure: (@Sendable (any Error) async -> Void)? = nil
    ) {
        self.init(
            origins: origins, store: store, refreshLeeway: refreshLeeway, refreshBackoff: refreshBackoff,
            isTokenRequest: { tokenEndpoint.matches($0) }, onRefreshFailure: onRefreshFailure,
            refreshWait: tokenEndpoint.timeout.map { ($0, tokenEndpoint.url) },
            lockWait: (tokenEndpoint.timeout ?? OAuth2TokenEndpoint.defaultTimeout).clampedWait + tokenEndpoint.lateAnswerLimit,
            revoke: Self.revoker(for: tokenEndpoint),
            refresh: { try await tokenEndpoint.refreshAllowingLateAnswer($0) }
        )
    }

    /// An authenticator with your own renewal: another grant, another token format, a login
    /// chain (see ``signIn(_:using:then:using:)``).
    ///
    /// Throw an ``OAuth2Error`` whose ``OAuth2Error/requiresSignIn`` is `true` from `refresh`
    /// when only a new sign-in can help; any other error is treated as temporary.
    ///
    /// - Parameters:
    ///   - origins: The scheme, host and port of every API the token is for. The token is never
    ///     sent anywhere else.
    ///   - store: Where the credential is kept between launches. Loaded lazily, on first use.
    ///   - refreshLeeway: Renew a token that expires within this long instead of sending it
    ///     (at most a quarter of the token's lifetime, when it is known).
    ///   - refreshBackoff: After a failed refresh, requests that need a new token fail with its
    ///     error for this long without calling `refresh` (``defaultRefreshBackoff``); a
    ///     `refresh` that throws a `URLError` saying it could not connect (see
    ///     ``refreshBackoff``) starts none.
    ///   - isTokenRequest: The requests `refresh` sends, if it sends them through a manager
    ///     that uses this authenticator: they are then neither given the token nor held.
    ///   - onRefreshFailure: Called once per failure episode, on a task of its own, as for
    ///     ``init(origins:tokenEndpoint:store:refreshLeeway:refreshBackoff:onRefreshFailure:)``.
    ///   - revoke: Revokes a credential ``signOut()`` dropped, after the local sign-out (for
    ///     example ``OAuth2TokenEndpoint/revoke(_:)``); `nil` sends nothing
    ///     (``OAuth2Revocation/notConfigured``).
    ///   - refresh: Returns a new credential for the current one.
    public init(
        origins: [URL],
        store: any CredentialStore = InMemoryCredentialStore(),
        refreshLeeway: Duration = .seconds(60),
        refreshBackoff: Duration = OAuth2Authenticator.defaultRefreshBackoff,
        isTokenRequest: @escaping @Sendable (URLRequest) -> Bool = { _ in false },
        onRefreshFailure: (@Sendable (any Error) async -> Void)? = nil,
        revoke: Revoke? = nil,
        refresh: @escaping Refresh
    ) {
        self.init(
            origins: origins, store: store, refreshLeeway: refreshLeeway, refreshBackoff: refreshBackoff, isTokenRequest: isTokenRequest,
            onRefreshFailure: onRefreshFailure, refreshWait: nil, lockWait: .seconds(60), revoke: revoke, refresh: refresh)
    }

    private init(
        origins: [URL], store: any CredentialStore, refreshLeeway: Duration, refreshBackoff: Duration,
        isTokenRequest: @escaping @Sendable (URLRequest) -> Bool, onRefreshFailure: (@Sendable (any Error) async -> Void)?,
        refreshWait: (limit: Duration, tokenEndpoint: URL)?, lockWait: Duration, revoke: Revoke?, refresh: @escaping Refresh
    ) {
        self.refreshWait = refreshWait
        self.lockWait = lockWait
        self.revoker = revoke
        self.origins = Set(origins.compactMap { URLOrigin($0) })
        self.originKeys = self.origins.map(\.description)
        self.store = store
        self.refreshLeeway = refreshLeeway
        self.refreshBackoff = refreshBackoff
        self.failures = RefreshFailureStateMachine(backoff: refreshBackoff)
        self.tokenRequestMatcher = isTokenRequest
        self.onRefreshFailure = onRefreshFailure
        self.refresher = refresh
    }

    // MARK: Questions the interceptor and the reactor ask

    /// Whether the token may be sent to `url`: its scheme, host and port are one of the origins.
    public nonisolated func authorizes(_ url: URL) -> Bool {
        URLOrigin.description(of: url).map(originKeys.contains) ?? false
    }

    /// Whether `request` is one of the authenticator's own token requests.
    public nonisolated func isTokenRequest(_ request: URLRequest) -> Bool {
        tokenRequestMatcher(request)
    }

    /// The credential to send now and its version, or `nil` when signed out.
    ///
    /// Waits for a refresh in flight rather than return the token it replaces, and renews a
    /// token that expires within ``refreshLeeway`` first (one refresh for all callers).
    /// Throws the refresh's error, or the rejection that ended the session.
    ///
    /// A refresh that could not connect to the token endpoint (its host refused the
    /// connection, could not be resolved, or the device is offline) is not thrown: the
    /// credential held, stale or about to be, is returned, so the request goes out and meets the
    /// outage as any request to an unreachable host does. If its own host is down too, it fails
    /// with that host's `URLError`, which an `OfflineHold` holds until a probe reaches the host
    /// and then sends again (through the ``BearerInterceptor``, which refreshes then, once for
    /// every request sent again); if its host is up, the server answers 401 and the
    /// ``OAuth2RefreshReactor`` tries the refresh again. Such a failure starts no
    /// ``refreshBackoff``: the first request after the endpoint answers again refreshes.
    public func validCredential() async throws -> (credential: OAuth2Credential, version: Int)? {
        try await ensureLoaded()
        do {
            if let refreshing { _ = try await wait(for: refreshing) }
            try throwIfRejected()
            guard let credential else { return nil }
            if credential.isExpired(within: leeway(for: credential)) {
                try throwIfBackingOff()
                _ = try await wait(for: startRefresh())
            }
        } catch {
            // The token endpoint could not be reached: send what is held (see above).
            guard RefreshFailureStateMachine.isUnreachable(error), failures.rejection == nil, credential != nil else { throw error }
        }
        return self.credential.map { ($0, storedVersion) }
    }

    /// The credential to send now and its version, when that needs no waiting: it is loaded, no
    /// refresh is in flight, no rejection stands, and it does not expire within the leeway.
    /// `.some(nil)` means signed out; `nil` means ask ``validCredential()``. What the
    /// ``BearerInterceptor`` reads on every request, without a hop onto this actor.
    public nonisolated func credentialWithoutWaiting() -> (credential: OAuth2Credential, version: Int)?? {
        let snapshot = published.value
        guard snapshot.settled else { return nil }
        guard let credential = snapshot.credential else { return .some(nil) }
        guard !credential.isExpired(within: snapshot.leeway) else { return nil }
        return (credential, snapshot.version)
    }

    /// ``credentialWithoutWaiting()`` as the `Authorization` value to send (`Bearer <token>`),
    /// made once per credential change instead of once per request.
    nonisolated func authorizationWithoutWaiting() -> (authorization: String, version: Int)?? {
        let snapshot = published.value
        guard snapshot.settled else { return nil }
        guard let credential = snapshot.credential, let authorization = snapshot.authorization else { return .some(nil) }
        guard !credential.isExpired(within: snapshot.leeway) else { return nil }
        return (authorization, snapshot.version)
    }

    /// Renews the credential because a request sent with version `sentVersion` was refused,
    /// unless it has changed since (then the request should simply be sent again) or a refresh
    /// is already in flight (then this waits for it).
    ///
    /// Why this checks the version itself rather than asking the manager's engine, which decides
    /// whether an outcome is late for its own reactor runs
    /// (`ReactorRunStateMachine.lateness(of:)`): one authenticator serves every manager built
    /// with it, its `BearerInterceptor`'s proactive refresh and your own calls, and its versions
    /// are the credential's, changed by stores and other processes too; an engine knows only its
    /// own runs. So the single flight per credential is here (its refresh in flight), and an
    /// engine's run is one waiter of it: the engine keeps the tasks of its manager together
    /// behind one run, this keeps every run, manager and caller behind one refresh. The engine asks the
    /// authenticator through ``OAuth2RefreshReactor``'s reported versions, so both compare the
    /// same numbers the same way (the engine's `isLate(sent:current:)`).
    ///
    /// Throws the refresh's error, a token endpoint that could not be reached included (the
    /// refused request cannot be sent again with the token the server just refused); that
    /// failure starts no ``refreshBackoff``, so the next 401 tries again.
    public func refresh(ifUnchangedSince sentVersion: Int) async throws {
        try await ensureLoaded()
        if let refreshing {
            _ = try await wait(for: refreshing)
            return
        }
        guard sentVersion == storedVersion else { return }
        try throwIfBackingOff()
        _ = try await wait(for: startRefresh())
    }

    /// Called when the refresh reactor's run timed out. A refresh through a token endpoint runs
    /// on, bounded by the endpoint's `timeout` plus its `lateAnswerLimit`: its answer may carry
    /// a rotated refresh token the server already holds as the only valid one. A refresh of your
    /// own `refresh`, which nothing else bounds, is cancelled: its `refresh` call is cancelled,
    /// and the refresh fails (a failure like any other: back-off, hook).
    func abandonRefresh() {
        guard refreshWait == nil else { return }
        refreshing?.cancel()
    }

    /// The credential `refresh` produces, waited for at most the token endpoint's `timeout`
    /// (then `URLError.timedOut`, the refresh running on), or for as long as it takes with your
    /// own `refresh`.
    private func wait(for refresh: Task<OAuth2Credential, any Error>) async throws -> OAuth2Credential {
        guard let refreshWait else { return try await refresh.value }
        return try await RefreshWait.value(of: refresh, within: refreshWait.limit, tokenEndpoint: refreshWait.tokenEndpoint)
    }

    // MARK: The app's side

    /// The current credential, as loaded or last set, without renewing it.
    public func currentCredential() async throws -> OAuth2Credential? {
        try await ensureLoaded()
        return credential
    }

    /// Renews the credential now (or waits for the refresh in flight) and returns it.
    ///
    /// The app's own call is not held back by ``refreshBackoff`` (a "try again" button should
    /// try again); a standing rejection still throws until ``signIn(_:)``.
    @discardableResult
    public func refresh() async throws -> OAuth2Credential {
        try await ensureLoaded()
        if let refreshing { return try await wait(for: refreshing) }
        try throwIfRejected()
        return try await wait(for: startRefresh())
    }

    /// Saves `credential` and makes it current. Nothing changes if the store fails.
    ///
    /// A save of a refreshed credential still under way is waited for first, so it cannot land
    /// after this one and leave the store holding the credential this sign-in replaced.
    public func signIn(_ credential: OAuth2Credential) async throws {
        try await enqueueWrite { [self, store] in
            try await store.save(credential)
            await replace(with: credential)
        }.value
    }

    /// Forgets the credential, here and in the store, then revokes its tokens at the server
    /// (RFC 7009) if a revocation is configured. Requests are then sent without a token.
    ///
    /// The local sign-out comes first and always happens: the credential is forgotten at once;
    /// the store is cleared after any save already under way (a refresh that finished just
    /// before), so when this returns the store is empty and no earlier refresh can put a
    /// credential back. (An authenticator that has not read its store yet reads it first, so
    /// that what it held can be revoked.)
    ///
    /// Then the credential dropped is revoked, once: with a token endpoint's
    /// ``OAuth2TokenEndpoint/revocationURL``, its refresh token and then its access token (see
    /// ``OAuth2TokenEndpoint/revoke(_:)``), within the endpoint's timeout; with your own
    /// `revoke`, whatever it does. Two sign-outs at the same time revoke once: the second finds
    /// nothing held (``OAuth2Revocation/nothingToRevoke``). A failed revocation (an answer other
    /// than 200, a timeout, an unreachable server) does not undo the sign-out: it is the
    /// returned ``OAuth2Revocation/failed(_:)``. The revocation runs to its end even if the
    /// caller's task is cancelled meanwhile.
    ///
    /// Throws only the store's error when it could not be cleared, after the revocation ran (the
    /// tokens left in the store are then revoked ones).
    @discardableResult
    public func signOut() async throws -> OAuth2Revocation {
        let signedOut = await signOutLocally()
        let revocation = await revocation(after: signedOut)
        try signedOut.cleared.get()
        return revocation
    }

    /// The local half of a sign-out: the credential forgotten and the store cleared (after the
    /// writes already enqueued), returning what was dropped for the revocation.
    func signOutLocally() async -> SignedOut {
        var loadError: (any Error)?
        if !loaded {
            do { try await ensureLoaded() } catch { loadError = error }
        }
        let held = credential
        replace(with: nil)
        guard let shared = store as? any SharedCredentialStore else {
            let cleared = await enqueueWrite { [store] in try await store.clear() }.result
            return SignedOut(credential: held, loadError: held == nil ? loadError : nil, cleared: cleared)
        }
        // A shared store is cleared under its lock, once another holder's refresh has saved
        // what it got: the credential revoked is then the newest one, and no refresh in flight
        // elsewhere can put a credential back after the clear.
        let outcome = try? await shared.withRefreshLock(waitingAtMost: lockWait) {
            let stored = await self.reread()
            let cleared = await self.enqueueWrite { [store] in try await store.clear() }.result
            return (stored: stored, cleared: cleared)
        }
        let newest = (outcome?.stored ?? nil) ?? held
        let cleared: Result<Void, any Error>
        if let outcome {
            cleared = outcome.cleared
        } else {
            cleared = await enqueueWrite { [store] in try await store.clear() }.result
        }
        return SignedOut(credential: newest, loadError: newest == nil ? loadError : nil, cleared: cleared)
    }

    // MARK: Internals

    /// Runs `write` once every store write enqueued before it has ended, whether it succeeded or
    /// not. The order of the store's calls is then the order of this actor's changes, which a
    /// store that is not an actor (a Keychain wrapper) could not promise on its own.
    private func enqueueWrite(_ write: @escaping @Sendable () async throws -> Void) -> Task<Void, any Error> {
        let previous = lastWrite
        let task = Task {
            _ = await previous?.result
            try await write()
        }
        lastWrite = task
        return task
    }

    /// Saves a credential this actor made current at `version`, unless a sign-in or sign-out
    /// has replaced it before the write's turn came: that change's own write wins.
    private func save(_ credential: OAuth2Credential, madeCurrentAt current: Int) async throws {
        try await enqueueWrite { [self, store] in
            guard version == current else { return }
            try await store.save(credential)
        }.value
    }

    /// Tells `onRefreshFailure` on a task of its own: the requests waiting for the refresh
    /// must not wait for a hook that may be showing a sign-in screen.
    private func reportFailure(_ error: any Error) {
        guard let onRefreshFailure else { return }
        Task { await onRefreshFailure(error) }
    }

    /// Republishes the state ``credentialWithoutWaiting()`` and ``version`` read.
    private func publish() {
        let rejected = failures.rejection != nil
        published.set(
            PublishedCredential.Snapshot(
                credential: credential,
                authorization: credential.map { "Bearer " + $0.accessToken },
                version: storedVersion,
                settled: loaded && refreshing == nil && !rejected,
                leeway: leeway(for: credential)
            ))
    }

    private func replace(with credential: OAuth2Credential?) {
        self.credential = credential
        loaded = true
        storedVersion += 1
        failures.credentialReplaced()
    }

    private func throwIfRejected() throws {
        if let rejection = failures.rejection { throw rejection }
    }

    /// Throws the standing failure's error if no refresh may start now: a rejection, or a
    /// temporary failure within ``refreshBackoff``.
    private func throwIfBackingOff() throws {
        if case .fail(let error) = failures.mayStartRefresh(at: .now) { throw error }
    }

    /// Loads the stored credential once; concurrent first callers share the load.
    private func ensureLoaded() async throws {
        guard !loaded else { return }
        let task = loading ?? Task { [store] in try await store.load() }
        loading = task
        do {
            let stored = try await task.value
            if !loaded {
                credential = stored
                loaded = true
            }
            loading = nil
        } catch {
            if loading == task { loading = nil }
            throw error
        }
    }

    private func startRefresh() -> Task<OAuth2Credential, any Error> {
        if let refreshing { return refreshing }
        let task = Task { try await self.performRefresh() }
        refreshing = task
        return task
    }

    /// The body of the one refresh in flight; every caller awaits its task. With a
    /// ``SharedCredentialStore`` it runs under the store's lock (see ``refreshSharing(_:startVersion:)``).
    private func performRefresh() async throws -> OAuth2Credential {
        let startVersion = storedVersion
        guard let held = credential else { throw refreshFailed(OAuth2Error.notSignedIn, startVersion: startVersion) }
        guard let shared = store as? any SharedCredentialStore else {
            let refreshed: OAuth2Credential
            do {
                refreshed = try await refresher(held)
            } catch {
                throw refreshFailed(error, startVersion: startVersion)
            }
            return try await refreshSucceeded(refreshed, startVersion: startVersion)
        }
        let outcome: Result<OAuth2Credential, any Error>
        do {
            outcome = try await shared.withRefreshLock(waitingAtMost: lockWait) {
                do {
                    return .success(try await self.refreshSharing(held, startVersion: startVersion))
                } catch {
                    return .failure(error)
                }
            }
        } catch {
            // The lock itself failed (its file refused, a system call): a failed refresh.
            throw refreshFailed(error, startVersion: startVersion)
        }
        return try outcome.get()
    }

    /// A refresh holding a shared store's lock: the store is read first, and a credential
    /// another holder saved is adopted instead of renewing the one held (renewed itself if it is
    /// about to expire, with its refresh token, the one the server still accepts); a refusal
    /// makes it read the store again, and a credential saved meanwhile by a holder that did not
    /// wait for the lock is adopted instead of failing. The new credential is saved before the
    /// lock is released. See ``SharedCredentialStore``.
    private func refreshSharing(_ held: OAuth2Credential, startVersion: Int) async throws -> OAuth2Credential {
        var base = held
        var version = startVersion
        if let stored = await reread(), storedVersion == version, Self.differ(stored, held) {
            guard let stored else {
                // Another holder signed out: so is this one.
                replace(with: nil)
                throw refreshFailed(OAuth2Error.notSignedIn, startVersion: startVersion)
            }
            replace(with: stored)
            version = storedVersion
            guard stored.isExpired(within: leeway(for: stored)) else {
                refreshing = nil
                return stored
            }
            base = stored
        }
        let refreshed: OAuth2Credential
        do {
            refreshed = try await refresher(base)
        } catch {
            if (error as? OAuth2Error)?.requiresSignIn == true, let stored = await reread(), let newer = stored,
                storedVersion == version, Self.differ(newer, base)
            {
                // Renewed meanwhile by a holder that did not wait for the lock.
                replace(with: newer)
                refreshing = nil
                return newer
            }
            throw refreshFailed(error, startVersion: version)
        }
        return try await refreshSucceeded(refreshed, startVersion: version)
    }

    /// The store's credential once this authenticator's writes have landed (`.some(nil)`:
    /// signed out), or `nil` when it could not be read: the refresh then goes on with the
    /// credential held.
    private func reread() async -> OAuth2Credential?? {
        _ = await lastWrite?.result
        do {
            return .some(try await store.load())
        } catch {
            return nil
        }
    }

    /// Whether `stored` is another credential than `held`: other tokens, or signed out.
    private static func differ(_ stored: OAuth2Credential?, _ held: OAuth2Credential) -> Bool {
        stored?.accessToken != held.accessToken || stored?.refreshToken != held.refreshToken
    }

    /// A refresh begun at `startVersion` failed with `error`: the back-off or the rejection it
    /// starts, the failure hook, and the error to throw.
    private func refreshFailed(_ error: any Error, startVersion: Int) -> any Error {
        refreshing = nil
        guard storedVersion == startVersion else {
            // Signed in or out meanwhile: the failure belongs to a credential that is gone.
            reportFailure(error)
            return error
        }
        let requiresSignIn = (error as? OAuth2Error)?.requiresSignIn == true
        // A connectivity failure starts no back-off: the state machine tells them apart.
        if case .report(let first) = failures.refreshFailed(error, requiresSignIn: requiresSignIn, at: .now) {
            reportFailure(first)
        }
        return error
    }

    /// A refresh begun at `startVersion` produced `refreshed`: made current and saved, unless
    /// a sign-in or sign-out came meanwhile (that credential wins).
    private func refreshSucceeded(_ refreshed: OAuth2Credential, startVersion: Int) async throws -> OAuth2Credential {
        refreshing = nil
        if storedVersion == startVersion { failures.refreshSucceeded() }
        guard storedVersion == startVersion else {
            // Signed in or out meanwhile: that credential wins.
            guard let credential else { throw OAuth2Error.notSignedIn }
            return credential
        }
        replace(with: refreshed)
        refreshedVersion = storedVersion
        do {
            try await save(refreshed, madeCurrentAt: storedVersion)
        } catch {
            reportFailure(error)
        }
        return refreshed
    }

    /// How long before its expiry `credential` is renewed: ``refreshLeeway``, at most a quarter
    /// of the token's lifetime when it is known (``OAuth2Credential/refreshLeeway(upTo:)``). A
    /// credential of unknown lifetime that this authenticator just refreshed gets none: the
    /// endpoint may issue tokens living shorter than the leeway (see the hard cases).
    private func leeway(for credential: OAuth2Credential?) -> Duration {
        guard let credential else { return .zero }
        if credential.issuedAt == nil, storedVersion == refreshedVersion { return .zero }
        return credential.refreshLeeway(upTo: refreshLeeway)
    }
}

/// The authenticator's state as the bearer interceptor needs it, readable from any thread.
private final class PublishedCredential: Sendable {
    struct Snapshot {
        var credential: OAuth2Credential?
        /// `Bearer <token>` for `credential`.
        var authorization: String?
        var version = 0
        /// Loaded, no refresh in flight, no rejection standing.
        var settled = false
        var leeway = Duration.zero
    }

    private let snapshot = LockedState(Snapshot())

    var value: Snapshot { snapshot.withLock { $0 } }

    func set(_ new: Snapshot) {
        snapshot.withLock { $0 = new }
    }
}

extension PublishedCredential.Snapshot: CustomReflectable {
    /// The credential as its own mirror shows it; the `Authorization` value as its scheme only.
    var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "credential": credential as Any, "authorization": authorization.map { _ in "Bearer REDACTED" } as Any,
                "version": version, "settled": settled, "leeway": leeway,
            ], displayStyle: .struct)
    }
}
