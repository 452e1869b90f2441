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

/// Issue 47's shared file and short tokens against django-oauth-toolkit 3.4.1
/// (``DjangoOAuthServer``; skipped, saying how to install it, where it is absent), rotating
/// refresh tokens without a grace period: a rotated-away refresh token is refused
/// `invalid_grant`, and a refresh revokes the access token it replaces.
final class DjangoSharedStoreTests: XCTestCase {
    typealias Server = DjangoOAuthServer
    typealias Kit = ReactorTestKit

    /// Set in a child's environment (``testChild()``): the credential file, the server's
    /// issuer, when to stop (seconds since 1970) and the child's name.
    static let childVariable = "URLTASKMANAGER_SHARED_STORE_CHILD"
    static let fileVariable = "URLTASKMANAGER_SHARED_STORE_FILE"
    static let issuerVariable = "URLTASKMANAGER_SHARED_STORE_ISSUER"
    static let endVariable = "URLTASKMANAGER_SHARED_STORE_END"
    /// What a child prints at its end, followed by its figures.
    static let resultMarker = "SHARED-STORE-RESULT"

    private static func confidentialEndpoint(tokenURL: URL) -> OAuth2TokenEndpoint {
        OAuth2TokenEndpoint(url: tokenURL, clientID: Server.confidentialClientID, clientSecret: Server.confidentialClientSecret)
    }

    private func signIn(_ server: Server, _ endpoint: OAuth2TokenEndpoint) async throws -> OAuth2Credential {
        let flow = OAuth2AuthorizationCodeFlow(
            authorizationEndpoint: server.authorizeURL, tokenEndpoint: endpoint, redirectURI: server.loopbackRedirectURI(port: 53682),
            scope: "read write")
        let attempt = flow.start()
        return try await flow.credential(fromCallback: try await server.browse(attempt.url), for: attempt)
    }

    private static func makeManager(_ auth: OAuth2Authenticator) -> URLTaskManager {
        URLTaskManager(interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
    }

    // MARK: Processes sharing a file

    /// Two processes (this test binary again, ``testChild()``), each with its own authenticator
    /// on one `FileCredentialStore`, 8 callers each, for 8 s from the sign-in of a 3 s token:
    /// every call 200, every refresh the server got answered 200 (0 `invalid_grant`: no
    /// refresh token was sent twice), at most one refresh per lifetime's three quarters, no
    /// failure hook, and the file holding the server's live refresh token. Before: the second
    /// process kept the refresh token the first had rotated away, and its calls failed
    /// `invalid_grant` after the first expiry.
    func testTwoProcessesSharingAFileStoreMakeOneTokenRequestPerExpiryAndNoInvalidGrant() async throws {
        let lifetime = 3.0
        let server = try Server.start(.init(accessTokenLifetime: Int(lifetime), rotatesRefreshTokens: true, refreshGracePeriod: 0))
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("dot-shared-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("credential.json")
        let endpoint = Self.confidentialEndpoint(tokenURL: server.tokenURL)
        let signedIn = try await signIn(server, endpoint)
        try await FileCredentialStore(url: file).save(signedIn)
        let signInRequests = try await server.tokenRequests().count
        let end = Date().addingTimeInterval(8)

        let environment = [
            Self.childVariable: "1", Self.fileVariable: file.path, Self.issuerVariable: server.issuer,
            Self.endVariable: String(end.timeIntervalSince1970),
        ]
        let children = try ["a", "b"].map { try ChildProcess(test: "DjangoSharedStoreTests/testChild", name: $0, environment: environment) }
        var figures: [[String: Int]] = []
        for child in children {
            let (status, output) = try await child.finished(within: .seconds(90))
            guard let status else { return XCTFail("child \(child.name) hung; its output ends with: \(output.suffix(2_000))") }
            guard status == 0, let line = output.split(separator: "\n").last(where: { $0.hasPrefix(Self.resultMarker) }) else {
                return XCTFail("child \(child.name) ended with status \(status): \(output.suffix(3_000))")
            }
            figures.append(Self.figures(in: line))
        }

        for (name, child) in zip(["a", "b"], figures) {
            XCTAssertGreaterThan(child["calls", default: 0], 50, "child \(name) made its calls")
            XCTAssertEqual(child["ok", default: -1], child["calls", default: 0], "child \(name): every call 200 (\(child))")
            XCTAssertEqual(child["hook", default: -1], 0, "child \(name): no failure hook")
        }
        let refreshes = Array(try await server.tokenRequests().dropFirst(signInRequests))
        XCTAssertEqual(Set(refreshes.map(\.grantType)), ["refresh_token"])
        XCTAssertEqual(refreshes.filter { $0.status != 200 }.count, 0, "no refresh refused: no refresh token sent twice")
        let window = end.timeIntervalSince(try XCTUnwrap(signedIn.issuedAt))
        let mostExpiries = Int(window / (lifetime * (1 - OAuth2Credential.maximumLeewayFraction))) + 1
        XCTAssertTrue((2...mostExpiries).contains(refreshes.count), "\(refreshes.count) refreshes in \(window) s of a \(lifetime) s token")
        let stored = try await FileCredentialStore(url: file).load()
        let latest = try XCTUnwrap(stored?.refreshToken)
        let state = try await server.refreshTokenState(latest)
        XCTAssertTrue(state.exists && !state.revoked, "the file holds the live refresh token")
        let calls = figures.reduce(0) { $0 + $1["calls", default: 0] }
        printFigures(
            "[dot] 2 processes sharing a file, 8 callers each, 8 s of a 3 s token: \(calls) calls all 200, refreshes=\(refreshes.count) (all 200, 0 invalid_grant), at most \(mostExpiries) expiries"
        )
    }

    /// A child's whole life (``childVariable``): an authenticator on the shared file, 8 callers
    /// until the end, then one line of figures. Nothing in an ordinary run.
    func testChild() async throws {
        let environment = ProcessInfo.processInfo.environment
        guard environment[Self.childVariable] != nil else { return }
        guard let path = environment[Self.fileVariable], let issuer = environment[Self.issuerVariable].flatMap(URL.init(string:)),
            let end = environment[Self.endVariable].flatMap(Double.init).map(Date.init(timeIntervalSince1970:))
        else { return XCTFail("a child needs \(Self.fileVariable), \(Self.issuerVariable) and \(Self.endVariable)") }
        let hook = Kit.Counter()
        let auth = OAuth2Authenticator(
            origins: [issuer], tokenEndpoint: Self.confidentialEndpoint(tokenURL: issuer.appendingPathComponent("o/token/")),
            store: FileCredentialStore(url: URL(fileURLWithPath: path)), onRefreshFailure: { _ in hook.increment() })
        let manager = Self.makeManager(auth)
        defer { manager.session.invalidateAndCancel() }
        let url = issuer.appendingPathComponent("api/profile")
        let session = manager.session
        let results = await withTaskGroup(of: [Kit.Fetch].self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var mine: [Kit.Fetch] = []
                    while Date() < end, mine.count < 2_000 { mine.append(await Kit.fetch(session, url)) }
                    return mine
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        let tally = Kit.tally(results)
        print("\(Self.resultMarker) calls=\(results.count) ok=\(tally["200", default: 0]) hook=\(hook.value) tally=\(tally)")
    }

    /// `name=value` pairs of a child's result line, the values that are numbers.
    private static func figures(in line: Substring) -> [String: Int] {
        line.split(separator: " ").reduce(into: [:]) { figures, pair in
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2, let value = Int(parts[1]) { figures[String(parts[0])] = value }
        }
    }

    // MARK: Short tokens

    /// A 3 s token with the default 60 s `refreshLeeway`: the calls right after the sign-in
    /// make no token request (before, the first of them refreshed it); one caller calling until
    /// half a second past its expiry makes one refresh, three quarters into its life, and the
    /// API never answers 401 (the refresh came before the expiry).
    func testA3SecondTokenIsNotRefreshedAtSignInButAQuarterBeforeItsExpiry() async throws {
        let server = try Server.start(.init(accessTokenLifetime: 3))
        let endpoint = Self.confidentialEndpoint(tokenURL: server.tokenURL)
        let signedIn = try await signIn(server, endpoint)
        let auth = OAuth2Authenticator(origins: [server.baseURL], tokenEndpoint: endpoint, store: InMemoryCredentialStore(signedIn))
        XCTAssertEqual(auth.refreshLeeway, .seconds(60), "the default leeway")
        let manager = Self.makeManager(auth)
        defer { manager.session.invalidateAndCancel() }
        let signInRequests = try await server.tokenRequests().count

        var first: [Kit.Fetch] = []
        for _ in 0..<5 { first.append(await Kit.fetch(manager.session, server.apiURL)) }
        XCTAssertEqual(Kit.tally(first), ["200": 5])
        let afterSignIn = try await server.tokenRequests().count
        XCTAssertEqual(afterSignIn, signInRequests, "no token request at sign-in")

        let end = signedIn.expiresAt.addingTimeInterval(0.5)
        var later: [Kit.Fetch] = []
        while Date() < end, later.count < 5_000 { later.append(await Kit.fetch(manager.session, server.apiURL)) }
        XCTAssertEqual(Kit.tally(later), ["200": later.count])
        let refreshes = Array(try await server.tokenRequests().dropFirst(signInRequests))
        XCTAssertEqual(refreshes.map(\.grantType), ["refresh_token"], "one refresh for one expiry")
        let refusals = try await server.requests().filter { $0.path == server.apiURL.path && $0.status == 401 }.count
        XCTAssertEqual(refusals, 0, "the token was renewed before it expired")
        let current = try await auth.currentCredential()
        let renewed = try XCTUnwrap(current)
        let renewedAt = try XCTUnwrap(renewed.issuedAt).timeIntervalSince(try XCTUnwrap(signedIn.issuedAt))
        XCTAssertGreaterThanOrEqual(renewedAt, 2.25, "renewed a quarter of its lifetime before its expiry, not earlier")
        printFigures("[dot] a 3 s token, default 60 s leeway: 0 token requests at sign-in, 1 refresh \(renewedAt) s after it, 0 401s")
    }
}

/// This test binary run again with one test and an environment of its own, its output
/// collected, killed if it outlives its deadline.
private final class ChildProcess: Sendable {
    let name: String
    private let process: Process
    private let exited = Latch<Int32>("a child's exit")
    private let collected = Latch<String>("a child's output")

    init(test: String, name: String, environment: [String: String]) throws {
        self.name = name
        process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = ["URLTaskOAuth2Tests.\(test)"]
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        let exited = exited
        process.terminationHandler = { exited.fulfill($0.terminationStatus) }
        try process.runWithEverySignalUnblocked()
        let collected = collected
        Thread.detachNewThread {
            collected.fulfill(String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
        }
    }

    /// Its exit status (`nil` if it was still running at `deadline`: it is then killed) and output.
    func finished(within deadline: Duration) async throws -> (status: Int32?, output: String) {
        do {
            let status = try await exited.wait(timeout: deadline)
            return (status, try await collected.wait(timeout: .seconds(10)))
        } catch is WaitTimedOut {
            kill(process.processIdentifier, SIGKILL)
            return (nil, (try? await collected.wait(timeout: .seconds(10))) ?? "")
        }
    }
}
