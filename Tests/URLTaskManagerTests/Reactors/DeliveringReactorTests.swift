import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
import TestSupport

/// A reactor with `requeue: false` runs its work and then gives the caller what arrived: the
/// whole response and body, or the transport's own error, exactly as a plain session would.
final class DeliveringReactorTests: XCTestCase {
    /// Reacts to 5xx and to transport errors, does nothing, and does not requeue (a reactor
    /// that only records, or resets something, before the caller sees the answer).
    struct Observe: URLTaskReactor {
        let runs: CallCounter
        var configuration: URLTaskReactorConfiguration {
            var configuration = URLTaskReactorConfiguration.default
            configuration.mode = .singleFlight(loopGuard: configuration.loopGuard, afterwards: .deliverResponse)
            return configuration
        }

        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
            (outcome.statusCode ?? 0) >= 500 || outcome.urlErrorCode != nil
        }

        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
            runs.increment()
        }
    }

    func testTheWholeBodyOfTheResponseReactedToReachesTheCaller() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let length = 2 << 20
        server.route("/big-500") { _ in ServerResponse(status: 500, body: .generated(length: length)) }
        let runs = CallCounter()
        let manager = URLTaskManager(reactors: [Observe(runs: runs)])
        defer { manager.invalidateAndCancel() }

        let (data, response) = try await manager.session.data(from: server.url("/big-500"))
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 500)
        XCTAssertEqual(data.count, length, "the body the reactor looked at is delivered whole")
        let hasher = FastSHA256()
        hasher.update(data)
        XCTAssertEqual(hasher.hexDigest(), FastSHA256.generatedBody(length: length), "byte for byte")
        XCTAssertEqual(runs.value, 1)
    }

    func testTheTransportsOwnErrorReachesTheCaller() async throws {
        // A port nobody listens on: take one from a server, then shut it down.
        let closed = try LoopbackServer()
        let url = closed.url("/gone")
        closed.shutdown()
        let runs = CallCounter()
        let manager = URLTaskManager(reactors: [Observe(runs: runs)])
        defer { manager.invalidateAndCancel() }
        let plain = URLSession(configuration: .default)
        defer { plain.invalidateAndCancel() }

        let expected = await fetched(plain, URLRequest(url: url)).urlErrorCode
        XCTAssertEqual(expected, .cannotConnectToHost, "the control: what a plain session reports")
        let got = await fetched(manager.session, URLRequest(url: url))
        XCTAssertEqual(got.urlErrorCode, expected, got.label)
        XCTAssertEqual(runs.value, 1)
    }
}
