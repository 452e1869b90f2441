import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

/// HTTP Basic authentication challenges reach the caller's delegate through a manager as
/// through a plain session, and the manager answers them inside its pipeline: a credential
/// resends the request through the interceptors, and without one the caller gets the 401.
///
/// Where corelibs 6.3.1 differs from Apple's URLSession, the manager does what Apple's does:
/// the delegate of a plain session also receives the 401's own head and body (before the
/// error of a cancelled challenge, or before the authenticated response's body), and a plain
/// task whose challenge nobody answers never completes.
final class AuthenticationParityTests: XCTestCase {
    struct Authenticated: Equatable, CustomStringConvertible {
        var outcome: Outcome
        var challenges: [String]
        var authorizationHeaders: [String]
        var description: String { "\(outcome.summary); challenges \(challenges); server saw Authorization \(authorizationHeaders)" }
    }

    private var harness: ParityHarness!

    override func setUpWithError() throws {
        harness = try ParityHarness()
        harness.route("/basic") { _, request in
            if let authorization = request.headers["Authorization"] { return .text("welcome, \(authorization)") }
            return ServerResponse(
                status: 401, headers: ["WWW-Authenticate": "Basic realm=\"parity\"", "X-Custom": "denied"], body: .data(Data("denied".utf8))
            )
        }
    }

    override func tearDown() {
        harness.shutdown()
        harness = nil
    }

    private func run(_ disposition: URLSession.AuthChallengeDisposition) async throws -> (plain: Authenticated, manager: Authenticated) {
        try await harness.both { client in
            let delegate = RecordingDelegate(challenge: { _ in
                (disposition, disposition == .useCredential ? URLCredential(user: "user", password: "secret", persistence: .none) : nil)
            })
            let (outcome, record, _) = try await client.delegateTask(delegate, timeout: .seconds(10)) {
                $0.dataTask(with: client.url("/basic"))
            }
            return Authenticated(
                outcome: outcome, challenges: record.challenges,
                authorizationHeaders: harness.server.requests(path: client.path("/basic")).map { $0.headers["Authorization"] ?? "none" })
        }
    }

    func testDelegateProvidesACredential() async throws {
        let result = try await run(.useCredential)
        let welcome = Data("welcome, Basic \(Data("user:secret".utf8).base64EncodedString())".utf8)
        for side in [result.plain, result.manager] {
            XCTAssertEqual(side.outcome.status, 200)
            XCTAssertEqual(side.challenges, ["\(NSURLAuthenticationMethodHTTPBasic) parity 0"])
            XCTAssertEqual(side.authorizationHeaders, ["none", "Basic " + Data("user:secret".utf8).base64EncodedString()])
        }
        XCTAssertEqual(result.manager.outcome.bodyLength, welcome.count, "the manager's caller gets the authenticated body alone")
        XCTAssertEqual(
            result.plain.outcome.bodyLength, welcome.count + 6, "corelibs also hands the 401's body to a plain session's delegate")
    }

    func testDelegateCancelsTheChallenge() async throws {
        let result = try await run(.cancelAuthenticationChallenge)
        for side in [result.plain, result.manager] {
            XCTAssertTrue(side.outcome.isCancelled, "\(side)")
            XCTAssertEqual(side.challenges, ["\(NSURLAuthenticationMethodHTTPBasic) parity 0"])
            XCTAssertEqual(side.authorizationHeaders, ["none"])
        }
        XCTAssertNil(result.manager.outcome.status, "the manager's caller gets the cancellation alone")
        XCTAssertEqual(result.plain.outcome.status, 401, "corelibs shows a plain session's delegate the 401 first")
    }

    /// The resend with the credential passes the interceptors (and reactors) like any resend.
    func testTheAuthenticatedResendPassesTheInterceptors() async throws {
        let delegate = RecordingDelegate(challenge: { _ in
            (.useCredential, URLCredential(user: "user", password: "secret", persistence: .none))
        })
        let manager = URLTaskManager(
            interceptors: [HeaderInterceptor(["X-Manager": .fixed("marked")])],
            configuration: ParityHarness.defaultConfiguration(), delegate: delegate)
        defer { manager.invalidateAndCancel() }
        let task = manager.session.dataTask(with: harness.server.url(Side.manager.pathPrefix + "/basic"))
        task.resume()
        try await delegate.completion(of: task, timeout: .seconds(10))
        XCTAssertEqual(delegate.outcome(for: task, side: .manager).status, 200)
        let seen = harness.server.requests(path: Side.manager.pathPrefix + "/basic")
        XCTAssertEqual(seen.map { $0.headers["X-Manager"] ?? "none" }, ["marked", "marked"])
        XCTAssertEqual(
            seen.map { $0.headers["Authorization"] ?? "none" }, ["none", "Basic " + Data("user:secret".utf8).base64EncodedString()])
    }

    /// Nobody answers the challenge (no delegate, no stored credential): a plain session on
    /// corelibs 6.3.1 never completes such a task; the manager's caller gets the 401 and its
    /// body, without the `WWW-Authenticate` header its session would answer again.
    func testWithoutACredentialTheCallerGetsThe401() async throws {
        let session = URLTaskManager(configuration: ParityHarness.defaultConfiguration()).session
        defer { session.invalidateAndCancel() }
        let (data, response) = try await session.data(from: harness.server.url(Side.manager.pathPrefix + "/basic"))
        let http = try XCTUnwrap(response as? HTTPURLResponse)
        XCTAssertEqual(http.statusCode, 401)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "denied")
        XCTAssertEqual(http.value(forHTTPHeaderField: "X-Custom"), "denied")
        XCTAssertNil(http.value(forHTTPHeaderField: "WWW-Authenticate"))
    }

    /// A credential that the server refuses is offered once more with `previousFailureCount` 1;
    /// a delegate that then gives up leaves the caller with the 401.
    func testARefusedCredentialIsChallengedAgainWithTheFailureCount() async throws {
        let delegate = RecordingDelegate(challenge: { challenge in
            challenge.previousFailureCount == 0
                ? (.useCredential, URLCredential(user: "user", password: "wrong", persistence: .none))
                : (.performDefaultHandling, nil)
        })
        harness.route("/strict") { _, request in
            if request.headers["Authorization"] == "Basic " + Data("user:right".utf8).base64EncodedString() { return .text("ok") }
            return ServerResponse(status: 401, headers: ["WWW-Authenticate": "Basic realm=\"strict\""], body: .data(Data("denied".utf8)))
        }
        let session = URLTaskManager(configuration: ParityHarness.defaultConfiguration(), delegate: delegate).session
        defer { session.invalidateAndCancel() }
        let task = session.dataTask(with: harness.server.url(Side.manager.pathPrefix + "/strict"))
        task.resume()
        try await delegate.completion(of: task, timeout: .seconds(10))
        XCTAssertEqual(delegate.outcome(for: task, side: .manager).status, 401)
        XCTAssertEqual(
            delegate.record(for: task).challenges,
            ["\(NSURLAuthenticationMethodHTTPBasic) strict 0", "\(NSURLAuthenticationMethodHTTPBasic) strict 1"])
        XCTAssertEqual(harness.server.requests(path: Side.manager.pathPrefix + "/strict").count, 2)
    }
}
