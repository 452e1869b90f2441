import Foundation
import LoopbackServer
import XCTest

@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `FileCredentialStore`: owner-only permissions, atomic replace (a save stopped where a crash
/// would leaves the old credential readable), concurrent saves, typed errors without secrets,
/// and a sign-in, launch, refresh and sign-out through an authenticator over HTTP.
final class FileCredentialStoreTests: XCTestCase {
    private var folder: URL!

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("fcs-\(UUID().uuidString)")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: folder)
    }

    private func credential(_ n: Int) -> OAuth2Credential {
        OAuth2Credential(
            accessToken: "access-\(n)", refreshToken: "refresh-\(n)", expiresAt: Date(timeIntervalSince1970: 2_000_000_000), scope: "s")
    }

    private func permissions(_ url: URL) throws -> Int {
        try XCTUnwrap(FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? NSNumber).intValue & 0o777
    }

    private func leftovers() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".tmp") }
    }

    func testARoundTripInAFileOnlyItsOwnerCanReadWhateverTheUmask() async throws {
        let url = folder.appendingPathComponent("nested/credential.json")
        let store = FileCredentialStore(url: url)
        let loadedBefore = try await store.load()
        XCTAssertNil(loadedBefore, "no file: signed out")

        let previous = umask(0)  // the most permissive umask: the store must still write 0600
        defer { umask(previous) }
        try await store.save(credential(1))

        let loaded = try await store.load()
        XCTAssertEqual(loaded, credential(1))
        XCTAssertEqual(try permissions(url), 0o600)
        XCTAssertEqual(try permissions(url.deletingLastPathComponent()), 0o700, "a folder the store creates is its owner's only")
        try await store.save(credential(2))
        let replaced = try await store.load()
        XCTAssertEqual(replaced, credential(2))
        XCTAssertEqual(try permissions(url), 0o600)

        try await store.clear()
        XCTAssertFalse(FileManager.default.fileExists(atPath: url.path))
        let cleared = try await store.load()
        XCTAssertNil(cleared)
        try await store.clear()  // clearing twice is fine
    }

    /// A save stopped after its temporary file is written, as a crash would stop it: the file
    /// still holds the old credential, and the leftover temporary file is never read.
    func testASaveCutShortLeavesTheOldCredentialAndItsLeftoverIsNeverRead() async throws {
        let url = folder.appendingPathComponent("credential.json")
        let store = FileCredentialStore(url: url)
        try await store.save(credential(1))

        try store.write(JSONEncoder().encode(credential(2)), stoppingAfter: .temporaryFileWritten)

        let leftovers = try leftovers()
        XCTAssertEqual(leftovers.count, 1, "the crash left its temporary file")
        let leftover = folder.appendingPathComponent(leftovers[0])
        XCTAssertEqual(try permissions(leftover), 0o600, "even a leftover is its owner's only")
        let afterCrash = try await store.load()
        XCTAssertEqual(afterCrash, credential(1))
        try await store.save(credential(3))
        let afterSave = try await store.load()
        XCTAssertEqual(afterSave, credential(3))
        XCTAssertEqual(try self.leftovers(), leftovers, "a later save does not pick up the leftover")
    }

    func testConcurrentSavesLeaveOneCompleteCredentialAndNoTemporaryFile() async throws {
        let url = folder.appendingPathComponent("credential.json")
        let stores = [FileCredentialStore(url: url), FileCredentialStore(url: url)]
        let credentials = (0..<100).map(credential)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for n in 0..<100 {
                let store = stores[n % 2]
                let credential = credentials[n]
                group.addTask { try await store.save(credential) }
            }
            try await group.waitForAll()
        }
        let loaded = try await stores[0].load()
        let final = try XCTUnwrap(loaded)
        XCTAssertTrue(credentials.contains(final))
        XCTAssertEqual(try leftovers(), [])
        XCTAssertEqual(try permissions(url), 0o600)
    }

    func testACorruptFileIsATypedErrorThatQuotesNothingFromIt() async throws {
        let url = folder.appendingPathComponent("credential.json")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let store = FileCredentialStore(url: url)
        let cases: [(contents: String, reason: String)] = [
            (#"{"accessToken":"leaked-secret-1","refreshToken":"leaked-secret-2""#, "the file is not JSON"),
            (#"{"accessToken":"leaked-secret-1"}"#, "the field expiresAt is missing"),
            (#"{"accessToken":7,"expiresAt":1}"#, "the field accessToken has the wrong type"),
            ("", "the file is empty"),
        ]
        for (contents, reason) in cases {
            try Data(contents.utf8).write(to: url)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path)
            do {
                _ = try await store.load()
                XCTFail("loaded \(contents)")
            } catch let error as FileCredentialStoreError {
                guard case .corruptFile(let text) = error.kind else { return XCTFail("\(error)") }
                XCTAssertTrue(text.hasPrefix(reason), text)
                XCTAssertEqual(error.path, url.path)
                for text in [error.description, error.localizedDescription, "\(error)", String(reflecting: error)] {
                    XCTAssertFalse(text.contains("leaked-secret"), text)
                }
            }
        }
        // Signing in again replaces a corrupt file.
        try await store.save(credential(1))
        let loaded = try await store.load()
        XCTAssertEqual(loaded, credential(1))
    }

    func testAFailedSystemCallNamesTheCallAndThePath() async throws {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let notAFolder = folder.appendingPathComponent("file")
        try Data("x".utf8).write(to: notAFolder)
        let store = FileCredentialStore(url: notAFolder.appendingPathComponent("credential.json"))
        do {
            try await store.save(credential(1))
            XCTFail("saved under a file")
        } catch let error as FileCredentialStoreError {
            guard case .systemCallFailed(let operation, _) = error.kind else { return XCTFail("\(error)") }
            XCTAssertEqual(operation, "mkdir")
            XCTAssertFalse(error.description.contains("access-1"))
            XCTAssertTrue(error.description.contains(notAFolder.path), error.description)
        }
    }

    /// Signed in with a password, the next launch (a new authenticator and store on the same
    /// file) uses the stored token with no token request; a refresh stores the rotated refresh
    /// token; signing out removes the file.
    func testAnAuthenticatorSignsInRelaunchesRefreshesAndSignsOutThroughTheFile() async throws {
        let oauth = try OAuthServer(users: ["ada": "lovelace"])
        defer { oauth.shutdown() }
        let url = folder.appendingPathComponent("credential.json")
        // DocC file-store: begin
        func authenticator(api: URL, tokenEndpoint: OAuth2TokenEndpoint, credentialFile: URL) -> OAuth2Authenticator {
            OAuth2Authenticator(
                origins: [api], tokenEndpoint: tokenEndpoint,
                store: FileCredentialStore(url: credentialFile)  // 0600, replaced atomically, a typed error if corrupt
            )
        }
        // DocC file-store: end
        let first = authenticator(api: oauth.baseURL, tokenEndpoint: oauth.endpoint, credentialFile: url)
        try await first.signIn(oauth.endpoint.signIn(username: "ada", password: "lovelace"))
        let stored = try await FileCredentialStore(url: url).load()
        XCTAssertEqual(stored?.accessToken, "a-access-1")

        // The next launch.
        let auth = authenticator(api: oauth.baseURL, tokenEndpoint: oauth.endpoint, credentialFile: url)
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        defer { manager.invalidateAndCancel() }
        let (_, response) = try await manager.session.data(from: oauth.apiURL("/me"))
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        XCTAssertEqual(oauth.tokenRequestCount, 1, "the stored token was used, not a new sign-in")

        oauth.revokeAccess()
        let (_, refreshed) = try await manager.session.data(from: oauth.apiURL("/me"))
        XCTAssertEqual((refreshed as? HTTPURLResponse)?.statusCode, 200)
        let rotated = try await FileCredentialStore(url: url).load()
        XCTAssertEqual(rotated?.refreshToken, "a-refresh-2", "the rotated refresh token is on disk")
        XCTAssertEqual(try permissions(url), 0o600)

        try await auth.signOut()
        XCTAssertFalse(FileManager.default.fileExists(atPath: url.path))
        XCTAssertEqual(try leftovers(), [])
    }
}
