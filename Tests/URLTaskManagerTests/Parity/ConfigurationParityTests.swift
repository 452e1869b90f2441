import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

/// The caller's `URLSessionConfiguration` is honoured through a manager exactly as by a plain
/// session, and never mutated.
final class ConfigurationParityTests: XCTestCase {
    private var harness: ParityHarness!

    override func setUpWithError() throws {
        harness = try ParityHarness()
        harness.route("/echo") { ParityHarness.echo($1) }
        harness.route("/slow") { _, _ in .text("too late").with { $0.delay = .seconds(4) } }
        harness.route("/set-cookie") { _, _ in
            ServerResponse(headers: ["Set-Cookie": "flavour=chocolate; Path=/", "X-Custom": "cookie"], body: .data(Data("set".utf8)))
        }
    }

    override func tearDown() {
        harness.shutdown()
        harness = nil
    }

    func testAdditionalHeadersReachTheServer() async throws {
        let configuration = {
            let configuration = ParityHarness.defaultConfiguration()
            configuration.httpAdditionalHeaders = ["X-Extra": "from-configuration", "User-Agent": "ParityAgent/1.0"]
            return configuration
        }
        let result = try await harness.both(configuration: configuration) { client in
            let outcome = await client.asyncData(URLRequest(url: client.url("/echo")))
            let seen = harness.server.requests(path: client.path("/echo")).last
            return [outcome.description, seen?.headers["X-Extra"] ?? "-", seen?.headers["User-Agent"] ?? "-"]
        }
        XCTAssertParity(result, "httpAdditionalHeaders")
        XCTAssertEqual(result.manager[1], "from-configuration")
        XCTAssertEqual(result.manager[2], "ParityAgent/1.0")

        // A header set on the request wins over the configuration's.
        let overridden = try await harness.both(configuration: configuration) { client in
            var request = URLRequest(url: client.url("/echo"))
            request.setValue("from-request", forHTTPHeaderField: "X-Extra")
            return await client.asyncData(request)
        }
        XCTAssertParity(overridden, "httpAdditionalHeaders overridden by the request")
        XCTAssertEqual(overridden.manager.header("X-Received-Extra"), "from-request")
    }

    /// `httpAdditionalHeaders` names reach the server spelt as the configuration gives them, as
    /// a plain session sends them (Foundation's `test_verifyHttpAdditionalHeaders`): `header3`,
    /// not the `Header3` that corelibs' `setValue(_:forHTTPHeaderField:)` would store.
    func testAdditionalHeaderNamesKeepTheirSpelling() async throws {
        let given = ["header3": "svalue3", "x-lower-Mixed": "v2", "X-UPPER": "v1"]
        let configuration = {
            let configuration = ParityHarness.defaultConfiguration()
            configuration.httpAdditionalHeaders = given
            return configuration
        }
        let result = try await harness.both(configuration: configuration) { client in
            let outcome = await client.asyncData(URLRequest(url: client.url("/echo")))
            let seen = harness.server.requests(path: client.path("/echo")).last?.headers
            // The raw names on the wire, of the configuration's headers only.
            let names = (seen.map(Array.init) ?? []).map(\.name).filter { name in
                given.keys.contains { $0.caseInsensitiveCompare(name) == .orderedSame }
            }
            return [outcome.description] + names.sorted()
        }
        XCTAssertParity(result, "httpAdditionalHeaders names")
        XCTAssertEqual(Array(result.manager.dropFirst()), given.keys.sorted())
    }

    func testTimeoutIntervalForRequest() async throws {
        let configuration = {
            let configuration = ParityHarness.defaultConfiguration()
            configuration.timeoutIntervalForRequest = 1
            return configuration
        }
        let result = try await harness.both(configuration: configuration) { client in
            let start = ContinuousClock.now
            let outcome = try await client.completionData(URLRequest(url: client.url("/slow")))
            let elapsed = ContinuousClock.now - start
            XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(900), "\(client.side)")
            XCTAssertLessThan(elapsed, .milliseconds(3500), "\(client.side)")
            return outcome
        }
        XCTAssertParity(result, "timeoutIntervalForRequest 1 s")
        XCTAssertEqual(result.manager.errorCode, NSURLErrorTimedOut)
    }

    /// A cookie set by one response is sent with the next request and lands in the caller's
    /// cookie storage, as with a plain session.
    func testCookiesAreStoredAndSent() async throws {
        let result = try await harness.both { client in
            let set = await client.asyncData(URLRequest(url: client.url("/set-cookie")))
            let next = await client.asyncData(URLRequest(url: client.url("/echo")))
            let stored = client.configuration.httpCookieStorage?.cookies?.map { "\($0.name)=\($0.value)" } ?? []
            return [set.description, next.header("X-Received-Cookie") ?? "-", stored.joined(separator: ",")]
        }
        XCTAssertParity(result, "Set-Cookie then next request")
        XCTAssertEqual(result.manager[1], "flavour=chocolate")
        XCTAssertEqual(result.manager[2], "flavour=chocolate")

        let disabled = try await harness.both(configuration: {
            let configuration = ParityHarness.defaultConfiguration()
            configuration.httpShouldSetCookies = false
            return configuration
        }) { client in
            _ = await client.asyncData(URLRequest(url: client.url("/set-cookie")))
            let next = await client.asyncData(URLRequest(url: client.url("/echo")))
            return next.header("X-Received-Cookie") ?? "-"
        }
        XCTAssertParity(disabled, "httpShouldSetCookies = false")
        XCTAssertEqual(disabled.manager, "-")
    }

    func testCallersConfigurationIsNotMutated() throws {
        final class MarkerProtocol: URLProtocol {}
        let configuration = ParityHarness.defaultConfiguration()
        configuration.protocolClasses = [MarkerProtocol.self] + (configuration.protocolClasses ?? [])
        configuration.httpAdditionalHeaders = ["X-Extra": "1"]
        let cookies = configuration.httpCookieStorage
        let credentials = configuration.urlCredentialStorage
        let before = configuration.protocolClasses!.map { ObjectIdentifier($0) }

        let manager = URLTaskManager(configuration: configuration)
        defer { manager.invalidateAndCancel() }

        XCTAssertEqual(configuration.protocolClasses!.map { ObjectIdentifier($0) }, before)
        XCTAssertTrue(configuration.httpShouldSetCookies)
        XCTAssertTrue(configuration.httpCookieStorage === cookies)
        XCTAssertTrue(configuration.urlCredentialStorage === credentials)
        XCTAssertNil(configuration.urlCache)
        XCTAssertEqual(configuration.httpAdditionalHeaders?["X-Extra"] as? String, "1")
        XCTAssertEqual(configuration.timeoutIntervalForRequest, 30)
        // The manager's session got its own copy, with the bridge first and the caller's classes after.
        let sessionClasses = manager.session.configuration.protocolClasses ?? []
        XCTAssertEqual(sessionClasses.count, before.count + 1)
        XCTAssertEqual(sessionClasses.dropFirst().map { ObjectIdentifier($0) }, before)
    }
}
