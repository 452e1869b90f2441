import Foundation
import URLTaskOAuth2

/// The decisions of a ``FleetCredential``, with no I/O: what the process knows of the fleet's
/// credential, which write it still owes Redis, and where the one refresh in flight stands.
///
/// The driver (``FleetCredential``) holds it under a lock only for a transition: it calls one
/// mutating method per thing that happened (the lease was won, Redis answered a write, the
/// endpoint answered, Redis could not be reached) and carries out the ``Action`` it returns,
/// outside the lock. Every rule of the lease, the fence and the fallback is here, so the unit
/// tests drive them all without a socket.
///
/// **Fences.** Every write of the fleet's record carries a fence, a number that only grows:
/// the lease holder's fence is taken with the lease (`INCR`, in the same script), and Redis
/// refuses a write whose fence is not above the stored one. "Newer" is therefore "a higher
/// fence", and a process keeps the newest record it has seen (``newest``) so it never serves an
/// older one, even when Redis lost its data (a restart without persistence: the stored fence is
/// then lower than the newest seen, and the newest is written back as it was).
///
/// **Writes owed.** A credential the token endpoint issued, or a sign-in or sign-out, that could
/// not be written to Redis is kept in ``pending`` and written back when Redis answers again;
/// a rotated refresh token is never lost to an outage.
///
/// **A refresh token is one fleet-wide fact.** The lease script marks the refresh token its
/// holder is about to send (``Record/inFlight``); a holder that dies after sending leaves the
/// mark, and the next holder knows the token may be spent: it resends it at most
/// ``allowedSends`` - 1 times, then treats it as refused. A refusal (`invalid_grant`, or a token
/// presumed spent) is recorded in the record (``Record/refused``, a fingerprint, never the token)
/// and announced: every process that would send that token fails at once instead.
///
/// **Announcements are hints.** A message on the update channel only makes a waiting refresh
/// read the record; the record decides. A message that brings nothing new sends the refresh back
/// to waiting for the rest of its lease's life, so a bogus one costs one read and no round.
///
/// **Redis away.** An access token renewed ahead of its expiry (within the authenticator's
/// leeway) is kept while still valid, not renewed alone. An expired one, or one the server
/// refused, waits for Redis up to ``outageWait`` (retried every
/// ``redisRetryInterval``) before the process refreshes alone; a lone refresh that is refused
/// waits for Redis the same way, then takes a newer credential another process wrote, if one
/// comes within ``refusalWait``.
struct FleetCredentialStateMachine: Sendable {
    /// The fleet's record: the credential (`nil`: signed out), the fence it was written with, and
    /// what the fleet knows of its refresh token. Fence 0 is "nothing stored".
    struct Record: Sendable, Equatable {
        var fence: Int64
        var credential: OAuth2Credential?
        /// The refresh token a lease holder took the lease to send, not yet reported on (it
        /// committed, failed or released): another holder finding it may be looking at a spent
        /// token, its holder dead after sending it.
        var inFlight: InFlight? = nil
        /// The fingerprint of a refresh token the token endpoint refused: no process sends it again.
        var refused: String? = nil

        static let missing = Record(fence: 0, credential: nil)
    }

    /// A refresh token marked in flight: its fingerprint, and how many lease holders took the
    /// lease to send it (the first, then one per takeover).
    struct InFlight: Sendable, Equatable {
        var fingerprint: String
        var sends: Int
    }

    /// A write Redis still owes, and the rule it is written under (one Lua script, see
    /// `FleetCredentialScripts.write`).
    struct Pending: Sendable, Equatable {
        enum Kind: Sendable, Equatable {
            /// A credential refreshed while Redis was away, from the record with fence `base`:
            /// written (with a new fence) unless a record newer than `base` was written since.
            case refreshed(base: Int64)
            /// The newest record seen, which Redis lost (its stored fence is lower): written with
            /// its own fence unless Redis holds that fence or a newer one.
            case restore(fence: Int64)
            /// A sign-in or sign-out: written with a new fence whatever is stored.
            case replace
        }

        /// Tells a write-back's answer from a newer write's.
        var id: Int
        /// A first attempt found Redis unreachable (a sign-in or sign-out written at once is
        /// no write-back).
        var deferred = false
        var credential: OAuth2Credential?
        var kind: Kind

        /// Whether a stored record with `fence` makes this write moot (the script would refuse it).
        func isSuperseded(byFence fence: Int64) -> Bool {
            switch kind {
            case .refreshed(let base): fence > base
            case .restore(let own): fence >= own
            case .replace: false
            }
        }
    }

    /// Why a refresh ended without a credential (the driver turns it into an error; the
    /// endpoint's own error is the driver's to keep).
    enum Failure: Sendable, Equatable {
        /// The fleet's record says signed out (another process signed out).
        case signedOut
        /// The token endpoint's error stands.
        case endpointError
        /// The lease changed hands ``maximumRounds`` times without a new credential.
        case noProgress
        /// The refresh token was refused for another process (the record's ``Record/refused``).
        case refused
        /// The refresh token was in flight when its holders stopped, more often than
        /// ``allowedSends`` allows: presumed spent.
        case presumedSpent
    }

    /// What the driver does next for the refresh in flight.
    enum Action: Sendable, Equatable {
        /// Run the write `pending` owes (then report ``writeBackAccepted(id:fence:)``,
        /// ``writeBackRefused(id:stored:)`` or ``redisUnreachable(now:)``, then
        /// ``continueAfterWriteBack()``).
        case writeBack(Pending)
        /// Run the lease script, telling it the fence of ``newest`` and the fingerprint of the
        /// refresh token this process would send (``leaseWon(fence:sends:stored:now:)``,
        /// ``leaseLost(stored:remaining:now:)``, ``leaseNotTaken(stored:now:)``,
        /// ``leaseRefused(stored:now:)``).
        case acquireLease(sending: String)
        /// Ask the token endpoint to renew this credential (``endpointAnswered(_:)``,
        /// ``endpointFailed(requiresSignIn:now:)``).
        case callEndpoint(OAuth2Credential)
        /// Write the holder's credential with its lease fence (``committed(fence:)``,
        /// ``commitRefused(stored:now:)``).
        case commit(fence: Int64, credential: OAuth2Credential)
        /// Record that the refresh token with this fingerprint is refused, unless a record newer
        /// than `base` was written (``refusalRecorded()``, ``refusalSuperseded(stored:now:)``).
        case recordRefusal(fingerprint: String, base: Int64)
        /// Wait for a message on the update channel heard after the last read of the record,
        /// at most `within` (then ``waitEnded(timedOut:now:)``).
        case waitForUpdate(within: Duration)
        /// Wait this long, then ``redisRetryDue(now:)``: Redis was unreachable.
        case pauseForRedis(Duration)
        /// Read the record (``reloaded(_:now:)``).
        case reload
        /// The refresh's result: hand it to the authenticator (releasing the lease if still held).
        case finish(OAuth2Credential)
        /// The refresh fails.
        case fail(Failure)
    }

    /// Why the record is read again.
    private enum Reload: Sendable, Equatable {
        /// A message was heard while waiting for the holder, whose lease lives until `until`.
        case hint(until: Date)
        /// The holder's lease lived out without a new credential.
        case leaseOver
        /// The endpoint refused the refresh token this holder sent (`base`: the record's fence
        /// the refresh started from): a newer credential, or the refusal is recorded.
        case afterRefusal(fingerprint: String, base: Int64)
        /// A lone refresh was refused and Redis answers again: a newer credential, or wait for
        /// one (`waited`: already waited).
        case afterLoneRefusal(waited: Bool)
    }

    /// What a refresh waiting for Redis tries again.
    private enum Resume: Sendable, Equatable {
        case lease
        case loneRefusal
    }

    private enum Phase: Sendable, Equatable {
        case idle
        /// Flushing a write owed before taking the lease.
        case writingBack(presented: OAuth2Credential)
        case acquiring(presented: OAuth2Credential)
        /// `fence` is the lease's (nil: refreshing alone, Redis away); `base` the record fence
        /// the refresh replaces; `sent` the fingerprint of the refresh token sent.
        case callingEndpoint(presented: OAuth2Credential, fence: Int64?, base: Int64, sent: String)
        case committing(presented: OAuth2Credential, credential: OAuth2Credential, base: Int64)
        /// Another process holds the lease until `until`.
        case waiting(presented: OAuth2Credential, until: Date)
        case reloading(presented: OAuth2Credential, why: Reload)
        /// Recording a refusal; the refresh then fails with `failure`.
        case refusing(presented: OAuth2Credential, failure: Failure)
        /// Redis was unreachable (since ``outageSince``); `resume` says what to try again.
        case awaitingRedis(presented: OAuth2Credential, resume: Resume)
        /// A lone refresh was refused and the record holds nothing newer: waiting for a process
        /// that owes Redis a newer one.
        case waitingAfterLoneRefusal(presented: OAuth2Credential)
    }

    /// The newest record this process has seen (read, written, or made while Redis was away).
    private(set) var newest: Record?
    /// The write Redis owes, if any.
    private(set) var pending: Pending?
    /// What this process's last sign-out took out of the fleet's record, for its revocation
    /// (RFC 7009): set when the sign-out is requested (what this process knew), corrected by
    /// the sign-out's write (what the record held), taken by the revocation. A sign-out that
    /// found the fleet already signed out (another process did it, and revokes) leaves `nil`.
    private var signedOut: (id: Int, credential: OAuth2Credential)?
    /// Whether Redis answered the last call.
    private(set) var reachable = true
    /// Notes since the driver last took them.
    private(set) var notes: [FleetCredential.Event] = []
    private var phase = Phase.idle
    private var nextPendingID = 0
    /// Lease rounds lost in a row by the refresh in flight.
    private var roundsLost = 0
    /// The access token of a still-valid credential this process kept, not renewed, while Redis
    /// was unreachable: asked to renew it again, the server has refused it (a 401), so it is
    /// treated as expired.
    private var keptWhileAway: String?
    /// The authenticator's `refreshLeeway` (bounded by the token's lifetime as the authenticator
    /// bounds it, `OAuth2Credential.refreshLeeway(upTo:)`): a still-valid credential presented within it is a
    /// renewal ahead of its expiry (kept while Redis is away); one presented earlier was refused
    /// by the server (a 401), and is renewed as an expired one.
    var authenticatorLeeway: Duration = .seconds(60)
    /// When the refresh in flight found Redis unreachable, until it answers again.
    private var outageSince: Date?
    /// Rounds lost after which a refresh gives up (each lasts at most a lease's life).
    let maximumRounds: Int
    /// A credential expiring within this long is renewed rather than adopted.
    let leeway: Duration
    /// How long a lone refresh whose refresh token was refused waits for a newer one to be
    /// announced once Redis answers (a write-back is retried well within it).
    let refusalWait: Duration
    /// How long a refresh of an expired credential waits for an unreachable Redis before
    /// refreshing alone.
    let outageWait: Duration
    /// How often a refresh waiting for Redis tries it again.
    let redisRetryInterval: Duration
    /// How many lease holders may send one refresh token: 1 + the resends allowed after a
    /// holder stopped with it in flight.
    let allowedSends: Int

    init(
        maximumRounds: Int = 4, leeway: Duration = .seconds(1), refusalWait: Duration = .seconds(5),
        outageWait: Duration = .seconds(10), redisRetryInterval: Duration = .milliseconds(250), allowedSends: Int = 2
    ) {
        self.maximumRounds = maximumRounds
        self.leeway = leeway
        self.refusalWait = refusalWait
        self.outageWait = outageWait
        self.redisRetryInterval = redisRetryInterval
        self.allowedSends = allowedSends
    }

    /// Whether a refresh is in flight.
    var isRefreshing: Bool { phase != .idle }

    /// The notes since the last call, for the driver to emit.
    mutating func takeNotes() -> [FleetCredential.Event] {
        defer { notes = [] }
        return notes
    }

    // MARK: The store's calls

    /// The record was read (the store's `load`): the credential to hand out.
    mutating func loaded(_ stored: Record?) -> OAuth2Credential? {
        markReachable()
        observe(stored)
        return newest?.credential
    }

    /// Redis could not be read at load: the newest seen, if any (`.some(nil)`: signed out);
    /// `nil` when nothing was ever seen (the load must fail).
    mutating func loadFailed() -> OAuth2Credential?? {
        markUnreachable()
        guard let newest else { return nil }
        return .some(newest.credential)
    }

    /// The authenticator saves `credential` (`nil`: clears): after its own refresh (already
    /// written, or owed), or a sign-in or sign-out (a write that replaces whatever is stored).
    /// Returns the write to run, if any.
    mutating func saveRequested(_ credential: OAuth2Credential?) -> Pending? {
        if credential == nil { signedOut = nil }
        if let newest, Self.same(newest.credential, credential) { return nil }
        let write = makePending(credential, .replace)
        if credential == nil, let known = newest?.credential { signedOut = (write.id, known) }
        newest = Record(fence: newest?.fence ?? 0, credential: credential)
        return write
    }

    /// The revocation of this process's last sign-out asks what to revoke: what the sign-out
    /// took out of the record (`nil`: nothing, the fleet was signed out already). Taken once.
    mutating func takeSignedOutCredential() -> OAuth2Credential? {
        defer { signedOut = nil }
        return signedOut?.credential
    }

    /// A message announced a sign-out: `stored` is the record read after it. Returns whether this
    /// process held a credential the record now says is signed out, which its authenticators
    /// must then forget (without revoking it or writing a sign-out again: the process that
    /// signed out does both).
    mutating func signOutAnnounced(_ stored: Record?) -> Bool {
        markReachable()
        let held = newest?.credential != nil
        observe(stored)
        guard held, newest?.credential == nil, stored?.credential == nil, (stored?.fence ?? 0) > 0 else { return false }
        notes.append(.signOutAdopted)
        return true
    }

    // MARK: Write-backs

    /// Redis wrote `id`'s record with `fence` (the refresh's own write-back, or the background
    /// one: neither moves the refresh in flight, see ``continueAfterWriteBack()``).
    ///
    /// `replaced` is the credential a sign-out's write took out of the record (`nil`: the record
    /// held none, another process signed out first), or `.none` for other writes.
    mutating func writeBackAccepted(id: Int, fence: Int64, replaced: OAuth2Credential?? = .none) {
        markReachable()
        if let replaced, let signedOut, signedOut.id == id {
            self.signedOut = replaced.map { (id, $0) }
        }
        guard let pending, pending.id == id else { return }
        self.pending = nil
        newest = Record(fence: fence, credential: pending.credential)
        if pending.deferred || pending.kind != .replace { notes.append(.wroteBack) }
    }

    /// Redis refused `id`'s write: `stored` is newer.
    mutating func writeBackRefused(id: Int, stored: Record?) {
        markReachable()
        if let pending, pending.id == id { self.pending = nil }
        observe(stored)
    }

    /// A write-back outside the refresh (the background one, a save) found Redis unreachable:
    /// the write stays owed.
    mutating func writeBackUnreachable() {
        markUnreachable()
        pending?.deferred = true
    }

    // MARK: The refresh

    /// The authenticator asks to renew `presented`.
    mutating func refreshRequested(_ presented: OAuth2Credential, now: Date) -> Action {
        roundsLost = 0
        outageSince = nil
        if let known = adoptable(instead: presented, now: now) {
            notes.append(.adopted)
            return .finish(known)
        }
        if let pending {
            phase = .writingBack(presented: presented)
            return .writeBack(pending)
        }
        return acquire(presented)
    }

    /// The refresh's own write-back ended (written, refused, or not: the lease script finds out
    /// for itself whether Redis answers).
    mutating func continueAfterWriteBack() -> Action {
        guard case .writingBack(let presented) = phase else { return unexpected() }
        return acquire(presented)
    }

    /// This process holds the lease, with `fence`, and is the `sends`th holder to take it for
    /// the refresh token it sends; `stored` is the record as the lease was taken.
    mutating func leaseWon(fence: Int64, sends: Int = 1, stored: Record?, now: Date) -> Action {
        markReachable()
        guard let presented = acquiringPresented else { return unexpected() }
        if let ended = adoptOrRefuse(stored, instead: presented, now: now) { return ended }
        if let newest, newest.fence > 0, newest.credential == nil { return fail(.signedOut) }
        let base = newest?.fence ?? 0
        let current = sendable(presented)
        let fingerprint = Self.fingerprint(of: current)
        notes.append(.leaseWon)
        guard sends <= allowedSends else {
            // Its earlier holders stopped with it in flight: it may be spent. Nobody sends it again.
            phase = .refusing(presented: presented, failure: .presumedSpent)
            return .recordRefusal(fingerprint: fingerprint, base: base)
        }
        phase = .callingEndpoint(presented: presented, fence: fence, base: base, sent: fingerprint)
        return .callEndpoint(current)
    }

    /// The lease script found a record newer than the newest this process knew, and took no
    /// lease: another process renewed the credential already (the usual case for every process
    /// but the first; it saves taking and releasing a lease).
    mutating func leaseNotTaken(stored: Record?, now: Date) -> Action {
        markReachable()
        guard let presented = acquiringPresented else { return unexpected() }
        if let ended = adoptOrRefuse(stored, instead: presented, now: now) { return ended }
        // Newer but expiring: renew that one (the script takes the lease now that the fence it
        // is told is the stored one).
        roundsLost += 1
        guard roundsLost <= maximumRounds else { return fail(.noProgress) }
        return acquire(presented)
    }

    /// The lease script took no lease: the record says the refresh token this process would
    /// send was refused.
    mutating func leaseRefused(stored: Record?, now: Date) -> Action {
        markReachable()
        guard let presented = acquiringPresented else { return unexpected() }
        return adoptOrRefuse(stored, instead: presented, now: now) ?? fail(.refused)
    }

    /// Another process holds the lease for `remaining` more.
    mutating func leaseLost(stored: Record?, remaining: Duration, now: Date) -> Action {
        markReachable()
        guard let presented = acquiringPresented else { return unexpected() }
        if let ended = adoptOrRefuse(stored, instead: presented, now: now) { return ended }
        roundsLost += 1
        guard roundsLost <= maximumRounds else { return fail(.noProgress) }
        // The lease ended between the script's two calls (PTTL of a key just gone): try again.
        guard remaining > .zero else { return acquire(presented) }
        phase = .waiting(presented: presented, until: now.addingTimeInterval(Self.interval(remaining)))
        return .waitForUpdate(within: remaining)
    }

    /// The wait ended: a message was heard (a hint: the record decides), or the time passed
    /// (`timedOut`).
    mutating func waitEnded(timedOut: Bool, now: Date) -> Action {
        switch phase {
        case .waitingAfterLoneRefusal(let presented):
            phase = .reloading(presented: presented, why: .afterLoneRefusal(waited: true))
            return .reload
        case .waiting(let presented, let until):
            let leaseOver = timedOut || now >= until
            if leaseOver { notes.append(.leaseExpired) }
            phase = .reloading(presented: presented, why: leaseOver ? .leaseOver : .hint(until: until))
            return .reload
        default:
            return unexpected()
        }
    }

    /// The record was read for the refresh in flight.
    mutating func reloaded(_ stored: Record?, now: Date) -> Action {
        markReachable()
        guard case .reloading(let presented, let why) = phase else { return unexpected() }
        if case .afterRefusal(let fingerprint, let base) = why {
            // Another holder (one whose answer came late) may have written the rotated token.
            observe(stored)
            if let known = adoptable(instead: presented, now: now) {
                notes.append(.adopted)
                return .finish(known)
            }
            phase = .refusing(presented: presented, failure: .endpointError)
            return .recordRefusal(fingerprint: fingerprint, base: base)
        }
        if let ended = adoptOrRefuse(stored, instead: presented, now: now) { return ended }
        switch why {
        case .hint(let until) where now < until:
            // Nothing new: the holder is still at it. Back to waiting, no round lost.
            phase = .waiting(presented: presented, until: until)
            return .waitForUpdate(within: .milliseconds(Int64(until.timeIntervalSince(now) * 1_000)))
        case .afterLoneRefusal(waited: false):
            // A process that refreshed alone too may owe Redis the newer refresh token: its
            // write-back is announced like any write. Wait for it once.
            phase = .waitingAfterLoneRefusal(presented: presented)
            return .waitForUpdate(within: refusalWait)
        case .afterLoneRefusal(waited: true):
            return fail(.endpointError)
        case .hint, .leaseOver, .afterRefusal:
            // No new credential: the holder died or failed. Take the lease.
            return acquire(presented)
        }
    }

    /// The token endpoint issued `credential`.
    mutating func endpointAnswered(_ credential: OAuth2Credential) -> Action {
        guard case .callingEndpoint(let presented, let fence, let base, _) = phase else { return unexpected() }
        guard let fence else {
            // Alone (Redis away): keep it, owed to Redis.
            pending = makePending(credential, .refreshed(base: base))
            newest = Record(fence: base, credential: credential)
            notes.append(.refreshedAlone)
            return .finish(credential)
        }
        phase = .committing(presented: presented, credential: credential, base: base)
        return .commit(fence: fence, credential: credential)
    }

    /// The token endpoint refused or failed. A refusal that requires signing in may mean
    /// another process used the refresh token first (a holder whose answer came late, or one
    /// that refreshed alone while Redis was away): the record is read before the refusal is
    /// recorded and stands.
    mutating func endpointFailed(requiresSignIn: Bool, now: Date) -> Action {
        guard case .callingEndpoint(let presented, let fence, let base, let sent) = phase else { return unexpected() }
        guard requiresSignIn else { return fail(.endpointError) }
        guard fence != nil else {
            // Alone: read Redis as soon as it answers (waiting for it afresh).
            outageSince = now
            phase = .awaitingRedis(presented: presented, resume: .loneRefusal)
            return .pauseForRedis(.zero)
        }
        phase = .reloading(presented: presented, why: .afterRefusal(fingerprint: sent, base: base))
        return .reload
    }

    /// Redis wrote the holder's credential with `fence`.
    mutating func committed(fence: Int64) -> Action {
        markReachable()
        guard case .committing(_, let credential, _) = phase else { return unexpected() }
        if let pending, !pending.isSuperseded(byFence: fence) {
            // A sign-in or sign-out made meanwhile is still owed, and wins once written.
        } else {
            pending = nil
            newest = Record(fence: fence, credential: credential)
        }
        notes.append(.refreshed)
        return .finish(credential)
    }

    /// Redis refused the holder's write: `stored` has a newer fence (a later lease holder's, or a
    /// sign-in's). It wins; the credential this refresh obtained is dropped.
    mutating func commitRefused(stored: Record?, now: Date) -> Action {
        markReachable()
        guard case .committing(_, let credential, _) = phase else { return unexpected() }
        notes.append(.staleWriteRefused)
        observe(stored)
        guard let newest else { return .finish(credential) }
        guard let winner = newest.credential else { return fail(.signedOut) }
        return .finish(winner)
    }

    /// The refusal was recorded (and announced): the refresh fails as decided.
    mutating func refusalRecorded(fingerprint: String) -> Action {
        markReachable()
        guard case .refusing(_, let failure) = phase else { return unexpected() }
        notes.append(.refusalRecorded)
        newest?.refused = fingerprint
        return fail(failure)
    }

    /// The refusal was not recorded: a record newer than the refresh's base was written.
    mutating func refusalSuperseded(stored: Record?, now: Date) -> Action {
        markReachable()
        guard case .refusing(let presented, let failure) = phase else { return unexpected() }
        observe(stored)
        if let known = adoptable(instead: presented, now: now) {
            notes.append(.adopted)
            return .finish(known)
        }
        return fail(failure)
    }

    /// A Redis call of the refresh in flight (or a write-back) found Redis unreachable.
    mutating func redisUnreachable(now: Date) -> Action? {
        markUnreachable()
        pending?.deferred = true
        let since = outageSince ?? now
        if isRefreshing { outageSince = since }
        switch phase {
        case .idle, .waiting, .callingEndpoint, .waitingAfterLoneRefusal:
            return nil
        case .writingBack(let presented), .acquiring(let presented), .reloading(let presented, .hint),
            .reloading(let presented, .leaseOver):
            if !presented.isExpired(within: .zero, at: now),
                presented.isExpired(within: presented.refreshLeeway(upTo: authenticatorLeeway), at: now),
                keptWhileAway != presented.accessToken
            {
                // Renewed ahead of its expiry: kept, not renewed alone. Asked again for the same
                // token, the server has refused it: then it is treated as expired.
                keptWhileAway = presented.accessToken
                notes.append(.keptWhileRedisAway)
                return .finish(presented)
            }
            notes.append(.waitingForRedis)
            phase = .awaitingRedis(presented: presented, resume: .lease)
            return .pauseForRedis(redisRetryInterval)
        case .awaitingRedis(let presented, let resume):
            guard now.timeIntervalSince(since) < Self.interval(outageWait) else {
                switch resume {
                case .lease: return refreshAlone(presented)
                case .loneRefusal: return fail(.endpointError)
                }
            }
            return .pauseForRedis(redisRetryInterval)
        case .reloading(let presented, .afterLoneRefusal):
            guard now.timeIntervalSince(since) < Self.interval(outageWait) else { return fail(.endpointError) }
            phase = .awaitingRedis(presented: presented, resume: .loneRefusal)
            return .pauseForRedis(redisRetryInterval)
        case .reloading(_, .afterRefusal), .refusing:
            // The endpoint's refusal stands; it could not be recorded.
            if case .refusing(_, let failure) = phase { return fail(failure) }
            return fail(.endpointError)
        case .committing(_, let credential, let base):
            // Issued but not written: owed to Redis, never lost.
            pending = makePending(credential, .refreshed(base: base))
            newest = Record(fence: base, credential: credential)
            return .finish(credential)
        }
    }

    /// A pause for Redis ended: try again what found it unreachable.
    mutating func redisRetryDue(now: Date) -> Action {
        guard case .awaitingRedis(let presented, let resume) = phase else { return unexpected() }
        switch resume {
        case .lease:
            // The phase stays `awaitingRedis` for the lease script: another unreachable keeps
            // the time the outage was first seen.
            return .acquireLease(sending: Self.fingerprint(of: sendable(presented)))
        case .loneRefusal:
            phase = .reloading(presented: presented, why: .afterLoneRefusal(waited: false))
            return .reload
        }
    }

    /// The refresh in flight ended (its action was `.finish` or `.fail`, or it threw).
    mutating func refreshEnded() {
        phase = .idle
    }

    // MARK: Rules

    /// Takes in a record read from Redis: a newer fence replaces the newest seen; a lower one
    /// means Redis lost its data, and the newest seen is owed back to it.
    private mutating func observe(_ stored: Record?) {
        let stored = stored ?? .missing
        guard let known = newest else {
            if stored.fence > 0 { newest = stored }
            return
        }
        if stored.fence > known.fence {
            // A sign-in or sign-out still owed wins over whatever is stored, once it lands.
            if let pending, !pending.isSuperseded(byFence: stored.fence) { return }
            newest = stored
            pending = nil
        } else if stored.fence == known.fence {
            // A refusal, or a mark in flight, changes no fence.
            newest?.refused = stored.refused
            newest?.inFlight = stored.inFlight
        } else if stored.fence < known.fence, pending == nil {
            pending = makePending(known.credential, .restore(fence: known.fence))
        }
    }

    /// Records `stored` and ends the refresh if the record settles it: a newer credential that
    /// will do instead of `presented` (adopted), or a refusal of the refresh token this process
    /// would send. `nil`: go on.
    private mutating func adoptOrRefuse(_ stored: Record?, instead presented: OAuth2Credential, now: Date) -> Action? {
        observe(stored)
        if let known = adoptable(instead: presented, now: now) {
            notes.append(.adopted)
            return .finish(known)
        }
        let refused = stored?.refused ?? newest?.refused
        if let refused, refused == Self.fingerprint(of: sendable(presented)) {
            notes.append(.refusalAdopted)
            return fail(.refused)
        }
        return nil
    }

    /// The presented credential of a refresh taking the lease (also one retrying it while Redis
    /// is unreachable), whose phase becomes `acquiring` again; `nil` in any other phase.
    private var acquiringPresented: OAuth2Credential? {
        mutating get {
            switch phase {
            case .acquiring(let presented), .awaitingRedis(let presented, .lease):
                phase = .acquiring(presented: presented)
                return presented
            default:
                return nil
            }
        }
    }

    /// The credential whose refresh token this process sends for `presented`: the newest it has
    /// (never an older one).
    private func sendable(_ presented: OAuth2Credential) -> OAuth2Credential {
        pending?.credential ?? newest?.credential ?? presented
    }

    /// Takes the lease next.
    private mutating func acquire(_ presented: OAuth2Credential) -> Action {
        phase = .acquiring(presented: presented)
        return .acquireLease(sending: Self.fingerprint(of: sendable(presented)))
    }

    /// Redis stayed away past ``outageWait``: renew alone, from the newest this process has.
    private mutating func refreshAlone(_ presented: OAuth2Credential) -> Action {
        let base = newest?.fence ?? 0
        let current = sendable(presented)
        phase = .callingEndpoint(presented: presented, fence: nil, base: base, sent: Self.fingerprint(of: current))
        return .callEndpoint(current)
    }

    /// `duration` in seconds, for `Date` arithmetic.
    private static func interval(_ duration: Duration) -> TimeInterval {
        let (seconds, attoseconds) = duration.components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }

    /// The fingerprint of `credential`'s refresh token: all the record keeps of it, never the
    /// token (a SHA-1 of it under a prefix, cut to 96 bits; a refresh token is long and random).
    static func fingerprint(of credential: OAuth2Credential) -> String {
        String(SHA1.hex(Array(("urltask-fleet-refresh:" + (credential.refreshToken ?? "")).utf8)).prefix(24))
    }

    private func adoptable(instead presented: OAuth2Credential, now: Date) -> OAuth2Credential? {
        guard let known = newest?.credential, known.accessToken != presented.accessToken,
            !known.isExpired(within: leeway, at: now)
        else { return nil }
        return known
    }

    private mutating func makePending(_ credential: OAuth2Credential?, _ kind: Pending.Kind) -> Pending {
        nextPendingID += 1
        let write = Pending(id: nextPendingID, credential: credential, kind: kind)
        pending = write
        return write
    }

    private mutating func fail(_ failure: Failure) -> Action {
        .fail(failure)
    }

    /// An answer for a phase that is not waiting for it (a driver bug): end the refresh.
    private mutating func unexpected() -> Action {
        .fail(.noProgress)
    }

    private mutating func markReachable() {
        if !reachable { notes.append(.redisReachable) }
        outageSince = nil
        reachable = true
    }

    private mutating func markUnreachable() {
        if reachable { notes.append(.redisUnreachable) }
        reachable = false
    }

    /// Two credentials are the same one when their access tokens are (a round trip through JSON
    /// may change a date's last bit; a token never changes).
    static func same(_ a: OAuth2Credential?, _ b: OAuth2Credential?) -> Bool {
        a?.accessToken == b?.accessToken && a?.refreshToken == b?.refreshToken
    }
}
