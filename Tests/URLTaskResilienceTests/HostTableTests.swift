import XCTest

@testable import URLTaskResilience

/// `HostTable`, the bound on a rate limiter's and a circuit breaker's per-host state, as a pure
/// value: idle hosts are forgotten, past the capacity the least recently used evictable host
/// goes, and a host something waits on is never dropped.
final class HostTableTests: XCTestCase {
    /// A host's state for the tests: idle after `idleAt`, evictable unless `busy`.
    private struct Probe: HostState {
        var idleAt: ContinuousClock.Instant
        var busy = false
        func isIdle(at now: ContinuousClock.Instant) -> Bool { !busy && now >= idleAt }
        func mayBeEvicted(at now: ContinuousClock.Instant) -> Bool { !busy }
    }

    private let t0 = ContinuousClock.now
    private let never = ContinuousClock.now + .seconds(1_000_000)

    private func use(_ table: inout HostTable<Probe>, _ host: String, at now: ContinuousClock.Instant, busy: Bool = false) {
        table.update(host, now: now, make: { Probe(idleAt: never) }) { probe in
            probe.busy = busy
            return (true, ())
        }
    }

    func testPastItsCapacityTheLeastRecentlyUsedHostsGoFirst() {
        var table = HostTable<Probe>(capacity: 8)
        for n in 0..<8 { use(&table, "h\(n)", at: t0) }
        use(&table, "h0", at: t0)  // h0 is now the most recently used
        use(&table, "h8", at: t0)  // past 8: h1 and h2 go (a quarter of the room is freed)
        XCTAssertEqual(table.count, 7)
        for gone in ["h1", "h2"] { XCTAssertNil(table[gone], gone) }
        for kept in ["h0", "h3", "h4", "h5", "h6", "h7", "h8"] { XCTAssertNotNil(table[kept], kept) }
    }

    func testIdleHostsAreForgottenBeforeAnyOtherIsEvicted() {
        var table = HostTable<Probe>(capacity: 8)
        for quiet in ["quiet0", "quiet1"] {
            table.update(quiet, now: t0, make: { Probe(idleAt: t0 + .seconds(1)) }) { _ in (true, ()) }
        }
        for n in 0..<6 { use(&table, "h\(n)", at: t0) }
        use(&table, "h6", at: t0 + .seconds(2))
        XCTAssertNil(table["quiet0"], "an idle host stays")
        XCTAssertNil(table["quiet1"], "an idle host stays")
        for n in 0...6 { XCTAssertNotNil(table["h\(n)"], "h\(n) was evicted while idle hosts could go") }
    }

    func testAHostSomethingWaitsOnIsNeverEvictedAndTheTableWaitsBeforeTrimmingAgain() {
        var table = HostTable<Probe>(capacity: 4)
        for n in 0..<4 { use(&table, "busy\(n)", at: t0, busy: true) }
        for n in 0..<3 { use(&table, "h\(n)", at: t0) }
        for n in 0..<4 { XCTAssertNotNil(table["busy\(n)"], "a host with waiting requests was dropped") }
        XCTAssertLessThanOrEqual(table.count, 7)
    }

    func testAQuietTableSweepsItsIdleHostsEveryCapacityUses() {
        var table = HostTable<Probe>(capacity: 16)
        for n in 0..<10 {
            table.update("h\(n)", now: t0, make: { Probe(idleAt: t0 + .seconds(1)) }) { _ in (true, ()) }
        }
        XCTAssertEqual(table.count, 10)
        // Uses of one host, after the others went idle: the 16th use sweeps them.
        for _ in 0..<6 { use(&table, "busy", at: t0 + .seconds(2), busy: true) }
        XCTAssertEqual(table.count, 1, "idle hosts were kept")
    }

    func testAnEntryNotWorthKeepingIsDropped() {
        var table = HostTable<Probe>(capacity: 4)
        use(&table, "h", at: t0)
        table.update("h", now: t0, make: { Probe(idleAt: never) }) { _ in (false, ()) }
        XCTAssertNil(table["h"])
    }
}
