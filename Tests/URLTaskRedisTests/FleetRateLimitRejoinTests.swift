import Foundation
import TestSupport
import LoopbackServer
import URLTaskManager
import XCTest
@testable import URLTaskRedis
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// ``FleetRateLimiter`` while Redis goes and comes back, over real HTTP on 127.0.0.1: several
/// limiters in one test process, each with its own `RedisClient` (as separate processes would
/// have), one real `redis-server` stopped and started again (empty) on the same port, and a
/// load that never lets up (each member keeps 12 requests in flight), so that requests wait in
/// every member when Redis leaves and when it returns.
final class FleetRateLimitRejoinTests: XCTestCase {
    /// 4 members at 50/s in bursts of 10: Redis stopped for 2.5 s and back; no one-second window
    /// at the server holds more than burst + rate + the arrival jitter.
    func testFourMembersRejoinWithoutOvershoot() async throws {
        try await rejoin(members: 4, prefix: "fleet-rejoin-4")
    }

    /// The same with 8 members (a local burst of 1 each), whose local buckets do not release in
    /// lockstep.
    func testEightMembersRejoinWithoutOvershoot() async throws {
        try await rejoin(members: 8, prefix: "fleet-rejoin-8")
    }

    /// The members probe on different schedules, so some are back on the shared bucket while
    /// others are still on their own for up to a second.
    func testMembersRejoiningAtDifferentMomentsStayWithinTheLimit() async throws {
        try await rejoin(members: 4, prefix: "fleet-rejoin-staggered", staggered: true)
    }

    private func rejoin(members count: Int, prefix: String, staggered: Bool = false) async throws {
        let redisServer = try RedisServerProcess()
        // Stopped here, not in its deinit (where its exit handler no longer sees it: a 10 s wait).
        defer { redisServer.stop() }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/q") { _ in .text("ok") }
        let (rate, burst) = (50.0, 10)
        let members = (0..<count).map { index in
            // Staggered: member i probes first after (i + 1) × 150 ms (then after twice as long
            // each time), so the members find Redis back 0.65 to 1.75 s after it returned. The
            // longest back-off is the fleet's one policy: 2 s (the default's 5 s would only
            // make the test longer).
            let policy = FleetRateLimiter.Policy(
                rate: rate, burst: burst, processCount: count, keyPrefix: prefix,
                probeDelay: staggered ? .milliseconds(150 * (index + 1)) : .milliseconds(250), maximumProbeDelay: .seconds(2))
            return FleetRateLimitHTTPTests.Member(redisServer, policy: policy)
        }
        defer { for member in members { member.redis.close() } }
        let total = 450
        let tickets = FleetTickets(total)
        let load = Task {
            await withTaskGroup(of: Fetched.self) { group in
                for (index, member) in members.enumerated() {
                    for user in 0..<12 {
                        group.addTask {
                            var last = Fetched.failure(URLError(.unknown))  // nothing sent yet: not a 200
                            while let ticket = tickets.next() {
                                var request = URLRequest(url: server.url("/q?m=\(index)&u=\(user)&t=\(ticket)"))
                                request.timeoutInterval = 60
                                last = await fetched(member.manager.session, request)
                                if last.status != 200 { return last }
                            }
                            return last
                        }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
        }
        // Redis leaves once the shared bucket has had its burst and a second of its rate.
        _ = try await server.waitForRequests(path: "/q", count: 60, timeout: .seconds(20))
        redisServer.stop()
        let stoppedAt = ContinuousClock.now
        // The outage lasts 2.5 s by the scenario, whatever the requests do meanwhile.
        try await Task.sleep(until: stoppedAt + .milliseconds(2_500))
        try redisServer.start()
        let startedAt = ContinuousClock.now
        let results = await load.value
        XCTAssertEqual(results.filter { $0.status != 200 }.count, 0, "\(results.compactMap(\.error).prefix(3))")
        for member in members {
            try await member.events.wait("the fall back") { event in
                if case .fellBack = event { return true } else { return false }
            }
            try await member.events.wait("the rejoin") { event in
                if case .rejoined = event { return true } else { return false }
            }
        }

        let arrivals = server.requests(path: "/q").map(\.arrivedAt).sorted()
        XCTAssertEqual(arrivals.count, total)
        let busiest = fleetBusiestWindow(arrivals)
        let worst = arrivals.first { start in arrivals.filter { $0 >= start && $0 < start + .seconds(1) }.count == busiest }
        let worstAt = worst.map { startedAt.duration(to: $0) } ?? .zero
        let afterReturn = fleetBusiestWindow(arrivals.filter { $0 >= startedAt })
        // The local period, from the fall back (half a second in: every member noticed) to the return.
        let isLocal = { (instant: ContinuousClock.Instant) in instant >= stoppedAt + .milliseconds(500) && instant < startedAt }
        let local = arrivals.filter(isLocal)
        let recorded = server.requests(path: "/q")
        let byMember = (0..<count).map { index in
            recorded.filter { isLocal($0.arrivedAt) && $0.query?.hasPrefix("m=\(index)&") == true }.map(\.arrivedAt)
        }
        let localInterval = Duration.seconds(Double(count) / rate)
        let arc = Self.phaseArc(byMember, interval: localInterval, from: stoppedAt)
        printFigures(
            "fleet \(count) × 12 in flight at 50/s burst 10\(staggered ? ", probes staggered" : ""), Redis away 2.5 s: "
                + "busiest second \(busiest) (starting \(worstAt) after Redis returned), after the return \(afterReturn); "
                + "during the outage \(local.count) arrivals, the members' local phases within "
                + "\(Int((arc * 100).rounded())) % of the local interval")
        // The limiter releases at most burst + rate in any second, Redis or not; the server sees
        // that plus the jitter.
        XCTAssertLessThanOrEqual(busiest, burst + Int(rate) + fleetArrivalAllowance(rate: rate))
        XCTAssertLessThanOrEqual(afterReturn, burst + Int(rate) + fleetArrivalAllowance(rate: rate))
        // In lockstep every member releases within the same few ms of each local interval (they
        // fell back together): their phases lie within a few % of it. With a phase drawn at
        // random each, 8 phases lie within a quarter of it 8 × (1/4)^7 of the time (0.05 %);
        // 4 would 6 % of the time, so the 4-member runs only print it.
        if count >= 8 { XCTAssertGreaterThan(arc, 0.25, "the local buckets release in lockstep") }
        // While Redis is away the fleet still keeps to about the rate (2 s at 50/s).
        XCTAssertGreaterThanOrEqual(local.count, 60, "the local buckets kept sending")
    }

    /// The shortest arc of the local interval that holds every member's phase, as a fraction
    /// of it: a member's phase is the circular mean of its arrivals' times modulo `interval`
    /// (from `origin`), so the arrival jitter averages out. Near 0 in lockstep; about 1 - 1/N
    /// for N members spread evenly.
    static func phaseArc(_ byMember: [[ContinuousClock.Instant]], interval: Duration, from origin: ContinuousClock.Instant) -> Double {
        func seconds(_ duration: Duration) -> Double {
            let (seconds, attoseconds) = duration.components
            return Double(seconds) + Double(attoseconds) / 1e18
        }
        let period = seconds(interval)
        let angles = byMember.compactMap { times -> Double? in
            guard !times.isEmpty else { return nil }
            var (x, y) = (0.0, 0.0)
            for time in times {
                let turns = (seconds(origin.duration(to: time)) / period).truncatingRemainder(dividingBy: 1)
                x += cos(turns * 2 * .pi)
                y += sin(turns * 2 * .pi)
            }
            let angle = atan2(y, x)
            return angle < 0 ? angle + 2 * .pi : angle
        }.sorted()
        guard let first = angles.first, let last = angles.last, angles.count > 1 else { return 0 }
        var largestGap = first + 2 * .pi - last
        for (earlier, later) in zip(angles, angles.dropFirst()) { largestGap = max(largestGap, later - earlier) }
        return (2 * .pi - largestGap) / (2 * .pi)
    }
}

/// Hands out `total` numbered tickets, then `nil`: the requests a closed-loop load may send.
final class FleetTickets: @unchecked Sendable {  // `issued` is guarded by `lock`.
    private let lock = NSLock()
    private let total: Int
    private var issued = 0

    init(_ total: Int) { self.total = total }

    func next() -> Int? {
        lock.withLock {
            guard issued < total else { return nil }
            issued += 1
            return issued
        }
    }
}
