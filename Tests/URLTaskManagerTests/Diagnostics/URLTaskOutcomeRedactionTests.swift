import Foundation
import LoopbackServer
import XCTest

@testable import URLTaskManager
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What every observer and reactor is handed, `URLTaskOutcome`, as `"\(outcome)"`,
/// `String(reflecting:)`, `dump(_:)` and `Mirror(reflecting:)` show it (issue 37, finding 4):
/// outcomes of real exchanges on 127.0.0.1 for a URL with a user, a password and an API key in
/// its query, answered with a `Set-Cookie` and a token header, or cut off before any answer.
/// No secret shows; the host, the path, the status and a harmless header still do.
final class URLTaskOutcomeRedactionTests: XCTestCase {
    /// Keeps every outcome it is told of.
    final class Recorder: URLTaskOutcomeObserver {
        let outcomes = LockedBox<[URLTaskOutcome]>([])

        func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
            outcomes.withLock { $0.append(outcome) }
        }
    }

    static let urlSecrets = ["S3CR3T-USER-41", "S3CR3T-PASS-42", "S3CR3T-KEY-43"]
    static let headerSecrets = ["S3CR3T-COOKIE-44", "S3CR3T-TOKEN-45"]

    /// `/items?api_key=...&page=2` on `server`, with a user and a password.
    private static func secretURL(_ server: LoopbackServer) -> URL {
        URL(string: "http://S3CR3T-USER-41:S3CR3T-PASS-42@127.0.0.1:\(server.port)/items?api_key=S3CR3T-KEY-43&page=2")!
    }

    /// The outcomes a manager's observer saw for one request to `server`.
    private func outcomes(of server: LoopbackServer) async throws -> [URLTaskOutcome] {
        let recorder = Recorder()
        let manager = URLTaskManager(observers: [recorder])
        defer { manager.invalidateAndCancel() }
        _ = await fetched(manager.session, URLRequest(url: Self.secretURL(server)))
        let outcomes = recorder.outcomes.snapshot
        XCTAssertFalse(outcomes.isEmpty, "no outcome was observed")
        return outcomes
    }

    /// The four surfaces of `outcome`, by name.
    private static func surfaces(of outcome: URLTaskOutcome) -> [(name: String, text: String)] {
        [
            ("String(describing:)", String(describing: outcome)), ("String(reflecting:)", String(reflecting: outcome)),
            ("dump", RedactionSurfaceTests.dumped(outcome)), ("Mirror children", RedactionSurfaceTests.mirrored(outcome)),
        ]
    }

    private func check(_ outcome: URLTaskOutcome, hides secrets: [String], shows visible: [String], line: UInt = #line) {
        for (surface, text) in Self.surfaces(of: outcome) {
            for secret in secrets {
                XCTAssertFalse(text.contains(secret), "\(surface) shows \(secret):\n\(text)", line: line)
            }
            for part in visible {
                XCTAssertTrue(text.contains(part), "\(surface) lost \(part):\n\(text)", line: line)
            }
        }
    }

    func testAResponseOutcomeShowsNoSecret() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(prefix: "/") { _ in
            ServerResponse(
                status: 201,
                headers: [
                    "Set-Cookie": "session=S3CR3T-COOKIE-44; Path=/; HttpOnly", "X-Auth-Token": "S3CR3T-TOKEN-45",
                    "X-Visible": "visible-value",
                ],
                body: .empty)
        }
        let outcomes = try await outcomes(of: server)
        for outcome in outcomes {
            XCTAssertEqual(outcome.statusCode, 201)
            check(
                outcome, hides: Self.urlSecrets + Self.headerSecrets,
                shows: ["201", "127.0.0.1", "/items", "page=2", "X-Visible", "visible-value", "Set-Cookie"])
        }
    }

    /// A connection reset before the head: a `URLError` whose user info holds the failing URL.
    func testAFailureOutcomeShowsNoSecret() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(prefix: "/") { _ in
            ServerResponse.status(200).with {
                $0.dropAfterHeadBytes = 0
                $0.dropStyle = .reset
            }
        }
        let outcomes = try await outcomes(of: server)
        for outcome in outcomes {
            XCTAssertNotNil(outcome.urlErrorCode, "\(outcome.statusCode.map(String.init) ?? "-")")
            check(outcome, hides: Self.urlSecrets, shows: ["127.0.0.1", "/items"])
        }
    }
}
