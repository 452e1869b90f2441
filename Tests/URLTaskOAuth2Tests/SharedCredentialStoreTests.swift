import Foundation
import LoopbackServer
import XCTest

@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Authenticators sharing one ``FileCredentialStore`` (issue 47): the store's lock, the
/// authenticator's reading of the file before a refresh and after a refusal, and the leeway a
/// token's lifetime bounds. Real files, real `flock`s, and the LoopbackServer's OAuth server,
/// which rotates the refresh token on every refresh and refuses a rotated-away one
/// (`invalid_grant`), as a server without a grace period does. The same against
/// django-oauth-toolkit, in processes of their own: `DjangoSharedStoreTests`.
final class SharedCredentialStoreTests: XCTestCase {
    typealias Kit = ReactorTestKit

    private var folder: URL!

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("shared-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: folder)
    }

    private func makeManager(_ auth: OAuth2Authenticator) -> URLTaskManager {
        URLTaskManager(interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
    }

    /// Whether another open file description can take `file`'s lock now (it is released at once).
    private static func lockIsFree(_ file: URL) -> Bool {
        let descriptor = open(file.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return true }
        defer { close(descriptor) }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else { return false }
        flock(descriptor, LOCK_UN)
        return true
    }

    // MARK: The leeway

    func testTheLeewayIsAtMostAQuarterOfTheTokensLifetime() {
        let now = Date()
        let short = OAuth2Credential(accessToken: "a", expiresAt: now.addingTimeInterval(3), issuedAt: now)
        XCTAssertEqual(short.refreshLeeway(upTo: .seconds(60)), .milliseconds(750))
        XCTAssertFalse(short.isExpired(within: short.refreshLeeway(upTo: .seconds(60)), at: now), "a 3 s token is not renewed on arrival")
        let hour = OAuth2Credential(accessToken: "a", expiresAt: now.addingTimeInterval(3600), issuedAt: now)
        XCTAssertEqual(hour.refreshLeeway(upTo: .seconds(60)), .seconds(60), "a long token keeps the configured leeway")
        let unknown = OAuth2Credential(accessToken: "a", expiresAt: now.addingTimeInterval(3))
        XCTAssertEqual(unknown.refreshLeeway(upTo: .seconds(60)), .seconds(60), "no issuedAt: the lifetime is unknown")
        let forever = OAuth2Credential(accessToken: "a", expiresAt: .distantFuture, issuedAt: now)
        XCTAssertEqual(forever.refreshLeeway(upTo: .seconds(60)), .seconds(60))
        let backwards = OAuth2Credential(accessToken: "a", expiresAt: now, issuedAt: now.addingTimeInterval(10))
        XCTAssertEqual(backwards.refreshLeeway(upTo: .seconds(60)), .zero, "issued after its expiry: no lifetime")
    }

    /// A credential stored by 0.3.0 (no `issuedAt`) still loads; a new one keeps it.
    func testACredentialWithoutIssuedAtLoadsAndANewOneRoundTripsIt() async throws {
        let store = FileCredentialStore(url: folder.appendingPathComponent("credential.json"))
        let old = #"{"accessToken":"a","expiresAt":800000000,"refreshToken":"r"}"#
        try store.write(Data(old.utf8))
        let loaded = try await store.load()
        XCTAssertEqual(loaded?.accessToken, "a")
        XCTAssertNil(loaded?.issuedAt)
        let issued = Date(timeIntervalSinceReferenceDate: 800_000_000)
        let new = OAuth2Credential(accessToken: "b", expiresAt: issued.addingTimeInterval(3), issuedAt: issued)
        try await store.save(new)
        let reloaded = try await store.load()
        XCTAssertEqual(reloaded, new)
    }

    // MARK: The lock

    /// While one store value runs its body under the lock, no other open file can take it;
    /// after, it is free; and the lock file is owner-only and holds nothing.
    func testTheLockIsExclusiveWhileItsBodyRunsAndFreeAfter() async throws {
        let store = FileCredentialStore(url: folder.appendingPathComponent("credential.json"))
        let lockFile = try store.lockFile
        XCTAssertEqual(lockFile.lastPathComponent, ".credential.json.lock")
        let heldDuringBody = try await store.withRefreshLock(waitingAtMost: .seconds(5)) { !Self.lockIsFree(lockFile) }
        XCTAssertTrue(heldDuringBody)
        XCTAssertTrue(Self.lockIsFree(lockFile))
        let attributes = try FileManager.default.attributesOfItem(atPath: lockFile.path)
        XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        XCTAssertEqual((attributes[.size] as? NSNumber)?.intValue, 0)
    }

    /// A process holding the lock (util-linux's `flock`) keeps a refresh waiting; killed, it
    /// frees the lock at once (the kernel releases it), well within the wait's bound.
    func testALockHeldByAnotherProcessIsWaitedForAndFreedWhenThatProcessIsKilled() async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/flock") else {
            throw XCTSkip("needs util-linux's flock(1) at /usr/bin/flock (apt-get install util-linux)")
        }
        let store = FileCredentialStore(url: folder.appendingPathComponent("credential.json"))
        let lockFile = try store.lockFile
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        holder.arguments = ["--exclusive", "--no-fork", lockFile.path, "sleep", "600"]
        try holder.run()
        defer { if holder.isRunning { kill(holder.processIdentifier, SIGKILL) } }
        // Wait for the child to hold it: polled with a deadline, no fixed pause.
        let deadline = ContinuousClock.now + .seconds(10)
        while Self.lockIsFree(lockFile) {
            guard ContinuousClock.now < deadline else { return XCTFail("the child never took the lock") }
            try await Task.sleep(for: .milliseconds(5))
        }

        let entered = Latch<ContinuousClock.Instant>("the body ran")
        let started = ContinuousClock.now
        let waiting = Task {
            try await store.withRefreshLock(waitingAtMost: .seconds(60)) { entered.fulfill(ContinuousClock.now) }
        }
        // The body must not have run while the child holds the lock.
        let early = try? await entered.wait(timeout: .milliseconds(300))
        XCTAssertNil(early, "the body ran while another process held the lock")
        let killedAt = ContinuousClock.now
        kill(holder.processIdentifier, SIGKILL)
        let ran = try await entered.wait(timeout: .seconds(10))
        _ = try await waiting.value
        XCTAssertGreaterThanOrEqual(ran, killedAt)
        XCTAssertLessThan(started.duration(to: ran), .seconds(10), "the kill freed the lock; the 60 s bound was not what ended the wait")
    }

    /// A holder that never lets go (stopped in a debugger, say) holds a refresh only for the
    /// wait's bound: then the body runs without the lock.
    func testALockHeldPastTheBoundLetsTheBodyRunAnyway() async throws {
        let store = FileCredentialStore(url: folder.appendingPathComponent("credential.json"))
        let lockFile = try store.lockFile
        _ = try await store.withRefreshLock(waitingAtMost: .seconds(1)) { true }  // creates the lock file
        let descriptor = open(lockFile.path, O_RDONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(descriptor, 0)
        defer { close(descriptor) }
        XCTAssertEqual(flock(descriptor, LOCK_EX | LOCK_NB), 0)
        let started = ContinuousClock.now
        let ran = try await store.withRefreshLock(waitingAtMost: .milliseconds(400)) { ContinuousClock.now }
        XCTAssertGreaterThanOrEqual(started.duration(to: ran), .milliseconds(400))
        XCTAssertLessThan(started.duration(to: ran), .seconds(5))
    }

    /// A lock path that is a symbolic link is refused, as the credential's own path is.
    func testALockFileThatIsASymbolicLinkIsRefused() async throws {
        let store = FileCredentialStore(url: folder.appendingPathComponent("credential.json"))
        let lockFile = try store.lockFile
        try FileManager.default.createSymbolicLink(atPath: lockFile.path, withDestinationPath: "/tmp/elsewhere-\(UUID().uuidString)")
        do {
            _ = try await store.withRefreshLock(waitingAtMost: .seconds(1)) { true }
            XCTFail("a symbolic link was used as the lock file")
        } catch let error as FileCredentialStoreError {
            XCTAssertEqual(error.kind, .symbolicLink)
            XCTAssertEqual(error.path, lockFile.path)
        }
    }

    // MARK: Authenticators sharing a file

    /// Two authenticators, each with its own store value on one file (as two processes have),
    /// 10 callers each, across three expiries of a 2-second token, against a server that
    /// refuses a rotated-away refresh token: one refresh per expiry, no refusal, every call
    /// 200, the file holding the server's current refresh token. Before the lock and the
    /// re-read, the second authenticator's refresh sent the refresh token the first had
    /// rotated away, and its calls failed `invalid_grant`.
    func testTwoAuthenticatorsSharingAFileRefreshOncePerExpiryUnderStrictRotation() async throws {
        let oauth = try OAuthServer(access: "access-0", refresh: "refresh-0")
        defer { oauth.shutdown() }
        oauth.setExpiresIn(2)
        oauth.expireAccessTokens(after: .seconds(2))
        let file = folder.appendingPathComponent("credential.json")
        let now = Date()
        try await FileCredentialStore(url: file).save(
            OAuth2Credential(accessToken: "access-0", refreshToken: "refresh-0", expiresAt: now.addingTimeInterval(2), issuedAt: now))
        let failures = Kit.Counter()
        let managers = (0..<2).map { _ in
            makeManager(
                OAuth2Authenticator(
                    origins: [oauth.baseURL], tokenEndpoint: oauth.endpoint, store: FileCredentialStore(url: file),
                    onRefreshFailure: { _ in failures.increment() }))
        }
        defer { for manager in managers { manager.session.invalidateAndCancel() } }
        let end = now.addingTimeInterval(5.5)
        let url = oauth.apiURL()
        let results = await withTaskGroup(of: [Kit.Fetch].self) { group in
            for manager in managers {
                for _ in 0..<10 {
                    let session = manager.session
                    group.addTask {
                        var mine: [Kit.Fetch] = []
                        while Date() < end, mine.count < 2_000 { mine.append(await Kit.fetch(session, url)) }
                        return mine
                    }
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        XCTAssertEqual(Kit.tally(results), ["200": results.count])
        XCTAssertEqual(oauth.refreshRefusals, 0, "a rotated-away refresh token was sent")
        XCTAssertEqual(failures.value, 0)
        // Expiries at 1.5 s (the leeway: a quarter of 2 s), then every 1.5 s: at 1.5, 3 and 4.5.
        let refreshes = oauth.tokenRequestCount
        XCTAssertTrue((2...4).contains(refreshes), "\(refreshes) refreshes for 3 expiries")
        let stored = try await FileCredentialStore(url: file).load()
        XCTAssertEqual(stored?.refreshToken, oauth.currentRefresh)
        printFigures(
            "[shared file] 2 authenticators x 10 callers, 3 expiries of a 2 s token: \(results.count) calls all 200, refreshes=\(refreshes), refusals=0"
        )
    }

    /// A holder that renewed without the lock (another program, an older version) rotated the
    /// refresh token: the authenticator's own refresh is refused `invalid_grant`, it reads the
    /// file again, finds the newer credential and adopts it: the call succeeds, the failure
    /// hook is not called, nothing waits for a sign-in.
    func testARefusalMakesTheAuthenticatorReadTheFileAgainAndAdoptTheNewerCredential() async throws {
        let oauth = try OAuthServer(access: "access-0", refresh: "refresh-0")
        defer { oauth.shutdown() }
        let file = folder.appendingPathComponent("credential.json")
        let store = FileCredentialStore(url: file)
        try await store.save(oauth.credential(access: "access-0", refresh: "refresh-0", expiresIn: 3600))
        let failures = Kit.Counter()
        let endpoint = oauth.endpoint
        let auth = OAuth2Authenticator(
            origins: [oauth.baseURL], store: store, isTokenRequest: { endpoint.matches($0) },
            onRefreshFailure: { _ in failures.increment() },
            refresh: { held in
                // Another program renews first and writes the file without taking the lock.
                let theirs = try await endpoint.refresh(held)
                try await FileCredentialStore(url: file).save(theirs)
                return try await endpoint.refresh(held)  // refused: rotated away
            })
        let manager = makeManager(auth)
        defer { manager.session.invalidateAndCancel() }
        _ = try await auth.currentCredential()
        oauth.revokeAccess()  // the next call earns a 401, and the reactor refreshes

        let fetch = await Kit.fetch(manager.session, oauth.apiURL())
        XCTAssertEqual(fetch.label, "200")
        XCTAssertEqual(oauth.refreshRefusals, 1, "the authenticator's own refresh was refused")
        XCTAssertEqual(failures.value, 0, "the refusal was not the end: the file held a newer credential")
        let current = try await auth.currentCredential()
        XCTAssertEqual(current?.refreshToken, oauth.currentRefresh)
        XCTAssertEqual(current?.accessToken, oauth.currentAccess)
    }

    /// One authenticator signs out (the file is removed); the other, at its next refresh, reads
    /// the file, finds it empty and is signed out too, telling its failure hook, instead of
    /// renewing a credential its user signed out of.
    func testASignOutThroughOneAuthenticatorSignsTheOtherOutAtItsNextRefresh() async throws {
        let oauth = try OAuthServer(access: "access-0", refresh: "refresh-0")
        defer { oauth.shutdown() }
        let file = folder.appendingPathComponent("credential.json")
        try await FileCredentialStore(url: file).save(oauth.credential(access: "access-0", refresh: "refresh-0"))
        let heard = Latch<String>("the second authenticator's failure hook")
        let first = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: oauth.endpoint, store: FileCredentialStore(url: file))
        let second = OAuth2Authenticator(
            origins: [oauth.baseURL], tokenEndpoint: oauth.endpoint, store: FileCredentialStore(url: file),
            onRefreshFailure: { heard.fulfill("\($0)") })
        _ = try await first.currentCredential()
        _ = try await second.currentCredential()
        try await first.signOut()

        do {
            try await second.refresh()
            XCTFail("a signed-out credential was renewed")
        } catch let error as OAuth2Error {
            XCTAssertEqual(error, .notSignedIn)
        }
        let hookSaw = try await heard.wait(timeout: .seconds(5))
        XCTAssertEqual(hookSaw, "\(OAuth2Error.notSignedIn)")
        let current = try await second.currentCredential()
        XCTAssertNil(current)
        XCTAssertEqual(oauth.tokenRequestCount, 0, "nothing was sent for a signed-out credential")
    }
}
