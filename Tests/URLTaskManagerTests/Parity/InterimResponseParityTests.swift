import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// Interim (1xx) heads are not answers: the inner session reports each one, the caller of a
/// plain session sees only the final response, and so does the manager's caller, its redirect
/// decision and its reactors.
final class InterimResponseParityTests: XCTestCase {
    private var harness: ParityHarness!
    private let thousand = Data((0..<1000).map { UInt8($0 % 251) })

    override func setUpWithError() throws {
        harness = try ParityHarness()
        let body = thousand
        for interim in [100, 103] {
            harness.route("/interim/\(interim)/ok") { _, _ in
                ServerResponse(status: 200, body: .data(body)).with { $0.informational = [interim] }
            }
            harness.route("/interim/\(interim)/missing") { _, _ in
                ServerResponse.text("not here", status: 404).with { $0.informational = [interim] }
            }
            harness.route("/interim/\(interim)/redirect") { side, _ in
                ServerResponse.redirect(to: "\(side.pathPrefix)/target").with { $0.informational = [interim] }
            }
        }
        harness.route("/target") { ParityHarness.echo($1) }
    }

    override func tearDown() {
        harness.shutdown()
        harness = nil
    }

    func testOnlyTheFinalHeadReachesTheCallerThroughEveryTaskAPI() async throws {
        for interim in [100, 103] {
            for (path, status) in [("ok", 200), ("missing", 404), ("redirect", 200)] {
                let name = "\(interim) then \(path)"
                let async = try await harness.both { await $0.asyncData(URLRequest(url: $0.url("/interim/\(interim)/\(path)"))) }
                XCTAssertParity(async, "async: \(name)")
                XCTAssertEqual(async.manager.status, status, name)
                let completion = try await harness.both {
                    try await $0.completionData(URLRequest(url: $0.url("/interim/\(interim)/\(path)")))
                }
                XCTAssertParity(completion, "completion handler: \(name)")
                XCTAssertEqual(completion.manager.status, status, name)
                let delegate = try await harness.both { client in
                    try await client.delegateTask(RecordingDelegate()) { $0.dataTask(with: client.url("/interim/\(interim)/\(path)")) }
                        .outcome
                }
                XCTAssertParity(delegate, "delegate: \(name)")
                XCTAssertEqual(delegate.manager.status, status, name)
            }
            let ok = try await harness.both { await $0.asyncData(URLRequest(url: $0.url("/interim/\(interim)/ok"))) }
            XCTAssertEqual(ok.manager.bodyLength, 1000, "the final response's body, whole")
            let redirected = try await harness.both { await $0.asyncData(URLRequest(url: $0.url("/interim/\(interim)/redirect"))) }
            XCTAssertEqual(redirected.manager.url, "http://127.0.0.1:\(harness.server.port)/{side}/target", "the redirect is followed")
        }
    }

    func testExpectContinueOnALargePOSTGivesTheFinalStatus() async throws {
        let body = Data(repeating: 0x61, count: 100 * 1024)
        let result = try await harness.both { client in
            var request = URLRequest(url: client.url("/target"))
            request.httpMethod = "POST"
            request.setValue("100-continue", forHTTPHeaderField: "Expect")
            request.httpBody = body
            return await client.asyncData(request)
        }
        XCTAssertParity(result, "POST 100 KB with Expect: 100-continue")
        XCTAssertEqual(result.manager.status, 200)
        XCTAssertEqual(result.manager.header("X-Body-Length"), "102400")
    }

    /// With the OAuth2 kit, a `100 Continue` before a 401 must not hide the 401: the refresh runs
    /// and the request is sent again with the new token.
    func testA401AfterAnInterimHeadStillTriggersTheRefresh() async throws {
        let api = try OAuthServer(access: nil)
        defer { api.shutdown() }
        api.server.route("/api/interim") { request in
            let fresh = api.currentAccess.map { request.headers["authorization"] == "Bearer \($0)" } ?? false
            let response = fresh ? ServerResponse.text("fresh") : ServerResponse.text("expired", status: 401)
            return response.with { $0.informational = [100] }
        }
        let auth = OAuth2Authenticator(
            origins: [api.baseURL], tokenEndpoint: api.endpoint, store: InMemoryCredentialStore(api.credential(access: "stale")))
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        defer { manager.invalidateAndCancel() }
        let result = await fetched(manager.session, URLRequest(url: api.apiURL("/interim")))
        XCTAssertEqual(result.status, 200)
        XCTAssertEqual(result.text, "fresh")
        XCTAssertEqual(api.tokenRequestCount, 1, "the 401 behind the 100 ran the refresh")
    }
}
