import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest

/// A per-request hold time from a caller (``URLTaskPolicy``, also a policy value made by hand) is
/// clamped before any arithmetic: 0.2.0 trapped in `TaskRun` ("Double value cannot be
/// converted to Int64") for a hold of about 9.2e15 s or more, NaN or infinity.
final class ExtremeHoldTimeTests: XCTestCase {
    private var server: LoopbackServer!

    override func setUpWithError() throws {
        server = try LoopbackServer()
        server.route("/echo") { _ in .text("fine") }
    }

    override func tearDown() {
        server.shutdown()
    }

    /// A hold too long to represent is as good as none: the request waits until its batch fills,
    /// and the batch then sends it.
    func testAHugeHoldTimeWaitsForTheBatch() async throws {
        let huge: [URLTaskPolicy] = [
            URLTaskPolicy(maximumHoldTime: .seconds(1e16)), URLTaskPolicy(maximumHoldTime: .seconds(Int64.max)),
            Self.policy(holdingSeconds: 1e16), Self.policy(holdingSeconds: 1e300), Self.policy(holdingSeconds: .infinity),
            Self.policy(holdingSeconds: Double(Int64.max)), Self.policy(holdingSeconds: .greatestFiniteMagnitude),
        ]
        for policy in huge {
            let manager = URLTaskManager(interceptors: [BatchInterceptor(size: 2)])
            defer { manager.invalidateAndCancel() }
            var held = URLRequest(url: server.url("/echo"))
            policy.apply(to: &held)
            // Carried, not dropped: 0.2.0's header encoder threw on infinity and lost the policy.
            XCTAssertEqual(URLTaskPolicy(of: held)?.maximumHoldSeconds ?? 0, 3_155_760_000, accuracy: 1e6)
            let session = manager.session
            let plain = URLRequest(url: server.url("/echo"))
            async let first = session.data(for: held)
            async let second = session.data(for: plain)
            let (a, b) = try await (first, second)
            XCTAssertEqual(String(decoding: a.0, as: UTF8.self), "fine", "\(policy.maximumHoldSeconds ?? 0)")
            XCTAssertEqual(String(decoding: b.0, as: UTF8.self), "fine")
        }
    }

    /// Zero, a negative hold and NaN hold nothing: the request fails at once with `holdTimedOut`
    /// and a zero limit, a typed error rather than a trap.
    func testAZeroNegativeOrNaNHoldTimeFailsAtOnce() async throws {
        let none: [URLTaskPolicy] = [
            URLTaskPolicy(maximumHoldTime: .zero), URLTaskPolicy(maximumHoldTime: .seconds(-5)),
            URLTaskPolicy(maximumHoldTime: .seconds(Int64.min)), Self.policy(holdingSeconds: 0), Self.policy(holdingSeconds: -1),
            Self.policy(holdingSeconds: -.infinity), Self.policy(holdingSeconds: .nan), Self.policy(holdingSeconds: -1e300),
        ]
        for policy in none {
            let manager = URLTaskManager(interceptors: [BatchInterceptor(size: 100)])
            defer { manager.invalidateAndCancel() }
            var request = URLRequest(url: server.url("/echo"), timeoutInterval: 5)
            policy.apply(to: &request)
            let started = ContinuousClock.now
            do {
                _ = try await manager.session.data(for: request)
                XCTFail("a batch of 100 released one request")
            } catch let error as URLTaskError {
                XCTAssertEqual(error.code, .holdTimedOut)
                XCTAssertEqual(error.limit, .zero, "\(policy.maximumHoldSeconds ?? 0)")
            } catch {
                XCTFail("\(policy.maximumHoldSeconds ?? 0): \(error)")
            }
            XCTAssertLessThan(started.duration(to: .now), .seconds(5), "held for the manager's 60 s")
        }
    }

    /// A policy value made by hand, as a caller may (``URLTaskPolicy/maximumHoldSeconds`` is public).
    private static func policy(holdingSeconds seconds: Double) -> URLTaskPolicy {
        var policy = URLTaskPolicy()
        policy.maximumHoldSeconds = seconds
        return policy
    }
}
