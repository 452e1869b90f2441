import Foundation
import URLTaskManager
import URLTaskOAuth2

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One OAuth 2.0 credential for a fleet of processes, kept in Redis, renewed once for the
/// whole fleet.
///
/// Each process's `OAuth2Authenticator` already refreshes once for all of that process's
/// requests. Across processes that is not enough: with rotating refresh tokens (RFC 6749 §6,
/// RFC 9700) every process that refreshes on its own invalidates the others' refresh token, and
/// all but one get `invalid_grant`. A fleet credential gives the authenticators of every process
/// one ``store`` (Redis) and one ``refresh`` that runs once per fleet:
///
/// ```swift
/// let fleet = FleetCredential(
///     client: RedisClient(configuration: .init(endpoint: .tcp(host: "redis", port: 6379), username: "api", password: secret)),
///     configuration: .init(keyPrefix: "urltask:cred:api"),
///     tokenEndpoint: endpoint)
/// let auth = fleet.makeAuthenticator(origins: [URL(string: "https://api.example.com")!])
/// ```
///
/// **One refresh.** The process that needs a new token takes a lease in Redis (`SET NX PX`,
/// expiring after ``Configuration/leaseTimeToLive``) and with it a fencing number, in one Lua
/// script that also returns the stored credential. If another process renewed it already, that
/// credential is used and the token endpoint is not asked (the script then takes no lease: one
/// round trip for every process but the one that refreshes, which makes two, the lease and the
/// write; counted in URLTaskManager's Performance article, "A fleet on Redis"); otherwise the
/// holder asks, writes the answer with a compare-and-set that refuses a fence older than the
/// stored one (a holder whose lease expired while it waited can never overwrite a newer
/// credential), announces it on a pub/sub channel and releases the lease if it still holds it.
/// The other processes wait for that announcement (not polling), at most as long as the lease
/// lives; if it expired without a new credential (its holder died), one of them takes it over.
///
/// **The refresh token is one fleet-wide fact.** The lease marks the refresh token its holder
/// is about to send; a successor that finds the mark (the holder died, perhaps after the server
/// rotated the token) does what ``Configuration/refreshTokenInFlightAtTakeover`` says. A refused
/// refresh token (`invalid_grant`) is recorded in the record (a fingerprint, never the token)
/// unless the record holds a newer credential by then, and announced: no process sends it
/// again, and every one fails with an `OAuth2Error` that `requiresSignIn`. An announcement is a
/// hint: it makes a waiting process read the record, which decides.
///
/// **A caller that gives up** (its task is cancelled, as the `OAuth2RefreshReactor` does when
/// its run times out) stops waiting at once, but the refresh runs on to its end: a refresh token
/// the endpoint rotated is still written to Redis and kept here, and the next refresh of this
/// process takes it without a token request.
///
/// **No round trip while the token is fresh.** The authenticator keeps the credential in
/// memory; this store is read at the authenticator's first load and by refreshes only. (The
/// first load of an authenticator from ``makeAuthenticator(origins:refreshLeeway:refreshBackoff:onRefreshFailure:)``
/// also subscribes to the update channel, on a connection of its own, to hear a sign-out.)
///
/// **When Redis is unreachable** (``RedisError`` `.connectionClosed` or `.timeout`, or a reply
/// that means "not yet" such as `LOADING`), a renewal ahead of the token's expiry keeps the
/// still-valid token (``Event/keptWhileRedisAway``); an expired or refused one waits for Redis
/// up to ``Configuration/redisOutageWait`` (``Event/waitingForRedis``) and only then refreshes
/// alone (``Event/refreshedAlone``), from the newest credential it has seen, never an older one.
/// A credential the token endpoint issued, a sign-in or a sign-out that could not be written is
/// kept and written back when Redis answers again (``Event/wroteBack``), also after Redis lost
/// its data. A lone refresh that is refused waits for Redis and takes a newer credential another
/// process wrote back, if one comes. With rotating refresh tokens, two processes that both
/// refresh alone during one outage can still invalidate each other: the fleet can only
/// coordinate through Redis.
///
/// **Signing in and out.** A sign-in (the authenticator's `OAuth2Authenticator.signIn(_:)`)
/// is written with a new fence whatever Redis holds; other processes see it at their next
/// refresh (their authenticators keep the credential they hold until then). A sign-out leaves a
/// record with no credential and is announced (`signed-out:<fence>`): every process whose
/// authenticator came from ``makeAuthenticator(origins:refreshLeeway:refreshBackoff:onRefreshFailure:)``
/// reads the record and, finding it signed out, has its authenticator forget the credential
/// (``Event/signOutAdopted``), so its next request carries no token; one that missed the
/// announcement finds the sign-out at its next refresh, as before. The sign-out revokes the
/// credential (RFC 7009, at the token endpoint's `revocationURL`) once for the fleet: only the
/// process whose write took it out of Redis revokes it (the credential Redis held, which the
/// script returns); a process that heard of the sign-out, or whose own sign-out found the fleet
/// signed out already, revokes nothing (`OAuth2Revocation.nothingToRevoke`). A sign-out written
/// while Redis is away revokes what this process knew. A process that starts while Redis is
/// unreachable, having seen nothing, cannot load a credential: the authenticator's load fails
/// and is tried again by the next request.
///
/// **Secrets.** The credential is stored as JSON in the hash `<prefix>:credential`; the
/// channel `<prefix>:updated` carries fences, never tokens; nothing is logged, and no error
/// carries a token. Protect Redis as a store of refresh tokens: an ACL user limited to the
/// prefix's keys and channel (`~urltask:cred:* &urltask:cred:*`), TLS in front of it.
public final class FleetCredential: Sendable {
    /// What a fleet credential did, for logs, metrics and tests (``events(bufferingNewest:)``).
    /// Never carries a token.
    public enum Event: Sendable, Equatable {
        /// Redis could not be reached: this process refreshes on its own until it can.
        case redisUnreachable
        /// Redis answered again.
        case redisReachable
        /// This process held the lease and renewed the fleet's credential.
        case refreshed
        /// Another process (or an earlier refresh) had renewed it: taken without a token request.
        case adopted
        /// Renewed without Redis; owed to it (see ``wroteBack``).
        case refreshedAlone
        /// A credential owed to Redis (refreshed alone, signed in or out, or lost by Redis) was
        /// written, or found superseded.
        case wroteBack
        /// This process's write was refused: Redis holds a newer fence (a later lease holder's,
        /// or a sign-in's), which wins.
        case staleWriteRefused
        /// A lease lived out without a new credential (its holder died or failed): taken over.
        case leaseExpired
        /// This process took the lease and asks the token endpoint (or finds the refresh token
        /// presumed spent).
        case leaseWon
        /// The fleet's refresh token was refused (`invalid_grant`), or presumed spent, and that
        /// was recorded in Redis and announced: no process sends it again.
        case refusalRecorded
        /// A refusal recorded by another process ended this refresh without a token request.
        case refusalAdopted
        /// Redis could not be reached for an expired credential: this refresh waits for it, up
        /// to ``Configuration/redisOutageWait``, before refreshing alone.
        case waitingForRedis
        /// Redis could not be reached while the credential presented was still valid: it is
        /// kept, not renewed alone (until it expires, or the server refuses it).
        case keptWhileRedisAway
        /// Another process signed the fleet out (announced, then read in the record): this
        /// process's authenticators forgot the credential, without revoking it again (the
        /// process that signed out revokes it, once for the fleet).
        case signOutAdopted
    }

    /// Everything a fleet credential is configured with, as plain values (a child process can be
    /// given them on its command line).
    public struct Configuration: Sendable {
        /// Prefixes every key and the channel: one credential per prefix, such as
        /// `urltask:cred:<name>`. Processes sharing a credential use the same prefix. In a
        /// Redis Cluster, put the name in braces (`urltask:cred:{api}`): the scripts touch
        /// several keys, which must then share a slot.
        public var keyPrefix: String
        /// How long a refresh lease lives: longer than the token endpoint takes to answer (its
        /// `timeout`), or a slow holder's lease expires and another process refreshes too. It is
        /// also how long a process waits for another's refresh before taking over.
        public var leaseTimeToLive: Duration
        /// The first wait before writing back a credential owed to Redis, doubled up to
        /// ``maximumWriteBackDelay``.
        public var writeBackDelay: Duration
        /// The longest wait between two write-back attempts.
        public var maximumWriteBackDelay: Duration
        /// How long a refresh waits for this process's subscription to the update channel to be
        /// confirmed before taking the lease (once per subscription): an announcement sent before
        /// the subscription is active would be missed and cost a lease's life.
        public var subscriptionReadyTimeout: Duration
        /// How many times in a row one refresh may find the lease held by another process that
        /// then produces no new credential, before it fails with ``FleetCredentialError``
        /// (``FleetCredentialError/Kind/leaseRoundsExhausted``). Each round lasts at most a lease.
        public var maximumLeaseRounds: Int
        /// How long a refresh of an expired credential waits for an unreachable Redis (trying it
        /// every 250 ms) before this process refreshes alone, which with rotating refresh tokens
        /// can cost the other processes theirs. Also how long a lone refresh that was refused
        /// waits for Redis to learn whether another process holds a newer credential. Keep it
        /// below the refresh reactor's timeout (30 s) and the requests' own.
        public var redisOutageWait: Duration
        /// What a lease holder does with a refresh token that an earlier holder took the lease
        /// to send and never reported on (it died, perhaps after the server rotated the token).
        public var refreshTokenInFlightAtTakeover: InFlightTakeover

        /// What to do with a refresh token found in flight at a takeover: whether the token
        /// endpoint forgives a refresh token sent twice.
        public enum InFlightTakeover: Sendable, Equatable {
            /// Send it once more (the default). Right for a server that does not rotate refresh
            /// tokens, or forgives a reused one within a grace window (Okta's grace period,
            /// Auth0's reuse interval): the fleet goes on with 0 failures. With strict rotation
            /// the resend is refused (`invalid_grant`), the refusal is recorded, and the fleet
            /// signs in again: one token request more than ``requireSignIn``.
            case resendOnce
            /// Never send it again: the fleet signs in again at once. For a server with strict
            /// rotation whose reuse detection you would rather not trip (it revokes the token
            /// family and may alert), at the price of a sign-in when a holder died before its
            /// request left.
            case requireSignIn
        }

        /// A configuration with a lease of 15 s (longer than the token endpoint's default 10 s
        /// timeout, half the refresh reactor's 30 s), write-backs from 100 ms to 5 s apart, 4
        /// lease rounds, a 10 s wait for an unreachable Redis, and one resend of a refresh token
        /// found in flight.
        public init(
            keyPrefix: String, leaseTimeToLive: Duration = .seconds(15), writeBackDelay: Duration = .milliseconds(100),
            maximumWriteBackDelay: Duration = .seconds(5), subscriptionReadyTimeout: Duration = .seconds(1),
            maximumLeaseRounds: Int = 4, redisOutageWait: Duration = .seconds(10),
            refreshTokenInFlightAtTakeover: InFlightTakeover = .resendOnce
        ) {
            self.keyPrefix = keyPrefix
            self.leaseTimeToLive = leaseTimeToLive
            self.writeBackDelay = writeBackDelay
            self.maximumWriteBackDelay = maximumWriteBackDelay
            self.subscriptionReadyTimeout = subscriptionReadyTimeout
            self.maximumLeaseRounds = maximumLeaseRounds
            self.redisOutageWait = redisOutageWait
            self.refreshTokenInFlightAtTakeover = refreshTokenInFlightAtTakeover
        }
    }

    /// The client every Redis call goes through (its own connection for the subscription).
    public let client: RedisClient
    /// What this fleet credential was made with.
    public let configuration: Configuration
    /// Tells the authenticator which requests are its token requests (they get no bearer token
    /// and are never held), when made with a token endpoint.
    public let isTokenRequest: @Sendable (URLRequest) -> Bool

    private let refresher: OAuth2Authenticator.Refresh
    /// Revokes what this process's sign-out took out of the fleet's record (RFC 7009), if
    /// configured.
    private let revoker: OAuth2Authenticator.Revoke?
    /// The authenticators ``makeAuthenticator(origins:refreshLeeway:refreshBackoff:onRefreshFailure:)``
    /// made, told when another process signs the fleet out.
    private let authenticators = LockedState<[WeakAuthenticator]>([])
    private let keys: FleetCredentialKeys
    private let state: LockedState<FleetCredentialStateMachine>
    private let tasks = LockedState(Tasks())
    private let announcements = FleetAnnouncements()
    private let decisions = DecisionEvents<Event>()

    private struct Tasks {
        var refresh: Task<OAuth2Credential, any Error>?
        var writeBack: Task<Void, Never>?
        var subscription: Task<Void, Never>?
        var closed = false
    }

    /// A fleet credential renewed by `refresh` (another grant, or a test's own): the fleet runs
    /// it once per refresh, in the process that holds the lease; and revoked by `revoke`, if
    /// given, once per fleet sign-out, in the process that signed out (see "Signing in and out").
    public init(
        client: RedisClient, configuration: Configuration,
        isTokenRequest: @escaping @Sendable (URLRequest) -> Bool = { _ in false },
        revoke: OAuth2Authenticator.Revoke? = nil,
        refresh: @escaping OAuth2Authenticator.Refresh
    ) {
        self.client = client
        self.configuration = configuration
        self.isTokenRequest = isTokenRequest
        self.refresher = refresh
        self.revoker = revoke
        self.keys = FleetCredentialKeys(prefix: configuration.keyPrefix)
        self.state = LockedState(
            FleetCredentialStateMachine(
                maximumRounds: configuration.maximumLeaseRounds, refusalWait: configuration.leaseTimeToLive,
                outageWait: configuration.redisOutageWait,
                allowedSends: configuration.refreshTokenInFlightAtTakeover == .resendOnce ? 2 : 1))
    }

    /// A fleet credential renewed with the refresh-token grant at `tokenEndpoint`, and revoked at
    /// its `revocationURL` (RFC 7009), if it has one, when the fleet signs out.
    public convenience init(client: RedisClient, configuration: Configuration, tokenEndpoint: OAuth2TokenEndpoint) {
        var revoke: OAuth2Authenticator.Revoke?
        if tokenEndpoint.revocationURL != nil { revoke = { credential in await tokenEndpoint.revoke(credential) } }
        self.init(
            client: client, configuration: configuration, isTokenRequest: { tokenEndpoint.matches($0) }, revoke: revoke,
            refresh: { try await tokenEndpoint.refresh($0) })
    }

    deinit {
        tasks.withLock { tasks in
            tasks.subscription?.cancel()
            tasks.writeBack?.cancel()
        }
        decisions.finish()
    }

    /// The store to give the authenticator: it reads Redis at the authenticator's load, writes
    /// sign-ins and sign-outs to it (kept and written back later while Redis is away), and
    /// ignores the authenticator's save of a credential this fleet credential just produced.
    public var store: any CredentialStore { FleetCredentialStore(fleet: self) }

    /// The refresh to give the authenticator: once per fleet (see the type's documentation).
    public var refresh: OAuth2Authenticator.Refresh {
        { [self] credential in try await self.refreshOnce(credential) }
    }

    /// An authenticator wired to this fleet credential: its ``store``, ``refresh`` and
    /// ``isTokenRequest``, and the fleet's revocation: its `signOut()` revokes the credential
    /// only when this process's sign-out is the one that took it out of Redis. When another
    /// process signs the fleet out, this authenticator forgets the credential too
    /// (``Event/signOutAdopted``), without revoking it again.
    public func makeAuthenticator(
        origins: [URL], refreshLeeway: Duration = .seconds(60),
        refreshBackoff: Duration = OAuth2Authenticator.defaultRefreshBackoff,
        onRefreshFailure: (@Sendable (any Error) async -> Void)? = nil
    ) -> OAuth2Authenticator {
        state.withLock { $0.authenticatorLeeway = refreshLeeway }
        var revoke: OAuth2Authenticator.Revoke?
        if revoker != nil { revoke = { [self] credential in await self.revokeSignedOut(credential) } }
        let authenticator = OAuth2Authenticator(
            origins: origins, store: store, refreshLeeway: refreshLeeway, refreshBackoff: refreshBackoff,
            isTokenRequest: isTokenRequest, onRefreshFailure: onRefreshFailure, revoke: revoke, refresh: refresh)
        authenticators.withLock { list in
            list.removeAll { $0.authenticator == nil }
            list.append(WeakAuthenticator(authenticator: authenticator))
        }
        return authenticator
    }

    /// What this fleet credential does from now on, for one reader (see ``Event``).
    public func events(bufferingNewest limit: Int = 1_000) -> AsyncStream<Event> {
        decisions.subscribe(bufferingNewest: limit)
    }

    /// Whether a credential is owed to Redis (refreshed, signed in or out while it was away):
    /// for tests and health checks.
    public var owesRedis: Bool { state.withLock { $0.pending != nil } }

    /// Stops the subscription and the write-backs (a credential still owed is not written);
    /// the client is the caller's to close.
    public func shutdown() {
        let running = tasks.withLock { tasks in
            tasks.closed = true
            defer {
                tasks.subscription = nil
                tasks.writeBack = nil
            }
            return [tasks.subscription, tasks.writeBack]
        }
        for task in running { task?.cancel() }
        announcements.wakeAll()
    }

    // MARK: The store's side

    func load() async throws -> OAuth2Credential? {
        do {
            let stored = try await readRecord()
            let credential = transition { $0.loaded(stored) }
            scheduleWriteBackIfOwed()
            // Listening from the first load: a sign-out of another process is then heard.
            if authenticators.withLock({ !$0.isEmpty }) { await ensureSubscribed() }
            return credential
        } catch let error as RedisError where Self.isUnreachable(error) {
            guard let known = transition({ $0.loadFailed() }) else { throw error }
            return known
        }
    }

    func save(_ credential: OAuth2Credential?) async {
        guard let write = transition({ $0.saveRequested(credential) }) else { return }
        await perform(write)
        scheduleWriteBackIfOwed()
    }

    // MARK: Signing out

    /// The revocation an authenticator asks for after its sign-out: of what this process's
    /// sign-out took out of the record, or nothing when the fleet was signed out already (by
    /// another process, which revokes).
    private func revokeSignedOut(_ held: OAuth2Credential) async -> OAuth2Revocation {
        guard let revoker else { return .notConfigured }
        guard let credential = state.withLock({ $0.takeSignedOutCredential() }) else { return .nothingToRevoke }
        return await revoker(credential)
    }

    /// A sign-out was announced: the record decides whether this process's authenticators must
    /// forget the credential they hold. Their sign-out writes nothing and revokes nothing: the
    /// record already says signed out.
    private func signOutHeard() async {
        guard authenticators.withLock({ !$0.isEmpty }) else { return }
        guard let stored = try? await readRecord(), transition({ $0.signOutAnnounced(stored) }) else { return }
        for authenticator in authenticators.withLock({ $0.compactMap(\.authenticator) }) {
            _ = try? await authenticator.signOut()
        }
    }

    // MARK: The refresh

    private func refreshOnce(_ presented: OAuth2Credential) async throws -> OAuth2Credential {
        let task = tasks.withLock { tasks in
            if let running = tasks.refresh { return running }
            let task = Task { try await self.runRefresh(presented) }
            tasks.refresh = task
            return task
        }
        return try await FleetAnnouncements.value(of: task)
    }

    private func runRefresh(_ presented: OAuth2Credential) async throws -> OAuth2Credential {
        // One lease token for the whole refresh: a lease script whose reply was lost to a slow
        // Redis took the lease for this token, and the next attempt finds it its own.
        let token = UUID().uuidString
        var mayHoldLease = false
        defer {
            transition { $0.refreshEnded() }
            tasks.withLock { $0.refresh = nil }
            scheduleWriteBackIfOwed()
        }
        do {
            let credential = try await refreshLoop(presented, token: token, mayHoldLease: &mayHoldLease)
            if mayHoldLease { await release(token) }
            return credential
        } catch {
            if mayHoldLease { await release(token) }
            throw error
        }
    }

    private func refreshLoop(
        _ presented: OAuth2Credential, token: String, mayHoldLease: inout Bool
    ) async throws -> OAuth2Credential {
        var endpointError: (any Error)?
        // The announcements heard before the record was last read: a wait ends at the next one.
        var heard = announcements.heardCount
        var action = transition { $0.refreshRequested(presented, now: Date()) }
        while true {
            switch action {
            case .writeBack(let pending):
                if await perform(pending) {
                    action = transition { $0.continueAfterWriteBack() }
                } else {
                    action = transition { $0.redisUnreachable(now: Date()) } ?? .fail(.noProgress)
                }
            case .acquireLease(let sending):
                await ensureSubscribed()
                let known = state.withLock { $0.newest?.fence ?? 0 }
                heard = announcements.heardCount
                do {
                    let reply = try FleetCredentialScripts.elements(
                        await client.run(
                            FleetCredentialScripts.acquire, keys: [keys.lease, keys.fence, keys.record],
                            arguments: [token, String(Self.milliseconds(configuration.leaseTimeToLive)), String(known), sending]))
                    let stored = try FleetCredentialScripts.record(reply, at: 3)
                    let number = FleetCredentialScripts.integer(reply[safe: 1]) ?? 0
                    let now = Date()
                    switch FleetCredentialScripts.integer(reply.first) {
                    case 1:
                        mayHoldLease = true
                        let sends = Int(FleetCredentialScripts.integer(reply[safe: 2]) ?? 1)
                        action = transition { $0.leaseWon(fence: number, sends: sends, stored: stored, now: now) }
                    case 2:
                        action = transition { $0.leaseNotTaken(stored: stored, now: now) }
                    case 3:
                        action = transition { $0.leaseRefused(stored: stored, now: now) }
                    default:
                        action = transition { $0.leaseLost(stored: stored, remaining: .milliseconds(number), now: now) }
                    }
                } catch let error as RedisError where Self.isUnreachable(error) {
                    // A slow Redis may have run the script after the reply timed out.
                    mayHoldLease = true
                    action = transition { $0.redisUnreachable(now: Date()) } ?? .fail(.noProgress)
                }
            case .callEndpoint(let credential):
                do {
                    let renewed = try await refresher(credential)
                    action = transition { $0.endpointAnswered(renewed) }
                } catch {
                    endpointError = error
                    let requiresSignIn = (error as? OAuth2Error)?.requiresSignIn == true
                    action = transition { $0.endpointFailed(requiresSignIn: requiresSignIn, now: Date()) }
                }
            case .commit(let fence, let credential):
                do {
                    let reply = try FleetCredentialScripts.elements(
                        await client.run(
                            FleetCredentialScripts.commit, keys: [keys.record, keys.lease],
                            arguments: [String(fence), try FleetCredentialScripts.encode(credential), token, keys.channel]))
                    mayHoldLease = false  // The script released it if it still held it.
                    if FleetCredentialScripts.integer(reply.first) == 1 {
                        action = transition { $0.committed(fence: fence) }
                    } else {
                        let stored = try FleetCredentialScripts.record(reply, at: 1)
                        action = transition { $0.commitRefused(stored: stored, now: Date()) }
                    }
                } catch let error as RedisError where Self.isUnreachable(error) {
                    action = transition { $0.redisUnreachable(now: Date()) } ?? .fail(.noProgress)
                }
            case .recordRefusal(let fingerprint, let base):
                do {
                    let reply = try FleetCredentialScripts.elements(
                        await client.run(
                            FleetCredentialScripts.refuse, keys: [keys.record, keys.lease],
                            arguments: [fingerprint, String(base), keys.channel, token]))
                    mayHoldLease = false
                    if FleetCredentialScripts.integer(reply.first) == 1 {
                        action = transition { $0.refusalRecorded(fingerprint: fingerprint) }
                    } else {
                        let stored = try FleetCredentialScripts.record(reply, at: 1)
                        action = transition { $0.refusalSuperseded(stored: stored, now: Date()) }
                    }
                } catch let error as RedisError where Self.isUnreachable(error) {
                    action = transition { $0.redisUnreachable(now: Date()) } ?? .fail(.endpointError)
                }
            case .waitForUpdate(let within):
                let woken = await announcements.wait(forMessageAfter: heard, within: within)
                action = transition { $0.waitEnded(timedOut: !woken, now: Date()) }
            case .pauseForRedis(let delay):
                if delay > .zero { try? await Task.sleep(for: delay) }
                action = transition { $0.redisRetryDue(now: Date()) }
            case .reload:
                heard = announcements.heardCount
                do {
                    let stored = try await readRecord()
                    action = transition { $0.reloaded(stored, now: Date()) }
                } catch let error as RedisError where Self.isUnreachable(error) {
                    action = transition { $0.redisUnreachable(now: Date()) } ?? .fail(.noProgress)
                }
            case .finish(let credential):
                return credential
            case .fail(let failure):
                throw error(for: failure, endpointError: endpointError)
            }
        }
    }

    /// What a caller gets for a refresh that ended with `failure`: the one error rule of the
    /// kit (``OAuth2Error`` for what requires signing in, the endpoint's own error), and a
    /// ``FleetCredentialError`` naming this fleet when its leases ran out.
    private func error(for failure: FleetCredentialStateMachine.Failure, endpointError: (any Error)?) -> any Error {
        switch failure {
        case .signedOut:
            return OAuth2Error.notSignedIn
        case .endpointError:
            return endpointError ?? OAuth2Error.notSignedIn
        case .refused:
            return OAuth2Error.tokenRequestRejected(
                status: 400, error: "invalid_grant",
                description: "the fleet's refresh token was refused, for another process of the fleet (recorded in Redis)")
        case .presumedSpent:
            return OAuth2Error.tokenRequestRejected(
                status: 400, error: "invalid_grant",
                description: "the fleet's refresh token was in flight when its lease holders stopped; presumed spent "
                    + "(FleetCredential.Configuration.refreshTokenInFlightAtTakeover)")
        case .noProgress:
            return FleetCredentialError(
                kind: .leaseRoundsExhausted, keyPrefix: configuration.keyPrefix, rounds: configuration.maximumLeaseRounds)
        }
    }

    private func release(_ token: String) async {
        _ = try? await client.run(FleetCredentialScripts.release, keys: [keys.lease, keys.record], arguments: [token])
    }

    private func readRecord() async throws -> FleetCredentialStateMachine.Record? {
        let reply = try FleetCredentialScripts.elements(await client.send(["HMGET", keys.record] + FleetCredentialScripts.recordFields))
        return try FleetCredentialScripts.record(reply, at: 0)
    }

    // MARK: Writes owed

    /// Runs `pending`'s write and reports its outcome to the state machine (never moving the
    /// refresh in flight); `false` when Redis could not be reached.
    @discardableResult
    private func perform(_ pending: FleetCredentialStateMachine.Pending) async -> Bool {
        do {
            let reply = try FleetCredentialScripts.elements(
                await client.run(
                    FleetCredentialScripts.write, keys: [keys.record, keys.fence],
                    arguments: try FleetCredentialScripts.writeArguments(pending, channel: keys.channel)))
            if FleetCredentialScripts.integer(reply.first) == 1 {
                let fence = FleetCredentialScripts.integer(reply[safe: 1]) ?? 0
                // A sign-out's write answers what it took out of the record, for the revocation.
                var replaced: OAuth2Credential?? = .none
                if pending.credential == nil, pending.kind == .replace {
                    do { replaced = .some(try FleetCredentialScripts.record(reply, at: 2)?.credential) } catch {}
                }
                transition { $0.writeBackAccepted(id: pending.id, fence: fence, replaced: replaced) }
            } else {
                let stored = try? FleetCredentialScripts.record(reply, at: 1)
                transition { $0.writeBackRefused(id: pending.id, stored: stored) }
            }
            return true
        } catch let error as RedisError where Self.isUnreachable(error) {
            transition { $0.writeBackUnreachable() }
            return false
        } catch {
            // A reply error (an ACL that forbids the key, say): kept, tried again later.
            return true
        }
    }

    /// Starts the write-back loop when a write is owed and none runs.
    private func scheduleWriteBackIfOwed() {
        guard state.withLock({ $0.pending != nil }) else { return }
        tasks.withLock { tasks in
            guard !tasks.closed, tasks.writeBack == nil else { return }
            tasks.writeBack = Task { [weak self] in await self?.writeBackLoop() }
        }
    }

    private func writeBackLoop() async {
        var delay = configuration.writeBackDelay
        while !Task.isCancelled {
            guard let pending = state.withLock({ $0.pending }) else { break }
            await perform(pending)
            let written = state.withLock { $0.pending?.id != pending.id }
            if written { continue }
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, configuration.maximumWriteBackDelay)
        }
        tasks.withLock { $0.writeBack = nil }
        // A write owed after the loop decided to end (a race with a new save) restarts it.
        if !Task.isCancelled { scheduleWriteBackIfOwed() }
    }

    // MARK: Announcements

    /// Subscribes to the update channel once, and waits (at most
    /// ``Configuration/subscriptionReadyTimeout``) until the subscription hears its own test
    /// message: an announcement published before the subscription was active would be missed.
    private func ensureSubscribed() async {
        guard !announcements.isReady else { return }
        let reachable = state.withLock { $0.reachable }
        tasks.withLock { tasks in
            guard !tasks.closed, tasks.subscription == nil else { return }
            let (client, channel, announcements, pause) = (client, keys.channel, announcements, configuration.writeBackDelay)
            let onSignOut: @Sendable () -> Void = { [weak self] in
                guard let self else { return }
                Task { await self.signOutHeard() }
            }
            tasks.subscription = Task {
                await Self.subscriptionLoop(
                    client: client, channel: channel, announcements: announcements, pause: pause, onSignOut: onSignOut)
            }
        }
        // While Redis is away the lease script fails at once anyway: no wait for it.
        guard reachable else { return }
        _ = await announcements.waitUntilReady(within: configuration.subscriptionReadyTimeout)
    }

    /// Listens on `channel` until cancelled (by ``shutdown()`` or the fleet credential's end);
    /// holds no reference to the fleet credential, so dropping it ends the loop.
    private static func subscriptionLoop(
        client: RedisClient, channel: String, announcements: FleetAnnouncements, pause: Duration, onSignOut: @escaping @Sendable () -> Void
    ) async {
        while !Task.isCancelled {
            let nonce = "ready:" + UUID().uuidString
            // The client's subscription reconnects by itself after a lost connection (a Redis
            // restart) without ending the stream; an announcement published in the gap is lost,
            // so each confirmation sends the waiters to read the record rather than wait out
            // the lease.
            let messages = client.subscribe(to: channel, onSubscribed: { announcements.resubscribed() })
            let greeter = Task {
                // Published until heard: the first may precede the subscription.
                var attempts = 0
                while !announcements.isReady, !Task.isCancelled, attempts < 100 {
                    _ = try? await client.send(["PUBLISH", channel, nonce])
                    attempts += 1
                    try? await Task.sleep(for: .milliseconds(20))
                }
            }
            do {
                for try await message in messages {
                    let text = String(decoding: message, as: UTF8.self)
                    if text == nonce {
                        announcements.markReady()
                    } else if !text.hasPrefix("ready:") {
                        // A hint, whatever it says: the waiters read the record, which decides.
                        announcements.heard()
                        if text.hasPrefix("signed-out:") { onSignOut() }
                    }
                }
            } catch {}
            greeter.cancel()
            announcements.markLost()
            if Task.isCancelled { break }
            try? await Task.sleep(for: pause)
        }
    }

    // MARK: Support

    /// Runs one transition under the lock, then emits its notes (outside it).
    private func transition<Result>(_ body: (inout FleetCredentialStateMachine) -> Result) -> Result {
        let (result, notes) = state.withLock { machine in
            let result = body(&machine)
            return (result, machine.takeNotes())
        }
        for note in notes { decisions.emit(note) }
        return result
    }

    /// Whether `error` says Redis cannot serve the fleet now, rather than refusing what was asked:
    /// no connection, no answer in time, an answer that is not RESP or past the client's bounds
    /// (the connection is replaced), or an error reply that means "not yet" (a Redis still
    /// loading its data after a restart, busy with a script, a replica without its primary).
    static func isUnreachable(_ error: RedisError) -> Bool {
        switch error.kind {
        case .connectionClosed, .timeout, .protocolViolation: true
        case .reply(let code): transientReplyCodes.contains(code)
        }
    }

    /// The error replies Redis gives while it cannot serve yet, whatever the command.
    static let transientReplyCodes: Set<String> = ["LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"]

    static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return max(1, seconds * 1_000 + attoseconds / 1_000_000_000_000_000)
    }
}

/// An authenticator a fleet credential made, without keeping it alive.
private struct WeakAuthenticator: Sendable {
    weak var authenticator: OAuth2Authenticator?
}

/// The ``CredentialStore`` a ``FleetCredential`` hands out.
private struct FleetCredentialStore: CredentialStore {
    let fleet: FleetCredential

    func load() async throws -> OAuth2Credential? { try await fleet.load() }
    func save(_ credential: OAuth2Credential) async throws { await fleet.save(credential) }
    func clear() async throws { await fleet.save(nil) }
}

extension Array {
    fileprivate subscript(safe index: Int) -> Element? { indices.contains(index) ? self[index] : nil }
}
