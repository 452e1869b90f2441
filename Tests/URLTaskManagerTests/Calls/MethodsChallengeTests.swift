import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
import TestSupport

/// A 401 with a `Basic` challenge through the manager's own methods: corelibs' async API drops
/// such an answer's body, so the request is sent again as a streamed transfer (``WholeTransfer``):
/// the caller gets the 401 with its body, or the answer to the stored credential, as through the
/// session.
final class MethodsChallengeTests: XCTestCase {
    private var server: LoopbackServer!

    override func setUpWithError() throws {
        server = try LoopbackServer()
        server.route("/basic") { request in
            if let authorization = request.headers["Authorization"] { return .text("welcome, \(authorization)") }
            return ServerResponse(
                status: 401, headers: ["WWW-Authenticate": "Basic realm=\"methods\"", "X-Custom": "denied"],
                body: .data(Data("denied".utf8)))
        }
    }

    override func tearDown() {
        server.shutdown()
        server = nil
    }

    func testWithoutACredentialTheCallerGetsThe401AndItsBody() async throws {
        let manager = URLTaskManager(configuration: ParityHarness.defaultConfiguration())
        defer { manager.invalidateAndCancel() }
        for _ in 0..<2 {
            let (data, response) = try await manager.data(from: server.url("/basic"))
            let http = try XCTUnwrap(response as? HTTPURLResponse)
            XCTAssertEqual(http.statusCode, 401)
            XCTAssertEqual(String(decoding: data, as: UTF8.self), "denied")
            XCTAssertEqual(http.value(forHTTPHeaderField: "X-Custom"), "denied")
            XCTAssertNil(http.value(forHTTPHeaderField: "WWW-Authenticate"), "as through the session")
        }
        // Each call reached the server twice: the whole transfer, then the streamed one.
        XCTAssertEqual(server.requestCount(path: "/basic"), 4)
    }

    /// With a credential in the configuration's storage, both doors answer the challenge with it
    /// (issue 49, item 9): corelibs compares protection spaces by identity, so the space the app
    /// stored it for is found by value. Each door authenticated: the server saw the credential.
    func testAStoredCredentialIsUsedAlikeThroughBothDoors() async throws {
        let configuration = ParityHarness.defaultConfiguration()
        let storage = URLCredentialStorage()
        configuration.urlCredentialStorage = storage
        let space = URLProtectionSpace(
            host: "127.0.0.1", port: server.port, protocol: "http", realm: "methods",
            authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
        storage.setDefaultCredential(URLCredential(user: "user", password: "secret", persistence: .forSession), for: space)
        let manager = URLTaskManager(configuration: configuration)
        defer { manager.invalidateAndCancel() }
        let (sessionData, sessionResponse) = try await manager.session.data(for: URLRequest(url: server.url("/basic")))
        let (data, response) = try await manager.data(for: URLRequest(url: server.url("/basic")))
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, (sessionResponse as? HTTPURLResponse)?.statusCode)
        XCTAssertEqual(data, sessionData)
        let basic = "Basic " + Data("user:secret".utf8).base64EncodedString()
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "welcome, \(basic)", "the stored credential answered the challenge")
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        let authenticated = server.requests(path: "/basic").filter { $0.headers["Authorization"] == basic }
        XCTAssertEqual(authenticated.count, 2, "one authenticated request through each door")
    }

    /// A space stored without a port, in other case, with the default method, is the challenged
    /// one; another realm is told apart.
    func testTheStoredSpaceIsMatchedByValue() {
        let storage = URLCredentialStorage()
        let challenged = URLProtectionSpace(
            host: "api.example", port: 80, protocol: "http", realm: "r", authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
        let other = URLProtectionSpace(
            host: "api.example", port: 80, protocol: "http", realm: "other", authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
        storage.set(URLCredential(user: "zed", password: "z", persistence: .forSession), for: other)
        XCTAssertNil(AuthenticationChallenge.storedCredential(for: challenged, in: storage), "another realm")
        let stored = URLProtectionSpace(
            host: "API.example", port: 0, protocol: "http", realm: "r", authenticationMethod: NSURLAuthenticationMethodDefault)
        storage.set(URLCredential(user: "bob", password: "b", persistence: .forSession), for: stored)
        storage.set(URLCredential(user: "alice", password: "a", persistence: .forSession), for: stored)
        // The storage's default for the space it holds (corelibs makes the first one set the
        // default), else the first by user name.
        let expected = storage.defaultCredential(for: stored)?.user ?? "alice"
        XCTAssertEqual(AuthenticationChallenge.storedCredential(for: challenged, in: storage)?.user, expected)
    }
}
