import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

/// A redirect status the transport cannot follow (no `Location`, or one that is not a URL) is the
/// response itself: a plain session hands the caller the 3xx, and so does the manager, through
/// every door and every API. corelibs never reports such a head to a delegate-driven inner task
/// (it drops the head of any 301-308 it means to follow, and then finds nothing to follow): the
/// transport reads it from the inner task when the transfer ends (issue 49, item 1: the session's
/// async `data(for:)` trapped, its completion handler got nil, nil, nil).
final class RedirectWithoutLocationTests: XCTestCase {
    private var harness: ParityHarness!
    private let codes = [301, 302, 303, 307, 308]
    /// Each unusable `Location`, by name: none at all, and one no `URL` parses.
    private let locations: [(name: String, value: String?)] = [("none", nil), ("unparsable", "http://[::1")]

    override func setUpWithError() throws {
        harness = try ParityHarness()
        for code in codes {
            for location in locations {
                harness.route("/3xx/\(code)/\(location.name)") { _, _ in
                    var headers: HTTPFields = ["Content-Type": "text/plain", "X-Redirect": "\(code)"]
                    if let value = location.value { headers["Location"] = value }
                    return ServerResponse(status: code, headers: headers, body: .data(Data("moved nowhere".utf8)))
                }
            }
        }
    }

    override func tearDown() {
        harness.shutdown()
        harness = nil
    }

    private func request(_ client: ParityClient, _ code: Int, _ location: String, method: String = "GET") -> URLRequest {
        var request = URLRequest(url: client.url("/3xx/\(code)/\(location)"))
        request.httpMethod = method
        if method == "POST" { request.httpBody = Data("a=1".utf8) }
        return request
    }

    func testAsyncDataGetsTheRedirectStatusItselfThroughBothDoors() async throws {
        for code in codes {
            for location in locations {
                for method in ["GET", "POST"] {
                    let result = try await harness.both { client in
                        await client.asyncData(request(client, code, location.name, method: method))
                    }
                    XCTAssertParity(result, "async \(method) \(code) Location \(location.name)")
                    XCTAssertEqual(result.manager.status, code, "\(method) \(code) \(location.name)")
                    XCTAssertEqual(result.manager.header("X-Redirect"), "\(code)")
                    XCTAssertNil(result.manager.errorCode)
                }
            }
        }
    }

    func testCompletionHandlerGetsTheRedirectStatusOnce() async throws {
        for code in codes {
            for location in locations {
                let result = try await harness.both { client in
                    let completed = try await client.completion { session, handler in
                        session.dataTask(with: request(client, code, location.name), completionHandler: handler)
                    }
                    return [completed.outcome.status ?? -1, completed.outcome.errorCode ?? 0, completed.calls.value]
                }
                XCTAssertParity(result, "completion handler \(code) Location \(location.name)")
                XCTAssertEqual(result.manager, [code, 0, 1], "\(code) \(location.name): status, error code, handler calls")
            }
        }
    }

    func testDelegateTaskGetsTheRedirectHeadAndEnds() async throws {
        for code in codes {
            for location in locations {
                let result = try await harness.both { client in
                    let delegate = RecordingDelegate()
                    let (outcome, record, _) = try await client.delegateTask(delegate) { session in
                        session.dataTask(with: request(client, code, location.name))
                    }
                    return [outcome.status ?? -1, outcome.errorCode ?? 0, record.responseCount, record.completionCount]
                }
                // One difference, on purpose: a plain corelibs session never calls the delegate's
                // `didReceive response` for these statuses (the task's `response` holds the 3xx);
                // the manager's outer task learns its response only through that call, as
                // Apple's URLSession delivers a redirect it does not follow.
                XCTAssertEqual(result.plain, [code, 0, 0, 1], "plain \(code) \(location.name): status, error, heads, completions")
                XCTAssertEqual(result.manager, [code, 0, 1, 1], "\(code) \(location.name): status, error, heads, completions")
            }
        }
    }

    func testDownloadGetsTheRedirectStatusThroughBothDoors() async throws {
        for code in codes {
            let result = try await harness.both { client in
                await client.asyncDownload(request(client, code, "none"))
            }
            XCTAssertParity(result, "download \(code) without Location")
            XCTAssertEqual(result.manager.status, code)
        }
    }

    func testBytesGetsTheRedirectStatus() async throws {
        let manager = URLTaskManager(configuration: ParityHarness.defaultConfiguration())
        defer { manager.session.invalidateAndCancel() }
        for code in codes {
            for location in locations {
                let (bytes, response) = try await manager.bytes(
                    for: URLRequest(url: harness.server.url("/side-methods/3xx/\(code)/\(location.name)")))
                var count = 0
                for try await _ in bytes { count += 1 }
                XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, code, "bytes \(code) \(location.name)")
                XCTAssertLessThanOrEqual(count, "moved nowhere".utf8.count)
            }
        }
    }
}
