import Foundation
import XCTest

@testable import URLTaskOAuth2

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `FileCredentialStore` trusts nothing it reads or writes through: a symbolic link, a file
/// another user owns or may read, a file too large, and a folder others may write to are each
/// refused with a typed error, and nothing is adopted or overwritten. (Up to 0.2.0 each was
/// accepted: a link to a 0666 file owned by anyone was adopted, a 256 MiB file loaded, a save
/// replaced a link with a regular file, and a save into a 0777 folder was silent.)
final class FileCredentialStoreTrustTests: XCTestCase {
    private var folder: URL!

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("fcs-trust-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: folder)
    }

    private func credential(_ n: Int) -> OAuth2Credential {
        OAuth2Credential(
            accessToken: "access-\(n)", refreshToken: "refresh-\(n)", expiresAt: Date(timeIntervalSince1970: 2_000_000_000), scope: "s")
    }

    /// A credential file written by a store (0600), then given `permissions`.
    private func plantedFile(_ name: String, credential n: Int, permissions: Int = 0o600) async throws -> URL {
        let url = folder.appendingPathComponent(name)
        try await FileCredentialStore(url: url).save(credential(n))
        XCTAssertEqual(chmod(url.path, mode_t(permissions)), 0)
        return url
    }

    private func kind(of operation: () async throws -> Void) async -> FileCredentialStoreError.Kind? {
        do {
            try await operation()
            return nil
        } catch let error as FileCredentialStoreError {
            XCTAssertFalse(error.description.contains("access-"), "the error quotes the credential: \(error)")
            return error.kind
        } catch {
            XCTFail("not a FileCredentialStoreError: \(error)")
            return nil
        }
    }

    func testASymbolicLinkIsRefusedByDefaultAndItsTargetIsNotAdopted() async throws {
        let target = try await plantedFile("elsewhere.json", credential: 7)
        let link = folder.appendingPathComponent("credential.json")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: target)
        let store = FileCredentialStore(url: link)

        let loadKind = await kind { _ = try await store.load() }
        XCTAssertEqual(loadKind, .symbolicLink)
        let saveKind = await kind { try await store.save(self.credential(8)) }
        XCTAssertEqual(saveKind, .symbolicLink)
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: link.path), target.path, "the link was replaced")
        let untouched = try await FileCredentialStore(url: target).load()
        XCTAssertEqual(untouched, credential(7), "the target was written through a link the store refuses")
    }

    func testAnAllowedLinkIsFollowedForLoadsAndItsTargetReplacedAtomicallyOnSave() async throws {
        let target = try await plantedFile("elsewhere.json", credential: 1)
        let link = folder.appendingPathComponent("credential.json")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: target)
        let store = FileCredentialStore(url: link, options: .init(followsSymbolicLinks: true))

        let loaded = try await store.load()
        XCTAssertEqual(loaded, credential(1))
        try await store.save(credential(2))
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: link.path), target.path, "the save replaced the link")
        let reread = try await FileCredentialStore(url: target).load()
        XCTAssertEqual(reread, credential(2), "the target holds the new credential")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".tmp") }
        XCTAssertEqual(leftovers, [])

        // A followed link still leads only to an owner-only file.
        XCTAssertEqual(chmod(target.path, 0o666), 0)
        let openKind = await kind { _ = try await store.load() }
        XCTAssertEqual(openKind, .accessibleByOthers(permissions: 0o666))
    }

    func testAFileOthersMayReadOrWriteIsRefused() async throws {
        for permissions in [0o644, 0o660, 0o602, 0o666] {
            let url = try await plantedFile("credential-\(permissions).json", credential: 3, permissions: permissions)
            let loadKind = await kind { _ = try await FileCredentialStore(url: url).load() }
            XCTAssertEqual(loadKind, .accessibleByOthers(permissions: UInt16(permissions)), String(permissions, radix: 8))
        }
        let ownerOnly = try await plantedFile("owner-only.json", credential: 4, permissions: 0o400)
        let loaded = try await FileCredentialStore(url: ownerOnly).load()
        XCTAssertEqual(loaded, credential(4), "a read-only owner file is fine")
    }

    func testAFileOwnedByAnotherUserIsRefused() async throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root to give a file to another user") }
        let url = try await plantedFile("credential.json", credential: 5)
        XCTAssertEqual(chown(url.path, 65_534, 65_534), 0)
        let loadKind = await kind { _ = try await FileCredentialStore(url: url).load() }
        XCTAssertEqual(loadKind, .ownedByAnotherUser(uid: 65_534))
    }

    func testAFileLargerThanTheLimitIsRefusedBeforeItIsRead() async throws {
        // 256 MiB, sparse: it costs no disk, and reading it whole (as 0.2.0 did) would cost
        // 512 MiB of memory.
        let url = folder.appendingPathComponent("credential.json")
        XCTAssertTrue(FileManager.default.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600]))
        XCTAssertEqual(truncate(url.path, 256 << 20), 0)
        let loadKind = await kind { _ = try await FileCredentialStore(url: url).load() }
        XCTAssertEqual(loadKind, .tooLarge(byteCount: 256 << 20, limit: 64 * 1024))

        // The limit is the caller's to raise; a credential just under it loads.
        let small = try await plantedFile("small.json", credential: 6)
        let size = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: small.path)[.size] as? NSNumber).intValue
        let tight = await kind { _ = try await FileCredentialStore(url: small, options: .init(maximumFileSize: size - 1)).load() }
        XCTAssertEqual(tight, .tooLarge(byteCount: Int64(size), limit: size - 1))
        let fits = try await FileCredentialStore(url: small, options: .init(maximumFileSize: size)).load()
        XCTAssertEqual(fits, credential(6))
    }

    func testAFolderOthersMayWriteToIsRefusedUnlessItIsSticky() async throws {
        let shared = folder.appendingPathComponent("shared")
        try FileManager.default.createDirectory(at: shared, withIntermediateDirectories: false)
        XCTAssertEqual(chmod(shared.path, 0o777), 0)
        let url = shared.appendingPathComponent("credential.json")
        let saveKind = await kind { try await FileCredentialStore(url: url).save(self.credential(9)) }
        XCTAssertEqual(saveKind, .folderWritableByOthers(permissions: 0o777))
        XCTAssertFalse(FileManager.default.fileExists(atPath: url.path), "written into a folder others can write to")

        XCTAssertEqual(chmod(shared.path, 0o1777), 0)
        try await FileCredentialStore(url: url).save(credential(9))
        let loaded = try await FileCredentialStore(url: url).load()
        XCTAssertEqual(loaded, credential(9), "a sticky folder (as /tmp) keeps others from replacing the file")
    }

    func testSigningOutRemovesARefusedLinkItselfAndNeverItsTarget() async throws {
        let target = try await plantedFile("elsewhere.json", credential: 1)
        let link = folder.appendingPathComponent("credential.json")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: target)
        try await FileCredentialStore(url: link).clear()
        XCTAssertNil(try? FileManager.default.destinationOfSymbolicLink(atPath: link.path), "the link is still there")
        XCTAssertTrue(FileManager.default.fileExists(atPath: target.path), "the link's target was removed")
        let signedOut = try await FileCredentialStore(url: link).load()
        XCTAssertNil(signedOut)
    }
}
