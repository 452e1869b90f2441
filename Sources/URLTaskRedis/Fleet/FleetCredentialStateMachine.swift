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
struct FleetCredentialStateMachine: Sendable {
    /// The fleet's record: the credential (`nil`: signed out) and the fence it was written with.
    /// Fence 0 is "nothing stored".
    struct Record: Sendable, Equatable {
        var fence: Int64
        var credential: OAuth2Credential?

        static let missing = Record(fence: 0, credential: nil)
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
        /// The lease changed hands this many times without a new credential.
        case noProgress
    }

    /// What the driver does next for the refresh in flight.
    enum Action: Sendable, Equatable {
        /// Run the write `pending` owes (then report ``writeBackAccepted(id:fence:)``,
        /// ``writeBackRefused(id:stored:)`` or ``redisUnreachable()``).
        case writeBack(Pending)
        /// Run the lease script, telling it the fence of ``newest`` (``leaseWon(fence:stored:now:)``,
        /// ``leaseLost(stored:remaining:now:)``, ``leaseNotTaken(stored:now:)``).
        case acquireLease
        /// Ask the token endpoint to renew this credential (``endpointAnswered(_:)``,
        /// ``endpointFailed(requiresSignIn:)``).
        case callEndpoint(OAuth2Credential)
        /// Write the holder's credential with its lease fence (``committed(fence:)``,
        /// ``commitRefused(stored:now:)``).
        case commit(fence: Int64, credential: OAuth2Credential)
        /// Wait for a message on the update channel announcing a fence above `after`, at most
        /// `within` (then ``waitEnded(timedOut:)``).
        case waitForUpdate(after: Int64, within: Duration)
        /// Read the record (``reloaded(_:now:)``).
        case reload
        /// The refresh's result: hand it to the authenticator (releasing the lease if still held).
        case finish(OAuth2Credential)
        /// The refresh fails.
        case fail(Failure)
    }

    private enum Phase: Sendable, Equatable {
        case idle
        /// Flushing a write owed before taking the lease.
        case writingBack(presented: OAuth2Credential)
        case acquiring(presented: OAuth2Credential)
        /// `fence` is the lease's (nil: refreshing alone, Redis away); `base` the record fence
        /// the refresh replaces.
        case callingEndpoint(presented: OAuth2Credential, fence: Int64?, base: Int64)
        case committing(presented: OAuth2Credential, credential: OAuth2Credential, base: Int64)
        case waiting(presented: OAuth2Credential)
        /// `afterRefusal`: the endpoint refused the refresh token (0: no; 1: first look at the
        /// record; 2: after waiting for an announcement).
        case reloading(presented: OAuth2Credential, afterRefusal: Int)
        /// The endpoint refused the refresh token and the record holds nothing newer: waiting for
        /// a process that owes Redis a newer one.
        case waitingAfterRefusal(presented: OAuth2Credential)
    }

    /// The newest record this process has seen (read, written, or made while Redis was away).
    private(set) var newest: Record?
    /// The write Redis owes, if any.
    private(set) var pending: Pending?
    /// Whether Redis answered the last call.
    private(set) var reachable = true
    /// Notes since the driver last took them.
    private(set) var notes: [FleetCredential.Event] = []
    private var phase = Phase.idle
    private var nextPendingID = 0
    /// Lease rounds lost in a row by the refresh in flight.
    private var roundsLost = 0
    /// Rounds lost after which a refresh gives up (each lasts at most a lease's life).
    let maximumRounds: Int
    /// A credential expiring within this long is renewed rather than adopted.
    let leeway: Duration

    /// How long a refresh whose refresh token was refused waits for a newer one to be announced
    /// (the lease's life: a write-back is retried well within it).
    let refusalWait: Duration

    init(maximumRounds: Int = 4, leeway: Duration = .seconds(1), refusalWait: Duration = .seconds(5)) {
        self.maximumRounds = maximumRounds
        self.leeway = leeway
        self.refusalWait = refusalWait
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
        if let newest, Self.same(newest.credential, credential) { return nil }
        let write = makePending(credential, .replace)
        newest = Record(fence: newest?.fence ?? 0, credential: credential)
        return write
    }

    // MARK: Write-backs

    /// Redis wrote `id`'s record with `fence` (the refresh's own write-back, or the background
    /// one: neither moves the refresh in flight, see ``continueAfterWriteBack()``).
    mutating func writeBackAccepted(id: Int, fence: Int64) {
        markReachable()
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

    /// The refresh's own write-back ended (written, refused or failed): on to the lease.
    mutating func continueAfterWriteBack() -> Action {
        guard case .writingBack(let presented) = phase else { return unexpected() }
        phase = .acquiring(presented: presented)
        return .acquireLease
    }

    // MARK: The refresh

    /// The authenticator asks to renew `presented`.
    mutating func refreshRequested(_ presented: OAuth2Credential, now: Date) -> Action {
        roundsLost = 0
        if let known = adoptable(instead: presented, now: now) {
            notes.append(.adopted)
            return .finish(known)
        }
        if let pending {
            phase = .writingBack(presented: presented)
            return .writeBack(pending)
        }
        phase = .acquiring(presented: presented)
        return .acquireLease
    }

    /// This process holds the lease, with `fence`; `stored` is the record as the lease was taken.
    mutating func leaseWon(fence: Int64, stored: Record?, now: Date) -> Action {
        markReachable()
        guard case .acquiring(let presented) = phase else { return unexpected() }
        if let adopted = adopt(stored, instead: presented, now: now) { return adopted }
        if let newest, newest.fence > 0, newest.credential == nil { return fail(.signedOut) }
        let base = newest?.fence ?? 0
        let current = newest?.credential ?? presented
        phase = .callingEndpoint(presented: presented, fence: fence, base: base)
        return .callEndpoint(current)
    }

    /// The lease script found a record newer than the newest this process knew, and took no
    /// lease: another process renewed the credential already (the usual case for every process
    /// but the first; it saves taking and releasing a lease).
    mutating func leaseNotTaken(stored: Record?, now: Date) -> Action {
        markReachable()
        guard case .acquiring(let presented) = phase else { return unexpected() }
        if let adopted = adopt(stored, instead: presented, now: now) { return adopted }
        // Newer but expiring: renew that one (the script takes the lease now that the fence it
        // is told is the stored one).
        roundsLost += 1
        guard roundsLost <= maximumRounds else { return fail(.noProgress) }
        return .acquireLease
    }

    /// Another process holds the lease for `remaining` more.
    mutating func leaseLost(stored: Record?, remaining: Duration, now: Date) -> Action {
        markReachable()
        guard case .acquiring(let presented) = phase else { return unexpected() }
        if let adopted = adopt(stored, instead: presented, now: now) { return adopted }
        roundsLost += 1
        guard roundsLost <= maximumRounds else { return fail(.noProgress) }
        // The lease ended between the script's two calls (PTTL of a key just gone): try again.
        guard remaining > .zero else { return .acquireLease }
        phase = .waiting(presented: presented)
        return .waitForUpdate(after: newest?.fence ?? 0, within: remaining)
    }

    /// The wait ended: a newer fence was announced, or the lease's life passed (`timedOut`).
    mutating func waitEnded(timedOut: Bool) -> Action {
        if case .waitingAfterRefusal(let presented) = phase {
            phase = .reloading(presented: presented, afterRefusal: 2)
            return .reload
        }
        guard case .waiting(let presented) = phase else { return unexpected() }
        if timedOut { notes.append(.leaseExpired) }
        phase = .reloading(presented: presented, afterRefusal: 0)
        return .reload
    }

    /// The record was read for the refresh in flight.
    mutating func reloaded(_ stored: Record?, now: Date) -> Action {
        markReachable()
        guard case .reloading(let presented, let afterRefusal) = phase else { return unexpected() }
        if let adopted = adopt(stored, instead: presented, now: now) { return adopted }
        if afterRefusal == 1 {
            // A process that refreshed while Redis was away may owe it the newer refresh token:
            // its write-back is announced like any write. Wait for it once, a lease's life.
            phase = .waitingAfterRefusal(presented: presented)
            return .waitForUpdate(after: newest?.fence ?? 0, within: refusalWait)
        }
        if afterRefusal > 1 { return fail(.endpointError) }
        // No new credential: the holder died or failed. Take the lease.
        phase = .acquiring(presented: presented)
        return .acquireLease
    }

    /// The token endpoint issued `credential`.
    mutating func endpointAnswered(_ credential: OAuth2Credential) -> Action {
        guard case .callingEndpoint(let presented, let fence, let base) = phase else { return unexpected() }
        guard let fence else {
            // Alone (Redis away): keep it, owed to Redis.
            pending = makePending(credential, .refreshed(base: base))
            newest = Record(fence: base, credential: credential)
            notes.append(.refreshedAlone)
            return finish(credential)
        }
        phase = .committing(presented: presented, credential: credential, base: base)
        return .commit(fence: fence, credential: credential)
    }

    /// The token endpoint refused or failed. A refusal that requires signing in may mean another
    /// process used the refresh token first (its lease expired while it waited for the
    /// endpoint): read the record once before giving up.
    mutating func endpointFailed(requiresSignIn: Bool) -> Action {
        guard case .callingEndpoint(let presented, let fence, _) = phase else { return unexpected() }
        guard requiresSignIn, fence != nil else { return fail(.endpointError) }
        phase = .reloading(presented: presented, afterRefusal: 1)
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
        return finish(credential)
    }

    /// Redis refused the holder's write: `stored` has a newer fence (a later lease holder's, or a
    /// sign-in's). It wins; the credential this refresh obtained is dropped.
    mutating func commitRefused(stored: Record?, now: Date) -> Action {
        markReachable()
        guard case .committing(_, let credential, _) = phase else { return unexpected() }
        notes.append(.staleWriteRefused)
        observe(stored)
        guard let newest else { return finish(credential) }
        guard let winner = newest.credential else { return fail(.signedOut) }
        return finish(winner)
    }

    /// A Redis call of the refresh in flight (or a write-back) found Redis unreachable.
    mutating func redisUnreachable() -> Action? {
        markUnreachable()
        pending?.deferred = true
        switch phase {
        case .idle, .waiting, .callingEndpoint:
            return nil
        case .writingBack(let presented), .acquiring(let presented), .reloading(let presented, 0):
            // Alone: from the newest this process has (never an older one).
            let base = newest?.fence ?? 0
            let current = pending?.credential ?? newest?.credential ?? presented
            phase = .callingEndpoint(presented: presented, fence: nil, base: base)
            return .callEndpoint(current)
        case .reloading, .waitingAfterRefusal:
            return fail(.endpointError)
        case .committing(_, let credential, let base):
            // Issued but not written: owed to Redis, never lost.
            pending = makePending(credential, .refreshed(base: base))
            newest = Record(fence: base, credential: credential)
            return finish(credential)
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
        } else if stored.fence < known.fence, pending == nil {
            pending = makePending(known.credential, .restore(fence: known.fence))
        }
    }

    /// The newest credential seen, when it is not `presented` and still good: another process
    /// (or this one) renewed it already, so the endpoint is not asked.
    /// Records `stored` and adopts the newest credential known if it will do instead of
    /// `presented`: the action that ends the refresh, or `nil` to go on.
    private mutating func adopt(_ stored: Record?, instead presented: OAuth2Credential, now: Date) -> Action? {
        observe(stored)
        guard let known = adoptable(instead: presented, now: now) else { return nil }
        notes.append(.adopted)
        return finish(known)
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

    private mutating func finish(_ credential: OAuth2Credential) -> Action {
        .finish(credential)
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
