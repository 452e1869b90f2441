import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
@testable import URLTaskManager

/// Every transition of ``ConnectionSlotsStateMachine``, without I/O.
final class ConnectionSlotsStateMachineTests: XCTestCase {
    typealias Machine = ConnectionSlotsStateMachine

    static func id(_ n: UInt64) -> URLTask.ID { URLTask.ID(rawValue: n) }

    func testUpToTheLimitSendsThenQueuesFirstComeFirstServed() {
        var m = Machine(limit: 2)
        XCTAssertEqual(m.acquire(Self.id(1), host: "a"), .send)
        XCTAssertEqual(m.acquire(Self.id(2), host: "a"), .send)
        XCTAssertEqual(m.acquire(Self.id(3), host: "a"), .wait)
        XCTAssertEqual(m.acquire(Self.id(4), host: "a"), .wait)
        XCTAssertEqual(m.release(host: "a"), Self.id(3))
        XCTAssertEqual(m.release(host: "a"), Self.id(4))
        XCTAssertNil(m.release(host: "a"), "4 and one other in flight, nobody waits")
        XCTAssertEqual(m.acquire(Self.id(5), host: "a"), .send, "a slot is free again")
        XCTAssertNil(m.release(host: "a"))
        XCTAssertNil(m.release(host: "a"))
        XCTAssertEqual(m.busyHosts, 0, "an idle host is forgotten")
    }

    func testHostsHaveTheirOwnSlots() {
        var m = Machine(limit: 1)
        XCTAssertEqual(m.acquire(Self.id(1), host: "a"), .send)
        XCTAssertEqual(m.acquire(Self.id(2), host: "b"), .send)
        XCTAssertEqual(m.acquire(Self.id(3), host: "a"), .wait)
        XCTAssertNil(m.release(host: "b"), "b's release does not wake a's waiter")
        XCTAssertEqual(m.release(host: "a"), Self.id(3))
        XCTAssertNil(m.release(host: "a"))
        XCTAssertEqual(m.busyHosts, 0)
    }

    func testARemovedWaiterIsSkipped() {
        var m = Machine(limit: 1)
        _ = m.acquire(Self.id(1), host: "a")
        _ = m.acquire(Self.id(2), host: "a")
        _ = m.acquire(Self.id(3), host: "a")
        XCTAssertTrue(m.remove(Self.id(2), host: "a"))
        XCTAssertFalse(m.remove(Self.id(2), host: "a"), "removed twice")
        XCTAssertFalse(m.remove(Self.id(1), host: "a"), "in flight, not waiting")
        XCTAssertEqual(m.release(host: "a"), Self.id(3))
        XCTAssertNil(m.release(host: "a"))
        XCTAssertEqual(m.busyHosts, 0)
    }

    func testAReleaseWithNothingInFlightIsIgnoredAndTheLimitIsAtLeastOne() {
        var m = Machine(limit: 0)
        XCTAssertEqual(m.limit, 1)
        XCTAssertNil(m.release(host: "a"))
        XCTAssertEqual(m.acquire(Self.id(1), host: "a"), .send)
        XCTAssertEqual(m.acquire(Self.id(2), host: "a"), .wait)
    }
}

/// The key requests share slots under, as URLSession pools connections.
final class ConnectionSlotsHostKeyTests: XCTestCase {
    func testSchemeHostAndEffectivePortMakeTheKey() {
        func key(_ string: String) -> String { URLOrigin.slotKey(of: URLRequest(url: URL(string: string)!)) }
        XCTAssertEqual(key("http://API.example.com/a"), key("http://api.example.com:80/b"))
        XCTAssertEqual(key("https://api.example.com/a"), key("https://api.example.com:443/a"))
        XCTAssertNotEqual(key("http://api.example.com/a"), key("https://api.example.com/a"))
        XCTAssertNotEqual(key("http://127.0.0.1:8080/"), key("http://127.0.0.1:8081/"))
    }
}
