import Foundation
import URLTaskOAuth2
import XCTest

@testable import URLTaskRedis

/// The fleet credential's decisions, with no I/O: the lease won and lost, a holder that died,
/// a stale writer, Redis away and back.
final class FleetCredentialStateMachineTests: XCTestCase {
    typealias Machine = FleetCredentialStateMachine
    typealias Record = FleetCredentialStateMachine.Record

    private let now = Date(timeIntervalSince1970: 1_000_000)

    private func credential(_ n: Int, expiresIn seconds: TimeInterval = 3600) -> OAuth2Credential {
        OAuth2Credential(accessToken: "access-\(n)", refreshToken: "refresh-\(n)", expiresAt: now.addingTimeInterval(seconds))
    }

    /// The lease script's action when this process would send `credential`'s refresh token.
    private func lease(_ credential: OAuth2Credential) -> Machine.Action {
        .acquireLease(sending: Machine.fingerprint(of: credential))
    }

    /// A machine that loaded `credential(0)` from the record with fence 1.
    private func loadedMachine() -> Machine {
        var machine = Machine()
        XCTAssertEqual(machine.loaded(Record(fence: 1, credential: credential(0))), credential(0))
        _ = machine.takeNotes()
        return machine
    }

    func testTheLeaseHolderRefreshesWritesWithItsFenceAndFinishes() {
        var machine = loadedMachine()
        XCTAssertEqual(machine.refreshRequested(credential(0), now: now), lease(credential(0)))
        XCTAssertEqual(
            machine.leaseWon(fence: 7, stored: Record(fence: 1, credential: credential(0)), now: now), .callEndpoint(credential(0)))
        XCTAssertEqual(machine.endpointAnswered(credential(1)), .commit(fence: 7, credential: credential(1)))
        XCTAssertEqual(machine.committed(fence: 7), .finish(credential(1)))
        machine.refreshEnded()
        XCTAssertEqual(machine.newest, Record(fence: 7, credential: credential(1)))
        XCTAssertNil(machine.pending)
        XCTAssertEqual(machine.takeNotes(), [.leaseWon, .refreshed])
        // The authenticator then saves what the refresh returned: nothing to write.
        XCTAssertNil(machine.saveRequested(credential(1)))
    }

    func testAHolderFindingANewerCredentialStoredTakesItWithoutAskingTheEndpoint() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        XCTAssertEqual(machine.leaseWon(fence: 9, stored: Record(fence: 8, credential: credential(1)), now: now), .finish(credential(1)))
        XCTAssertEqual(machine.takeNotes(), [.adopted])
        XCTAssertEqual(machine.newest, Record(fence: 8, credential: credential(1)))
    }

    func testAHolderFindingANewerButExpiredCredentialRenewsThatOne() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        let expired = credential(1, expiresIn: -10)
        XCTAssertEqual(machine.leaseWon(fence: 9, stored: Record(fence: 8, credential: expired), now: now), .callEndpoint(expired))
    }

    func testALoserWaitsForTheAnnouncementThenTakesTheNewCredential() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        XCTAssertEqual(
            machine.leaseLost(stored: Record(fence: 1, credential: credential(0)), remaining: .milliseconds(800), now: now),
            .waitForUpdate(within: .milliseconds(800)))
        XCTAssertEqual(machine.waitEnded(timedOut: false, now: now), .reload)
        XCTAssertEqual(machine.reloaded(Record(fence: 2, credential: credential(1)), now: now), .finish(credential(1)))
        XCTAssertEqual(machine.takeNotes(), [.adopted])
    }

    func testAHolderThatDiedIsReplacedOnceItsLeaseExpires() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        _ = machine.leaseLost(stored: Record(fence: 1, credential: credential(0)), remaining: .seconds(1), now: now)
        // No announcement within the lease's life: the record is read, unchanged, and the lease taken.
        XCTAssertEqual(machine.waitEnded(timedOut: true, now: now), .reload)
        XCTAssertEqual(machine.reloaded(Record(fence: 1, credential: credential(0)), now: now), lease(credential(0)))
        XCTAssertEqual(
            machine.leaseWon(fence: 3, stored: Record(fence: 1, credential: credential(0)), now: now), .callEndpoint(credential(0)))
        XCTAssertEqual(machine.endpointAnswered(credential(1)), .commit(fence: 3, credential: credential(1)))
        XCTAssertEqual(machine.takeNotes(), [.leaseExpired, .leaseWon])
    }

    func testALeaseGoneBetweenTheScriptsCallsIsTriedAgainAtOnce() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        XCTAssertEqual(machine.leaseLost(stored: nil, remaining: .milliseconds(-2), now: now), lease(credential(0)))
    }

    func testARefreshGivesUpAfterLosingTooManyRoundsWithoutANewCredential() {
        var machine = Machine(maximumRounds: 2)
        _ = machine.loaded(Record(fence: 1, credential: credential(0)))
        _ = machine.refreshRequested(credential(0), now: now)
        for _ in 0..<2 {
            XCTAssertEqual(
                machine.leaseLost(stored: Record(fence: 1, credential: credential(0)), remaining: .seconds(1), now: now),
                .waitForUpdate(within: .seconds(1)))
            _ = machine.waitEnded(timedOut: true, now: now)
            XCTAssertEqual(machine.reloaded(Record(fence: 1, credential: credential(0)), now: now), lease(credential(0)))
        }
        XCTAssertEqual(
            machine.leaseLost(stored: Record(fence: 1, credential: credential(0)), remaining: .seconds(1), now: now), .fail(.noProgress))
    }

    func testAStaleWriterIsRefusedByTheFenceAndTakesTheNewerCredential() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        _ = machine.leaseWon(fence: 2, stored: Record(fence: 1, credential: credential(0)), now: now)
        XCTAssertEqual(machine.endpointAnswered(credential(1)), .commit(fence: 2, credential: credential(1)))
        // Its lease expired while the endpoint answered; a later holder wrote with fence 3.
        XCTAssertEqual(machine.commitRefused(stored: Record(fence: 3, credential: credential(2)), now: now), .finish(credential(2)))
        XCTAssertEqual(machine.newest, Record(fence: 3, credential: credential(2)))
        XCTAssertEqual(machine.takeNotes(), [.leaseWon, .staleWriteRefused])
    }

    func testAnInvalidGrantAfterAnotherProcessRotatedTheTokenTakesItsCredential() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        _ = machine.leaseWon(fence: 3, stored: Record(fence: 1, credential: credential(0)), now: now)
        XCTAssertEqual(machine.endpointFailed(requiresSignIn: true, now: now), .reload)
        XCTAssertEqual(machine.reloaded(Record(fence: 2, credential: credential(1)), now: now), .finish(credential(1)))
    }

    func testAnInvalidGrantWithNothingNewerIsRecordedForTheFleetAndStands() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        _ = machine.leaseWon(fence: 3, stored: Record(fence: 1, credential: credential(0)), now: now)
        XCTAssertEqual(machine.endpointFailed(requiresSignIn: true, now: now), .reload)
        // Nothing newer stored: the refusal is recorded, then stands.
        let fingerprint = Machine.fingerprint(of: credential(0))
        XCTAssertEqual(
            machine.reloaded(Record(fence: 1, credential: credential(0)), now: now), .recordRefusal(fingerprint: fingerprint, base: 1))
        XCTAssertEqual(machine.refusalRecorded(fingerprint: fingerprint), .fail(.endpointError))
        XCTAssertEqual(machine.takeNotes(), [.leaseWon, .refusalRecorded])
        machine.refreshEnded()
        // The next refresh of that token fails without a token request.
        XCTAssertEqual(machine.refreshRequested(credential(0), now: now), lease(credential(0)))
        XCTAssertEqual(
            machine.leaseRefused(stored: Record(fence: 1, credential: credential(0), refused: fingerprint), now: now), .fail(.refused))
        machine.refreshEnded()
        _ = machine.refreshRequested(credential(0), now: now)
        _ = machine.leaseWon(fence: 4, stored: Record(fence: 1, credential: credential(0)), now: now)
        XCTAssertEqual(machine.endpointFailed(requiresSignIn: false, now: now), .fail(.endpointError))
    }

    /// Drives a refresh of `presented` (expired) while Redis stays unreachable past the outage
    /// wait: the pause, then the lone call.
    private func refreshAloneAfterTheOutageWait(_ machine: inout Machine, _ presented: OAuth2Credential, sending: OAuth2Credential) {
        XCTAssertEqual(machine.refreshRequested(presented, now: now), lease(sending))
        XCTAssertEqual(machine.redisUnreachable(now: now), .pauseForRedis(.milliseconds(250)))
        XCTAssertEqual(machine.redisRetryDue(now: now.addingTimeInterval(0.25)), lease(sending))
        XCTAssertEqual(machine.redisUnreachable(now: now.addingTimeInterval(0.3)), .pauseForRedis(.milliseconds(250)))
        XCTAssertEqual(machine.redisRetryDue(now: now.addingTimeInterval(10)), lease(sending))
        XCTAssertEqual(machine.redisUnreachable(now: now.addingTimeInterval(10)), .callEndpoint(sending))
    }

    func testRedisDownAtAnExpiryWaitsForItThenRefreshesAloneThenWritesBack() {
        var machine = Machine()
        let expired = credential(0, expiresIn: -1)
        _ = machine.loaded(Record(fence: 1, credential: expired))
        _ = machine.takeNotes()
        refreshAloneAfterTheOutageWait(&machine, expired, sending: expired)
        XCTAssertEqual(machine.endpointAnswered(credential(1)), .finish(credential(1)))
        machine.refreshEnded()
        XCTAssertEqual(machine.takeNotes(), [.redisUnreachable, .waitingForRedis, .refreshedAlone])
        guard let owed = machine.pending else { return XCTFail("the refreshed credential is owed to Redis") }
        XCTAssertEqual(owed.credential, credential(1))
        XCTAssertEqual(owed.kind, .refreshed(base: 1))
        XCTAssertNil(machine.saveRequested(credential(1)), "the authenticator's save of it is no new write")
        // Redis is back: the next refresh writes it back first, then takes the lease.
        XCTAssertEqual(machine.refreshRequested(credential(1), now: now.addingTimeInterval(4000)), .writeBack(owed))
        machine.writeBackAccepted(id: owed.id, fence: 5)
        XCTAssertEqual(machine.continueAfterWriteBack(), lease(credential(1)))
        XCTAssertEqual(machine.newest, Record(fence: 5, credential: credential(1)))
        XCTAssertNil(machine.pending)
        XCTAssertEqual(machine.takeNotes(), [.redisReachable, .wroteBack])
    }

    func testTheFallbackRenewsTheNewestCredentialSeenNeverAnOlderOne() {
        var machine = loadedMachine()
        // Another process's credential 1 was seen (and has expired since); the authenticator still presents 0.
        _ = machine.loaded(Record(fence: 2, credential: credential(1, expiresIn: -1)))
        refreshAloneAfterTheOutageWait(&machine, credential(0, expiresIn: -1), sending: credential(1, expiresIn: -1))
        // And a fresh newest one is handed out without any refresh at all.
        machine.refreshEnded()
        _ = machine.loaded(Record(fence: 3, credential: credential(2)))
        XCTAssertEqual(machine.refreshRequested(credential(0), now: now), .finish(credential(2)))
    }

    func testALoadWhileRedisIsAwayServesTheNewestSeen() {
        var fresh = Machine()
        XCTAssertTrue(fresh.loadFailed() == nil, "nothing seen: the load fails")
        var machine = loadedMachine()
        XCTAssertEqual(machine.loadFailed(), .some(credential(0)))
    }

    func testACredentialIssuedButNotWrittenIsOwedNotLost() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        _ = machine.leaseWon(fence: 2, stored: Record(fence: 1, credential: credential(0)), now: now)
        _ = machine.endpointAnswered(credential(1))
        XCTAssertEqual(machine.redisUnreachable(now: now), .finish(credential(1)))
        XCTAssertEqual(machine.pending?.credential, credential(1))
        XCTAssertEqual(machine.pending?.kind, .refreshed(base: 1))
    }

    func testAWriteBackRefusedBecauseANewerRecordWasWrittenTakesThatRecord() {
        var machine = loadedMachine()
        refreshAloneAfterTheOutageWait(&machine, credential(0, expiresIn: -1), sending: credential(0))
        _ = machine.endpointAnswered(credential(1))
        machine.refreshEnded()
        guard let owed = machine.pending else { return XCTFail("owed") }
        machine.writeBackRefused(id: owed.id, stored: Record(fence: 4, credential: credential(2)))
        XCTAssertNil(machine.pending)
        XCTAssertEqual(machine.newest, Record(fence: 4, credential: credential(2)))
    }

    func testRedisThatLostItsDataIsGivenTheNewestRecordBack() {
        var machine = Machine()
        _ = machine.loaded(Record(fence: 6, credential: credential(3)))
        // Restarted without persistence: nothing stored.
        XCTAssertEqual(machine.loaded(nil), credential(3))
        XCTAssertEqual(machine.pending?.kind, .restore(fence: 6))
        XCTAssertEqual(machine.pending?.credential, credential(3))
    }

    func testASignInOwedWinsOverWhatRedisHolds() {
        var machine = loadedMachine()
        guard let write = machine.saveRequested(credential(9)) else { return XCTFail("a sign-in is written") }
        XCTAssertEqual(write.kind, .replace)
        // Redis holds a later refresh of the old credential; the sign-in is still owed and still newest.
        _ = machine.loaded(Record(fence: 4, credential: credential(1)))
        XCTAssertEqual(machine.pending, write)
        XCTAssertEqual(machine.newest?.credential, credential(9))
        machine.writeBackAccepted(id: write.id, fence: 5)
        XCTAssertEqual(machine.newest, Record(fence: 5, credential: credential(9)))
    }

    func testASignOutStoredElsewhereEndsTheRefresh() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        XCTAssertEqual(machine.leaseWon(fence: 3, stored: Record(fence: 2, credential: nil), now: now), .fail(.signedOut))
    }

    func testTheBackgroundWriteBackLandingFirstDoesNotMoveTheRefresh() {
        var machine = loadedMachine()
        refreshAloneAfterTheOutageWait(&machine, credential(0, expiresIn: -1), sending: credential(0))
        _ = machine.endpointAnswered(credential(1))
        machine.refreshEnded()
        guard let owed = machine.pending else { return XCTFail("owed") }
        XCTAssertEqual(machine.refreshRequested(credential(1), now: now.addingTimeInterval(4000)), .writeBack(owed))
        // The background loop's write of the same record lands first; the refresh's own is then refused.
        machine.writeBackAccepted(id: owed.id, fence: 2)
        machine.writeBackRefused(id: owed.id, stored: Record(fence: 2, credential: credential(1)))
        XCTAssertEqual(machine.continueAfterWriteBack(), lease(credential(1)))
        XCTAssertEqual(machine.newest, Record(fence: 2, credential: credential(1)))
    }

    func testASignInMadeWhileTheHolderCommitsStaysTheNewest() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        _ = machine.leaseWon(fence: 2, stored: Record(fence: 1, credential: credential(0)), now: now)
        _ = machine.endpointAnswered(credential(1))
        let signIn = machine.saveRequested(credential(9))
        XCTAssertEqual(machine.committed(fence: 2), .finish(credential(1)))
        XCTAssertEqual(machine.pending, signIn, "the sign-in is still written, after the refresh's write")
        XCTAssertEqual(machine.newest?.credential, credential(9))
    }

    func testALoneRefusalWaitsForRedisThenForAWriteBackOwedByAnotherProcess() {
        var machine = loadedMachine()
        refreshAloneAfterTheOutageWait(&machine, credential(0, expiresIn: -1), sending: credential(0))
        // Refused alone: Redis is read as soon as it answers, not signed out at once.
        XCTAssertEqual(machine.endpointFailed(requiresSignIn: true, now: now), .pauseForRedis(.zero))
        XCTAssertEqual(machine.redisRetryDue(now: now), .reload)
        XCTAssertEqual(machine.redisUnreachable(now: now), .pauseForRedis(.milliseconds(250)))
        XCTAssertEqual(machine.redisRetryDue(now: now), .reload)
        XCTAssertEqual(machine.reloaded(Record(fence: 1, credential: credential(0)), now: now), .waitForUpdate(within: .seconds(5)))
        XCTAssertEqual(machine.waitEnded(timedOut: false, now: now), .reload)
        XCTAssertEqual(machine.reloaded(Record(fence: 4, credential: credential(1)), now: now), .finish(credential(1)))
    }

    func testALoneRefusalWithRedisAwayPastTheOutageWaitStands() {
        var machine = loadedMachine()
        refreshAloneAfterTheOutageWait(&machine, credential(0, expiresIn: -1), sending: credential(0))
        XCTAssertEqual(machine.endpointFailed(requiresSignIn: true, now: now), .pauseForRedis(.zero))
        XCTAssertEqual(machine.redisRetryDue(now: now), .reload)
        XCTAssertEqual(machine.redisUnreachable(now: now), .pauseForRedis(.milliseconds(250)))
        XCTAssertEqual(machine.redisRetryDue(now: now.addingTimeInterval(11)), .reload)
        XCTAssertEqual(machine.redisUnreachable(now: now.addingTimeInterval(11)), .fail(.endpointError))
    }

    func testAStillValidTokenIsKeptWhileRedisIsAwayThenTreatedAsExpiredWhenAskedAgain() {
        var machine = loadedMachine()
        // Presented an hour before its expiry: the server refused it (a 401). Redis is waited for.
        XCTAssertEqual(machine.refreshRequested(credential(0), now: now), lease(credential(0)))
        XCTAssertEqual(machine.redisUnreachable(now: now), .pauseForRedis(.milliseconds(250)))
        machine.refreshEnded()
        _ = machine.loaded(Record(fence: 1, credential: credential(0)))
        _ = machine.takeNotes()
        // Presented 30 s before its expiry, within the authenticator's leeway: renewed ahead of time.
        let soon = now.addingTimeInterval(3600 - 30)
        XCTAssertEqual(machine.refreshRequested(credential(0), now: soon), lease(credential(0)))
        XCTAssertEqual(machine.redisUnreachable(now: soon), .finish(credential(0)), "no lone refresh while the token is valid")
        machine.refreshEnded()
        // Asked again for the same token (the server refused it): it waits for Redis.
        XCTAssertEqual(machine.refreshRequested(credential(0), now: soon), lease(credential(0)))
        XCTAssertEqual(machine.redisUnreachable(now: soon), .pauseForRedis(.milliseconds(250)))
        XCTAssertEqual(machine.redisRetryDue(now: soon.addingTimeInterval(3)), lease(credential(0)))
        // Redis is back within the outage wait: the lease, as ever.
        XCTAssertEqual(
            machine.leaseWon(fence: 2, stored: Record(fence: 1, credential: credential(0)), now: soon.addingTimeInterval(3)),
            .callEndpoint(credential(0)))
        XCTAssertEqual(machine.takeNotes(), [.redisUnreachable, .keptWhileRedisAway, .waitingForRedis, .redisReachable, .leaseWon])
    }

    func testATokenInFlightAtATakeoverIsResentOnceThenPresumedSpent() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        // The holder died with it in flight: the second holder resends it.
        XCTAssertEqual(
            machine.leaseWon(fence: 3, sends: 2, stored: Record(fence: 1, credential: credential(0)), now: now),
            .callEndpoint(credential(0)))
        machine.refreshEnded()
        // A third holder of the same token: presumed spent, recorded, and the refresh fails.
        _ = machine.refreshRequested(credential(0), now: now)
        let fingerprint = Machine.fingerprint(of: credential(0))
        XCTAssertEqual(
            machine.leaseWon(fence: 4, sends: 3, stored: Record(fence: 1, credential: credential(0)), now: now),
            .recordRefusal(fingerprint: fingerprint, base: 1))
        XCTAssertEqual(machine.refusalRecorded(fingerprint: fingerprint), .fail(.presumedSpent))
        // Strict servers: no resend at all.
        var strict = Machine(allowedSends: 1)
        _ = strict.loaded(Record(fence: 1, credential: credential(0)))
        _ = strict.refreshRequested(credential(0), now: now)
        XCTAssertEqual(
            strict.leaseWon(fence: 3, sends: 2, stored: Record(fence: 1, credential: credential(0)), now: now),
            .recordRefusal(fingerprint: fingerprint, base: 1))
    }

    func testARefusalRecordedByAnotherProcessEndsAWaitWithoutATokenRequest() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        _ = machine.leaseLost(stored: Record(fence: 1, credential: credential(0)), remaining: .seconds(10), now: now)
        XCTAssertEqual(machine.waitEnded(timedOut: false, now: now.addingTimeInterval(1)), .reload)
        let refused = Record(fence: 1, credential: credential(0), refused: Machine.fingerprint(of: credential(0)))
        XCTAssertEqual(machine.reloaded(refused, now: now.addingTimeInterval(1)), .fail(.refused))
        XCTAssertEqual(machine.takeNotes(), [.refusalAdopted])
    }

    func testAHintThatBringsNothingNewGoesBackToWaitingWithoutLosingARound() {
        var machine = Machine(maximumRounds: 1)
        _ = machine.loaded(Record(fence: 1, credential: credential(0)))
        _ = machine.refreshRequested(credential(0), now: now)
        XCTAssertEqual(
            machine.leaseLost(stored: Record(fence: 1, credential: credential(0)), remaining: .seconds(10), now: now),
            .waitForUpdate(within: .seconds(10)))
        // A bogus announcement, many times: each costs one read, and the deadline stays.
        for second in 1...5 {
            let at = now.addingTimeInterval(TimeInterval(second))
            XCTAssertEqual(machine.waitEnded(timedOut: false, now: at), .reload)
            XCTAssertEqual(
                machine.reloaded(Record(fence: 1, credential: credential(0)), now: at), .waitForUpdate(within: .seconds(10 - second)))
        }
        // The holder's real write ends it.
        XCTAssertEqual(machine.waitEnded(timedOut: false, now: now.addingTimeInterval(6)), .reload)
        XCTAssertEqual(
            machine.reloaded(Record(fence: 2, credential: credential(1)), now: now.addingTimeInterval(6)), .finish(credential(1)))
    }

    func testAnInvalidGrantTakesANewerCredentialWrittenMeanwhileInsteadOfRecordingTheRefusal() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        _ = machine.leaseWon(fence: 3, stored: Record(fence: 1, credential: credential(0)), now: now)
        XCTAssertEqual(machine.endpointFailed(requiresSignIn: true, now: now), .reload)
        let fingerprint = Machine.fingerprint(of: credential(0))
        XCTAssertEqual(
            machine.reloaded(Record(fence: 1, credential: credential(0)), now: now), .recordRefusal(fingerprint: fingerprint, base: 1))
        // The script found a newer record (a late holder's write): taken.
        XCTAssertEqual(machine.refusalSuperseded(stored: Record(fence: 4, credential: credential(1)), now: now), .finish(credential(1)))
    }

    func testOnlyAWriteThatWasOwedIsReportedAsWrittenBack() {
        var machine = loadedMachine()
        guard let signIn = machine.saveRequested(credential(5)) else { return XCTFail("written") }
        machine.writeBackAccepted(id: signIn.id, fence: 2)
        XCTAssertEqual(machine.takeNotes(), [], "a sign-in written at once")
        guard let signOut = machine.saveRequested(nil) else { return XCTFail("written") }
        machine.writeBackUnreachable()
        machine.writeBackAccepted(id: signOut.id, fence: 3)
        XCTAssertEqual(machine.takeNotes(), [.redisUnreachable, .redisReachable, .wroteBack])
        XCTAssertEqual(machine.newest, Record(fence: 3, credential: nil))
    }

    func testANewerRecordFoundWithoutTakingTheLeaseIsTaken() {
        var machine = loadedMachine()
        _ = machine.refreshRequested(credential(0), now: now)
        XCTAssertEqual(machine.leaseNotTaken(stored: Record(fence: 2, credential: credential(1)), now: now), .finish(credential(1)))
        XCTAssertEqual(machine.takeNotes(), [.adopted])
    }

    func testANewerButExpiringRecordFoundWithoutTheLeaseIsRenewedUnderTheLease() {
        var machine = loadedMachine()
        let expiring = credential(1, expiresIn: 0.5)
        _ = machine.refreshRequested(credential(0), now: now)
        XCTAssertEqual(machine.leaseNotTaken(stored: Record(fence: 2, credential: expiring), now: now), lease(expiring))
        XCTAssertEqual(machine.newest?.fence, 2, "the script is told fence 2 next time, and takes the lease")
        XCTAssertEqual(machine.leaseWon(fence: 3, stored: Record(fence: 2, credential: expiring), now: now), .callEndpoint(expiring))
    }
}
