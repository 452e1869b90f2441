import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest

/// A URLSession (the real client LoopbackServer is meant for) with helpers that return typed
/// responses; each test makes its own and invalidates it so connections do not leak across tests.
final class TestHTTPClient: Sendable {
    let session: URLSession

    init(timeout: TimeInterval = 20) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        session = URLSession(configuration: configuration)
    }

    /// Sends `request` and returns the body and the HTTP response.
    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        let (data, response) = try await session.data(for: request)
        guard let http = response as? HTTPURLResponse else {
            throw URLError(.badServerResponse)
        }
        return (data, http)
    }

    /// GETs `url`.
    func get(_ url: URL) async throws -> (Data, HTTPURLResponse) {
        try await send(URLRequest(url: url))
    }

    /// Cancels outstanding tasks and releases the session's connections.
    func invalidate() {
        session.invalidateAndCancel()
    }
}

/// A fresh server and client per test, released after it.
class ServerAndClientTestCase: XCTestCase {
    var server: LoopbackServer!
    var client: TestHTTPClient!

    override func setUpWithError() throws {
        server = try LoopbackServer()
        client = TestHTTPClient()
    }

    override func tearDown() {
        client.invalidate()
        server.shutdown()
    }
}
