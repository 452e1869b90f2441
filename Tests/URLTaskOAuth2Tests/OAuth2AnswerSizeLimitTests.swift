import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

/// A token answer longer than ``OAuth2TokenEndpoint/answerSizeLimit`` (issue 37, finding 8: 64 MiB
/// of JSON were read whole, peak memory 37 -> 236 MiB) fails with
/// ``OAuth2Error/tokenAnswerTooLarge(limit:)``, and the transfer is cut while it streams.
final class OAuth2AnswerSizeLimitTests: XCTestCase {
    private static let limit = 256 * 1024
    private static let bodyLength = 64 << 20

    /// 64 MiB with a `Content-Length` (cut as soon as the head announces it) and chunked, with
    /// no length (cut once the bytes counted pass the limit): the typed error, and the server's
    /// write fails (the client closed the connection) long before the body is out.
    func testAnAnswerBeyondTheLimitFailsTypedAndItsTransferIsCut() async throws {
        for chunked in [false, true] {
            let server = try LoopbackServer()
            defer { server.shutdown() }
            let written = Latch<ServerResponse.SendOutcome>("the oversized answer's writing ended (chunked: \(chunked))")
            server.route("POST", "/token") { _ in
                ServerResponse(
                    status: 200, headers: ["Content-Type": "application/json"],
                    body: .generated(length: Self.bodyLength, chunked: chunked)
                ).with { $0.onSent = { written.fulfill($0) } }
            }
            let endpoint = OAuth2TokenEndpoint(
                url: server.url("/token"), clientID: "tests", timeout: .seconds(30), answerSizeLimit: Self.limit)
            let credential = OAuth2Credential(accessToken: "a", refreshToken: "r", expiresAt: .distantFuture)
            do {
                let refreshed = try await endpoint.refresh(credential)
                XCTFail("chunked: \(chunked): an oversized answer was accepted: \(refreshed)")
            } catch let error as OAuth2Error {
                XCTAssertEqual(error, .tokenAnswerTooLarge(limit: Self.limit, url: server.url("/token")), "chunked: \(chunked)")
                XCTAssertFalse(error.requiresSignIn)
                XCTAssertFalse(error.isConfigurationError)
                XCTAssertTrue(error.description.contains("\(Self.limit)"), error.description)
            } catch {
                XCTFail("chunked: \(chunked): expected OAuth2Error.tokenAnswerTooLarge, got \(error)")
            }
            let outcome = try await written.wait(timeout: .seconds(30))
            XCTAssertFalse(outcome.completed, "chunked: \(chunked): the whole body was written: the transfer was not cut")
            XCTAssertLessThan(outcome.bodyBytesSent, Self.bodyLength / 4, "chunked: \(chunked)")
            printFigures(
                "oversized token answer (chunked: \(chunked)): server wrote \(outcome.bodyBytesSent) of \(Self.bodyLength) bytes before the cut"
            )
        }
    }

    /// An answer within the limit is read as before, and the default limit is 256 KiB.
    func testAnAnswerWithinTheLimitIsRead() async throws {
        XCTAssertEqual(OAuth2TokenEndpoint(url: URL(string: "https://auth.example.com/token")!).answerSizeLimit, 256 * 1024)
        let api = try OAuthServer()
        defer { api.shutdown() }
        let endpoint = OAuth2TokenEndpoint(url: api.tokenURL, clientID: "tests", answerSizeLimit: 200)
        let refreshed = try await endpoint.refresh(api.credential(access: "old"))
        XCTAssertEqual(refreshed.refreshToken, api.currentRefresh)
    }
}
