import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// Every wait inside the pipeline counts toward the request's `timeoutInterval` and ends in
/// the `URLError.timedOut` a plain session gives; a token endpoint's whole answer is bounded;
/// a refresh whose reactor run timed out stops.
final class PipelineWaitTimeoutTests: XCTestCase {
    typealias Kit = ReactorTestKit

    /// A valid token answer, one byte every 500 ms: about 40 s in all.
    private static let drippingToken: ServerResponse = {
        let json = Data(#"{"access_token":"dripped","token_type":"Bearer","expires_in":3600}"#.utf8)
        let bytes = json.map { Data([$0]) }
        return ServerResponse(
            status: 200, headers: ["Content-Type": "application/json"], body: .chunked(bytes, chunkDelay: .milliseconds(500)))
    }()

    private var api: OAuthServer!

    override func setUpWithError() throws {
        api = try OAuthServer(access: nil)
        api.server.route("POST", "/oauth/drip") { _ in Self.drippingToken }
        api.server.route("/slow") { _ in ServerResponse.text("late").with { $0.delay = .seconds(3) } }
    }

    override func tearDown() {
        api.shutdown()
        api = nil
    }

    private func manager(_ auth: OAuth2Authenticator, reactor: URLTaskReactorConfiguration = .authentication) -> URLTaskManager {
        URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)],
            reactors: [OAuth2RefreshReactor(authenticator: auth, configuration: reactor)])
    }

    private func authenticator(
        endpointTimeout: Duration?, expiresIn: TimeInterval = 3600, onFailure: (@Sendable (any Error) async -> Void)? = nil
    ) -> OAuth2Authenticator {
        OAuth2Authenticator(
            origins: [api.baseURL],
            tokenEndpoint: OAuth2TokenEndpoint(url: api.server.url("/oauth/drip"), clientID: "tests", timeout: endpointTimeout),
            store: InMemoryCredentialStore(api.credential(access: "stale", expiresIn: expiresIn)), onRefreshFailure: onFailure)
    }

    private func request(timeout: TimeInterval) -> URLRequest {
        var request = URLRequest(url: api.apiURL())
        request.timeoutInterval = timeout
        return request
    }

    /// A plain session's timeout, the reference for the manager's domain and code.
    private func plainTimeout() async throws -> NSError {
        let plain = URLSession(configuration: .ephemeral)
        defer { plain.invalidateAndCancel() }
        var request = URLRequest(url: api.server.url("/slow"))
        request.timeoutInterval = 1
        let result = await fetched(plain, request)
        let error = try XCTUnwrap(result.error) as NSError
        XCTAssertEqual(error.code, NSURLErrorTimedOut)
        return error
    }

    /// Asserts `result` is a timeout like `plain`'s, naming `url` as Apple's URLSession does,
    /// that came after about `timeout` seconds.
    private func assertTimedOut(
        _ result: Fetched, after elapsed: Duration, timeout: Duration, like plain: NSError, url: URL, _ label: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        printFigures("[wait timeout] \(label): \(result.label) after \(elapsed)")
        XCTAssertEqual(result.urlErrorCode, .timedOut, "\(label): \(result.label)", file: file, line: line)
        XCTAssertGreaterThanOrEqual(elapsed, timeout * 0.9, label, file: file, line: line)
        XCTAssertLessThan(elapsed, timeout + .seconds(2), label, file: file, line: line)
        guard let error = result.error as NSError? else { return }
        XCTAssertEqual(error.domain, plain.domain, label, file: file, line: line)
        XCTAssertEqual(error.code, plain.code, label, file: file, line: line)
        // corelibs' own timeout carries no userInfo at all (printed below); Apple's carries the
        // description and both failing-URL keys, which is what the pipeline's timeout gives.
        printFigures("[wait timeout] plain timeout's userInfo: \(plain.userInfo)")
        XCTAssertEqual(error.localizedDescription, "The request timed out.", label, file: file, line: line)
        XCTAssertEqual(error.userInfo[NSURLErrorFailingURLErrorKey] as? URL, url, label, file: file, line: line)
        XCTAssertEqual(error.userInfo["NSErrorFailingURLStringKey"] as? String, url.absoluteString, label, file: file, line: line)
    }

    /// A request whose token must be renewed first waits in `BearerInterceptor` for a refresh
    /// that drips: it ends at its own `timeoutInterval`, not when the token arrives.
    func testAWaitForACredentialEndsAtTheRequestTimeout() async throws {
        let plain = try await plainTimeout()
        let manager = manager(authenticator(endpointTimeout: nil, expiresIn: -10))
        defer { manager.invalidateAndCancel() }
        let started = ContinuousClock.now
        let result = await fetched(manager.session, request(timeout: 1))
        assertTimedOut(result, after: started.duration(to: .now), timeout: .seconds(1), like: plain, url: api.apiURL(), "interceptor wait")
    }

    /// A request that meets a refresh going (another request's 401 started it) waits at the
    /// reactor's gate: it ends at its own `timeoutInterval`.
    func testAWaitAtAReactorsGateEndsAtTheRequestTimeout() async throws {
        let plain = try await plainTimeout()
        let manager = manager(authenticator(endpointTimeout: nil))
        defer { manager.invalidateAndCancel() }
        let first = Kit.start(manager.session, api.apiURL())
        defer { first.cancel() }
        _ = try await api.server.waitForRequests(path: "/oauth/drip", count: 1)
        let started = ContinuousClock.now
        let result = await fetched(manager.session, request(timeout: 1))
        assertTimedOut(result, after: started.duration(to: .now), timeout: .seconds(1), like: plain, url: api.apiURL(), "gate wait")
        XCTAssertEqual(api.server.requests(path: "/api/profile").count, 1, "the second request was never sent")
    }

    /// A request held in a batch longer than its `timeoutInterval` (and shorter than
    /// `maximumHoldTime`) ends at the timeout.
    func testABatchHoldEndsAtTheRequestTimeout() async throws {
        let plain = try await plainTimeout()
        let manager = URLTaskManager(
            interceptors: [BatchInterceptor(size: 100, window: .seconds(30))], options: .init(maximumHoldTime: .seconds(60)))
        defer { manager.invalidateAndCancel() }
        let started = ContinuousClock.now
        let url = api.server.url("/held")
        var held = URLRequest(url: url)
        held.timeoutInterval = 1
        let result = await fetched(manager.session, held)
        assertTimedOut(result, after: started.duration(to: .now), timeout: .seconds(1), like: plain, url: url, "batch hold")
        XCTAssertEqual(api.server.requestCount(path: "/held"), 0)
    }

    /// The token endpoint's `timeout` bounds its whole answer: a dripping endpoint fails the
    /// requests waiting for the refresh at that timeout, as a hung one does.
    func testADrippingTokenEndpointFailsTheWaitersAtTheEndpointsTimeout() async throws {
        let manager = manager(authenticator(endpointTimeout: .seconds(1)))
        defer { manager.invalidateAndCancel() }
        let started = ContinuousClock.now
        let url = api.apiURL()
        let results = await Kit.storm(manager.session, count: 5) { _ in URLRequest(url: url) }
        let elapsed = started.duration(to: .now)
        printFigures("[wait timeout] 5 requests behind a dripping refresh (endpoint timeout 1 s): \(Kit.tally(results)) after \(elapsed)")
        XCTAssertLessThan(elapsed, .seconds(3))
        for result in results {
            guard let error = result.error as? URLError else { return XCTFail(result.label) }
            XCTAssertEqual(error.code, .timedOut)
        }
    }

    /// When the refresh reactor's run times out, a refresh nothing else bounds (an endpoint
    /// without a timeout) is cancelled (its failure reaches the hook at once), instead of running
    /// on until the endpoint answers.
    func testAReactorTimeoutCancelsTheRefresh() async throws {
        let hook = Latch<String>("onRefreshFailure")
        var configuration = URLTaskReactorConfiguration.authentication
        configuration.timeout = .seconds(1)
        let manager = manager(authenticator(endpointTimeout: nil, onFailure: { _ = hook.fulfill("\($0)") }), reactor: configuration)
        defer { manager.invalidateAndCancel() }
        let started = ContinuousClock.now
        let result = await fetched(manager.session, URLRequest(url: api.apiURL()))
        guard result.taskError?.code == .reactorTimedOut else { return XCTFail(result.label) }
        let failure = try await hook.wait(timeout: .seconds(5))
        let elapsed = started.duration(to: .now)
        printFigures("[wait timeout] reactor timeout 1 s: refresh ended (\(failure)) after \(elapsed)")
        XCTAssertLessThan(elapsed, .seconds(4), "the dripping refresh (40 s) was cancelled")
    }
}
