import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest

/// HTTP Basic authentication challenges reach the caller's delegate through a manager as
/// through a plain session. (Before the Transport handed 401 challenges over, a manager's task
/// with a Basic challenge never completed.)
///
/// corelibs itself resends the request with the credential, through its native protocol: that
/// resend does not pass the manager's interceptors (documented limitation).
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
            return ServerResponse(status: 401, headers: ["WWW-Authenticate": "Basic realm=\"parity\"", "X-Custom": "denied"], body: .data(Data("denied".utf8)))
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
            let (outcome, record, _) = try await client.delegateTask(delegate, timeout: .seconds(10)) { $0.dataTask(with: client.url("/basic")) }
            return Authenticated(outcome: outcome, challenges: record.challenges,
                                 authorizationHeaders: harness.server.requests(path: client.path("/basic")).map { $0.headers["Authorization"] ?? "none" })
        }
    }

    func testDelegateProvidesACredential() async throws {
        let result = try await run(.useCredential)
        XCTAssertParity(result, "401 Basic, delegate answers .useCredential")
        XCTAssertEqual(result.manager.outcome.status, 200)
        XCTAssertEqual(result.manager.challenges, ["\(NSURLAuthenticationMethodHTTPBasic) parity 0"])
        XCTAssertEqual(result.manager.authorizationHeaders, ["none", "Basic " + Data("user:secret".utf8).base64EncodedString()])
    }

    func testDelegateCancelsTheChallenge() async throws {
        let result = try await run(.cancelAuthenticationChallenge)
        XCTAssertParity(result, "401 Basic, delegate answers .cancelAuthenticationChallenge")
        XCTAssertTrue(result.manager.outcome.isCancelled, "\(result.manager)")
        XCTAssertEqual(result.manager.authorizationHeaders, ["none"])
    }

    /// Documented limitation: corelibs resends the authenticated request itself, through its
    /// native protocol, so the resend does not pass the manager's interceptors.
    func testAuthenticatedResendBypassesInterceptors() async throws {
        let delegate = RecordingDelegate(challenge: { _ in (.useCredential, URLCredential(user: "user", password: "secret", persistence: .none)) })
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["X-Manager": .fixed("marked")])],
                                     configuration: ParityHarness.defaultConfiguration(), delegate: delegate)
        defer { manager.invalidateAndCancel() }
        let task = manager.session.dataTask(with: harness.server.url(Side.manager.pathPrefix + "/basic"))
        task.resume()
        try await delegate.completion(of: task, timeout: .seconds(10))
        XCTAssertEqual(delegate.outcome(for: task, side: .manager).status, 200)
        let seen = harness.server.requests(path: Side.manager.pathPrefix + "/basic")
        XCTAssertEqual(seen.map { $0.headers["X-Manager"] ?? "none" }, ["marked", "none"],
                       "the authenticated resend now passes the interceptors: update the documentation")
    }
}
