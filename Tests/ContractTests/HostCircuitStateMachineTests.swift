import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import URLTaskManager  // not @testable
import XCTest

/// The third-party breaker's machine, every transition, without I/O.
final class HostCircuitStateMachineTests: XCTestCase {
    private let t0 = ContinuousClock.now
    private let a = URLOrigin(URL(string: "https://a.example")!)!
    private let b = URLOrigin(URL(string: "https://b.example")!)!
    /// Two tasks' ids (a task made for a test, as an interceptor's test would make one).
    private let one = URLTask(request: URLRequest(url: URL(string: "https://a.example/1")!)).id
    private let two = URLTask(request: URLRequest(url: URL(string: "https://a.example/2")!)).id

    func testFailuresInARowOpenAndASuccessForgetsThem() {
        var m = HostCircuitStateMachine(threshold: 3, coolDown: .seconds(10))
        XCTAssertEqual(m.outcomeArrives(of: one, at: a, failed: true, now: t0), .none)
        XCTAssertEqual(m.outcomeArrives(of: one, at: a, failed: false, now: t0), .none)
        XCTAssertEqual(m.trackedHosts, 0, "a success forgets the failures")
        XCTAssertEqual(m.outcomeArrives(of: one, at: a, failed: true, now: t0), .none)
        XCTAssertEqual(m.outcomeArrives(of: one, at: a, failed: true, now: t0), .none)
        XCTAssertEqual(m.outcomeArrives(of: one, at: a, failed: true, now: t0), .opened(failures: 3))
        XCTAssertEqual(m.requestArrives(two, to: a, now: t0 + .seconds(3)), .refuse(retryAfter: .seconds(7)))
        XCTAssertEqual(m.requestArrives(two, to: b, now: t0), .send, "another host is not affected")
    }

    func testOneProbeAtATimeAndItsOutcomeDecides() {
        var m = HostCircuitStateMachine(threshold: 1, coolDown: .seconds(10))
        _ = m.outcomeArrives(of: one, at: a, failed: true, now: t0)
        XCTAssertEqual(m.requestArrives(one, to: a, now: t0 + .seconds(10)), .sendAsProbe)
        XCTAssertEqual(m.requestArrives(two, to: a, now: t0 + .seconds(11)), .refuse(retryAfter: .seconds(9)), "one probe at a time")
        XCTAssertEqual(m.outcomeArrives(of: two, at: a, failed: false, now: t0 + .seconds(11)), .none, "not the probe's outcome")
        XCTAssertEqual(m.outcomeArrives(of: one, at: a, failed: false, now: t0 + .seconds(12)), .closed)
        XCTAssertEqual(m.requestArrives(two, to: a, now: t0 + .seconds(12)), .send)
        XCTAssertEqual(m.trackedHosts, 0)
    }

    func testAFailedProbeReopensAndALostProbeIsReplacedAfterTheCoolDown() {
        var m = HostCircuitStateMachine(threshold: 1, coolDown: .seconds(10))
        _ = m.outcomeArrives(of: one, at: a, failed: true, now: t0)
        XCTAssertEqual(m.requestArrives(one, to: a, now: t0 + .seconds(10)), .sendAsProbe)
        XCTAssertEqual(m.outcomeArrives(of: one, at: a, failed: true, now: t0 + .seconds(11)), .reopened)
        XCTAssertEqual(m.requestArrives(two, to: a, now: t0 + .seconds(12)), .refuse(retryAfter: .seconds(9)))
        // This probe is cancelled and never reports: after a cool-down another goes.
        XCTAssertEqual(m.requestArrives(one, to: a, now: t0 + .seconds(21)), .sendAsProbe)
        XCTAssertEqual(m.requestArrives(two, to: a, now: t0 + .seconds(31)), .sendAsProbe)
        XCTAssertEqual(m.outcomeArrives(of: one, at: a, failed: false, now: t0 + .seconds(32)), .none, "the lost probe's late answer")
        XCTAssertEqual(m.outcomeArrives(of: two, at: a, failed: false, now: t0 + .seconds(32)), .closed)
    }

    func testAnOutcomeOfARequestSentBeforeTheCircuitOpenedChangesNothing() {
        var m = HostCircuitStateMachine(threshold: 1, coolDown: .seconds(10))
        XCTAssertEqual(m.outcomeArrives(of: one, at: a, failed: true, now: t0), .opened(failures: 1))
        XCTAssertEqual(m.outcomeArrives(of: two, at: a, failed: false, now: t0), .none)
        XCTAssertEqual(m.requestArrives(two, to: a, now: t0 + .seconds(1)), .refuse(retryAfter: .seconds(9)))
    }
}
