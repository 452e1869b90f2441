import Foundation
import URLTaskOAuth2
import XCTest

@testable import URLTaskRedis

/// The fleet credential's decisions about a sign-out, with no I/O: what its revocation revokes
/// (what this process's sign-out took out of the record, or nothing), and when a sign-out
/// another process announced makes this one forget its credential.
final class FleetSignOutStateMachineTests: XCTestCase {
    typealias Machine = FleetCredentialStateMachine
    typealias Record = FleetCredentialStateMachine.Record

    private let expiry = Date().addingTimeInterval(3600)

    private func credential(_ n: Int) -> OAuth2Credential {
        OAuth2Credential(accessToken: "access-\(n)", refreshToken: "refresh-\(n)", expiresAt: expiry)
    }

    private func loadedMachine() -> Machine {
        var machine = Machine()
        XCTAssertEqual(machine.loaded(Record(fence: 1, credential: credential(0))), credential(0))
        _ = machine.takeNotes()
        return machine
    }

    func testASignOutRevokesWhatItsWriteTookOutOfTheRecordOnce() {
        var machine = loadedMachine()
        guard let signOut = machine.saveRequested(nil) else { return XCTFail("a sign-out is written") }
        machine.writeBackAccepted(id: signOut.id, fence: 2, replaced: .some(credential(0)))
        XCTAssertEqual(machine.takeSignedOutCredential(), credential(0))
        XCTAssertNil(machine.takeSignedOutCredential(), "taken once")
    }

    func testTheRecordsCredentialIsRevokedWhenItIsNewerThanTheOneThisProcessKnew() {
        var machine = loadedMachine()
        guard let signOut = machine.saveRequested(nil) else { return XCTFail("a sign-out is written") }
        // Another process refreshed meanwhile: the record held credential 1, which this sign-out removed.
        machine.writeBackAccepted(id: signOut.id, fence: 3, replaced: .some(credential(1)))
        XCTAssertEqual(machine.takeSignedOutCredential(), credential(1))
    }

    func testASignOutThatFindsTheFleetSignedOutAlreadyRevokesNothing() {
        var machine = loadedMachine()
        guard let signOut = machine.saveRequested(nil) else { return XCTFail("a sign-out is written") }
        // Another process's sign-out came first: the record held no credential.
        machine.writeBackAccepted(id: signOut.id, fence: 3, replaced: .some(nil))
        XCTAssertNil(machine.takeSignedOutCredential())

        // A process that already read the signed-out record writes nothing, revokes nothing.
        var heard = loadedMachine()
        XCTAssertTrue(heard.signOutAnnounced(Record(fence: 2, credential: nil)))
        XCTAssertEqual(heard.takeNotes(), [.signOutAdopted])
        XCTAssertNil(heard.saveRequested(nil), "no second sign-out write")
        XCTAssertNil(heard.takeSignedOutCredential())
    }

    func testASignOutWhileRedisIsAwayRevokesWhatThisProcessKnew() {
        var machine = loadedMachine()
        XCTAssertNotNil(machine.saveRequested(nil))
        machine.writeBackUnreachable()
        XCTAssertEqual(machine.takeSignedOutCredential(), credential(0))
    }

    func testOnlyASignedOutRecordNewerThanTheCredentialHeldIsAdopted() {
        // A hint is not a fact: a record that still holds a credential changes nothing.
        var machine = loadedMachine()
        XCTAssertFalse(machine.signOutAnnounced(Record(fence: 1, credential: credential(0))))
        XCTAssertFalse(machine.signOutAnnounced(Record(fence: 2, credential: credential(1))), "a newer credential, not a sign-out")
        XCTAssertEqual(machine.newest?.credential, credential(1))
        XCTAssertFalse(machine.signOutAnnounced(nil), "nothing stored: Redis lost its data, not a sign-out")
        XCTAssertEqual(machine.takeNotes(), [])
        XCTAssertTrue(machine.signOutAnnounced(Record(fence: 3, credential: nil)))
        XCTAssertFalse(machine.signOutAnnounced(Record(fence: 3, credential: nil)), "adopted once")
        // A sign-in of this process still owed to Redis wins over an older sign-out.
        var owing = loadedMachine()
        XCTAssertNotNil(owing.saveRequested(credential(5)))
        owing.writeBackUnreachable()
        XCTAssertFalse(owing.signOutAnnounced(Record(fence: 2, credential: nil)))
        XCTAssertEqual(owing.newest?.credential, credential(5))
    }
}
