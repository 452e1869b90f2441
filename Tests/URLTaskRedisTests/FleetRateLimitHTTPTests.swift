import Foundation
import TestSupport
import LoopbackServer
import URLTaskManager
import URLTaskResilience
import XCTest
@testable import URLTaskRedis
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// ``FleetRateLimiter`` over real HTTP on 127.0.0.1: several managers in one test process, each
/// with its own `RedisClient` and limiter, as separate processes would have.
final class FleetRateLimitHTTPTests: XCTestCase {
    /// One member of the fleet: its own Redis connection, limiter and manager.
    struct Member {
        let redis: RedisClient
        let limiter: FleetRateLimiter
        let manager: URLTaskManager
        let events: FleetEvents<FleetRateLimiter.Event>

        init(_ server: RedisServerProcess, policy: FleetRateLimiter.Policy) {
            redis = RedisClient(configuration: server.fleetConfiguration)
            limiter = FleetRateLimiter(redis: redis, policy: policy)
            events = FleetEvents(limiter.events())
            manager = URLTaskManager(interceptors: [limiter])
        }
    }

    /// 4 managers × 50 concurrent requests to one host, a fleet limit of 50 a second in bursts of
    /// 10: every request succeeds and no one-second window at the server holds more than 60.
    func testFourManagersShareOneLimit() async throws {
        let redisServer = try RedisServerProcess()
        // Stopped here, not in its deinit (where its exit handler no longer sees it: a 10 s wait).
        defer { redisServer.stop() }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/r") { _ in .text("ok") }
        let policy = FleetRateLimiter.Policy(rate: 50, burst: 10, processCount: 4, keyPrefix: "fleet-4x50")
        let members = (0..<4).map { _ in Member(redisServer, policy: policy) }
        defer { for member in members { member.redis.close() } }
        let started = ContinuousClock.now
        let results = await withTaskGroup(of: Fetched.self) { group in
            for (index, member) in members.enumerated() {
                for request in 0..<50 {
                    var urlRequest = URLRequest(url: server.url("/r?m=\(index)&i=\(request)"))
                    urlRequest.timeoutInterval = 30
                    group.addTask { await fetched(member.manager.session, urlRequest) }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        let elapsed = started.duration(to: .now)
        XCTAssertEqual(results.filter { $0.status == 200 }.count, 200, "errors: \(results.compactMap(\.error).prefix(3))")
        let arrivals = server.requests(path: "/r").map(\.arrivedAt)
        XCTAssertEqual(arrivals.count, 200)
        let busiest = fleetBusiestWindow(arrivals)
        printFigures("fleet 4 × 50 at 50/s burst 10: busiest one-second window \(busiest), all done in \(elapsed)")
        // The limiter releases at most 60 in a second; the server sees that plus the jitter.
        XCTAssertLessThanOrEqual(busiest, 60 + fleetArrivalAllowance(rate: 50))
        // 200 turns at 50 a second after a burst of 10: at least 3.8 s.
        XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(3_700))
        for member in members { XCTAssertTrue(member.limiter.isShared, "Redis answered throughout") }
        // Round trips: one script run per request that goes at once; while the bucket is empty,
        // the head of each process's line asks once per turn (the process whose ask lands first
        // takes it, the others are told to wait one more interval), so about one run per process
        // per turn: the price of asking again rather than reserving a turn ahead, which a pause
        // set meanwhile could not take back.
        let info = try await members[0].redis.send(["INFO", "commandstats"])
        guard case .bulkString(let data?) = info else { return XCTFail("INFO: \(info)") }
        let stats = String(decoding: data, as: UTF8.self)
        let calls = stats.split(whereSeparator: \.isNewline).first { $0.hasPrefix("cmdstat_evalsha:") }
            .flatMap { $0.split(separator: "=").dropFirst().first?.split(separator: ",").first }
            .flatMap { Int($0) }
        let scriptRuns = try XCTUnwrap(calls, stats)
        printFigures("fleet 4 × 50: \(scriptRuns) script runs for 200 requests (\(Double(scriptRuns) / 200) a request)")
        XCTAssertGreaterThanOrEqual(scriptRuns, 200)
        XCTAssertLessThanOrEqual(scriptRuns, 200 * (members.count + 2), "the line keeps a process's waiting requests from asking together")
    }

    /// A `429` with `Retry-After: 1` seen by one manager pauses another manager's requests to
    /// that host (through Redis).
    func testARetryAfterSeenByOneManagerPausesTheOthers() async throws {
        let redisServer = try RedisServerProcess()
        // Stopped here, not in its deinit (where its exit handler no longer sees it: a 10 s wait).
        defer { redisServer.stop() }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let first = FleetFlag()
        server.route("/p") { _ in
            first.takeFirst() ? ServerResponse(status: 429, headers: ["Retry-After": "1"]) : .text("ok")
        }
        let policy = FleetRateLimiter.Policy(rate: 100, burst: 10, processCount: 2, keyPrefix: "fleet-pause")
        let seer = Member(redisServer, policy: policy)
        let other = Member(redisServer, policy: policy)
        defer {
            seer.redis.close()
            other.redis.close()
        }
        let refused = await fetched(seer.manager.session, URLRequest(url: server.url("/p")))
        XCTAssertEqual(refused.status, 429, "the limiter only observes: the caller gets the 429")
        let answeredAt = ContinuousClock.now
        try await seer.events.wait("the pause shared") { event in
            if case .paused(_, .seconds(1), 429, shared: true) = event { return true } else { return false }
        }
        let resumed = await fetched(other.manager.session, URLRequest(url: server.url("/p")))
        XCTAssertEqual(resumed.text, "ok")
        let arrival = try XCTUnwrap(server.requests(path: "/p").last?.arrivedAt)
        XCTAssertGreaterThan(answeredAt.duration(to: arrival), .milliseconds(850), "the other manager waited out the pause")
        XCTAssertEqual(
            other.events.count { event in
                if case .delayed(_, _, _, paused: true) = event { return true } else { return false }
            }, 1, "and said why")
    }

    /// A wait counts toward the request's `timeoutInterval` (`URLError.timedOut` at its timeout,
    /// not at its turn), and a caller that cancels while waiting leaves at once.
    func testAWaitTimesOutAtTimeoutIntervalAndCancellationIsImmediate() async throws {
        let redisServer = try RedisServerProcess()
        // Stopped here, not in its deinit (where its exit handler no longer sees it: a 10 s wait).
        defer { redisServer.stop() }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let first = FleetFlag()
        server.route("/w") { _ in
            first.takeFirst() ? ServerResponse(status: 503, headers: ["Retry-After": "30"]) : .text("ok")
        }
        let policy = FleetRateLimiter.Policy(rate: 100, burst: 10, processCount: 2, keyPrefix: "fleet-timeout")
        let seer = Member(redisServer, policy: policy)
        let other = Member(redisServer, policy: policy)
        defer {
            seer.redis.close()
            other.redis.close()
        }
        let refused = await fetched(seer.manager.session, URLRequest(url: server.url("/w")))
        XCTAssertEqual(refused.status, 503)
        try await seer.events.wait("the pause shared") { event in
            if case .paused(_, .seconds(30), 503, shared: true) = event { return true } else { return false }
        }
        var impatient = URLRequest(url: server.url("/w"))
        impatient.timeoutInterval = 0.3
        let started = ContinuousClock.now
        let timedOut = await fetched(other.manager.session, impatient)
        XCTAssertEqual((timedOut.error as? URLError)?.code, .timedOut, "\(String(describing: timedOut.error))")
        XCTAssertLessThan(started.duration(to: .now), .seconds(3), "failed at its timeout, not at the pause's end")

        let cancelled = Task { await fetched(other.manager.session, URLRequest(url: server.url("/w"))) }
        try await other.events.wait("in line", count: 2) { event in
            if case .delayed(_, _, _, paused: true) = event { return true } else { return false }
        }
        let cancelledAt = ContinuousClock.now
        cancelled.cancel()
        let result = await cancelled.value
        XCTAssertEqual((result.error as? URLError)?.code, .cancelled, "\(String(describing: result.error))")
        XCTAssertLessThan(cancelledAt.duration(to: .now), .seconds(1), "cancellation while waiting is immediate")
        XCTAssertEqual(server.requests(path: "/w").count, 1, "nothing reached the paused host")
    }

    /// Redis stopped: every request still succeeds, each manager limits itself to rate / N (an
    /// event says so); Redis started again: the next request after the back-off finds it, and
    /// the shared bucket is back.
    func testRedisStoppedFallsBackAtTheShareAndRejoinsWhenItReturns() async throws {
        let redisServer = try RedisServerProcess()
        // Stopped here, not in its deinit (where its exit handler no longer sees it: a 10 s wait).
        defer { redisServer.stop() }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/f") { _ in .text("ok") }
        let policy = FleetRateLimiter.Policy(
            rate: 20, burst: 2, processCount: 2, keyPrefix: "fleet-fallback", probeDelay: .milliseconds(100),
            maximumProbeDelay: .milliseconds(200))
        let members = (0..<2).map { _ in Member(redisServer, policy: policy) }
        defer { for member in members { member.redis.close() } }
        func burst(_ phase: String, _ count: Int) async -> [Fetched] {
            await withTaskGroup(of: Fetched.self) { group in
                for (index, member) in members.enumerated() {
                    for request in 0..<count {
                        var urlRequest = URLRequest(url: server.url("/f?phase=\(phase)&m=\(index)&i=\(request)"))
                        urlRequest.timeoutInterval = 30
                        group.addTask { await fetched(member.manager.session, urlRequest) }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
        }
        let shared = await burst("shared", 2)
        XCTAssertEqual(shared.filter { $0.status == 200 }.count, 4)

        redisServer.stop()
        let local = await burst("local", 20)
        XCTAssertEqual(
            local.filter { $0.status == 200 }.count, 40, "no request fails because Redis is away: \(local.compactMap(\.error).prefix(3))")
        for member in members {
            try await member.events.wait("the fall back") { event in
                if case .fellBack(_, 10, _) = event { return true } else { return false }
            }
            XCTAssertFalse(member.limiter.isShared)
            XCTAssertEqual(member.limiter.fallback.policy.rate, 10)
        }
        let localArrivals = server.requests(path: "/f").filter { $0.query?.contains("phase=local") == true }.map(\.arrivedAt)
        let busiestLocal = fleetBusiestWindow(localArrivals)
        printFigures("fallback, 2 × 20 at 20/s over 2 processes: busiest one-second window \(busiestLocal)")
        // Each at 10 a second, bursts of 1: at most 11 each in a second, plus the jitter.
        XCTAssertLessThanOrEqual(busiestLocal, 22 + fleetArrivalAllowance(rate: 20))

        try redisServer.start()
        // One request after another until one finds Redis again (the probe after the back-off).
        var sent = 0
        while !members[0].limiter.isShared, sent < 100 {
            let result = await fetched(members[0].manager.session, URLRequest(url: server.url("/f?phase=rejoin")))
            XCTAssertEqual(result.status, 200)
            sent += 1
        }
        XCTAssertTrue(members[0].limiter.isShared, "back to Redis after \(sent) requests")
        try await members[0].events.wait("rejoined") { event in
            if case .rejoined = event { return true } else { return false }
        }
        printFigures("rejoined Redis after \(sent) requests")
    }

    /// Redis killed (`SIGKILL`) while requests wait for their turns: none fails because of it;
    /// those in flight fall back to the local bucket.
    func testRedisKilledMidBurstFailsNoRequest() async throws {
        let redisServer = try RedisServerProcess()
        defer { redisServer.stop() }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/k") { _ in .text("ok") }
        let policy = FleetRateLimiter.Policy(rate: 20, burst: 2, processCount: 2, keyPrefix: "fleet-kill")
        let members = (0..<2).map { _ in Member(redisServer, policy: policy) }
        defer { for member in members { member.redis.close() } }
        let all = Task {
            await withTaskGroup(of: Fetched.self) { group in
                for (index, member) in members.enumerated() {
                    for request in 0..<20 {
                        var urlRequest = URLRequest(url: server.url("/k?m=\(index)&i=\(request)"))
                        urlRequest.timeoutInterval = 30
                        group.addTask { await fetched(member.manager.session, urlRequest) }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
        }
        _ = try await server.waitForRequests(path: "/k", count: 6)
        redisServer.killNow()
        let results = await all.value
        XCTAssertEqual(results.filter { $0.status == 200 }.count, 40, "\(results.compactMap(\.error).prefix(3))")
        for member in members {
            try await member.events.wait("the fall back") { event in
                if case .fellBack = event { return true } else { return false }
            }
        }
    }

    /// Redis never reachable (nothing listens on its port): requests go at the local share
    /// (`rate / processCount`), an event says so, and no event or error shows the password.
    func testUnreachableRedisFallsBackFromTheStartWithoutShowingTheSecret() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/u") { _ in .text("ok") }
        let password = "fleet-secret-password-7f3a"
        let redis = RedisClient(
            configuration: .init(
                endpoint: .tcp(host: "127.0.0.1", port: try TestSockets.freePort()), username: "fleet", password: password,
                connectTimeout: .milliseconds(300), replyTimeout: .milliseconds(300)))
        defer { redis.close() }
        let limiter = FleetRateLimiter(
            redis: redis, policy: .init(rate: 10, burst: 2, processCount: 2, keyPrefix: "fleet-unreachable", probeDelay: .seconds(60)))
        let events = FleetEvents(limiter.events())
        let manager = URLTaskManager(interceptors: [limiter])
        for _ in 0..<3 {
            let result = await fetched(manager.session, URLRequest(url: server.url("/u")))
            XCTAssertEqual(result.status, 200, "\(String(describing: result.error))")
        }
        try await events.wait("the fall back") { event in
            if case .fellBack(_, 5, .seconds(60)) = event { return true } else { return false }
        }
        XCTAssertFalse(limiter.isShared)
        // 5 a second, bursts of 1: 200 ms between sends; between arrivals, less the jitter of
        // the earlier one's arrival (160 ms was seen under load).
        let arrivals = server.requests(path: "/u").map(\.arrivedAt)
        for (earlier, later) in zip(arrivals, arrivals.dropFirst()) {
            XCTAssertGreaterThan(earlier.duration(to: later), .milliseconds(200) - fleetArrivalJitter)
        }
        // Not shared, the limit would let the three through at once.
        XCTAssertGreaterThan(arrivals.first.map { $0.duration(to: arrivals.last ?? $0) } ?? .zero, .milliseconds(390) - fleetArrivalJitter)
        let told = events.all.map { String(describing: $0) }.joined(separator: "\n")
        XCTAssertFalse(told.contains(password), told)
        XCTAssertTrue(told.contains("fellBack"), told)
    }

    /// While Redis is away, at most ``FleetRateLimiter/Policy/maximumFallbackQueueLength``
    /// requests wait for a host; the others fail at once with `rateLimitQueueFull`, as with
    /// `RateLimiter` (the waiting ones wait in the fleet limiter's line, not in the fallback's).
    func testTheFallbackQueueBoundRefusesPastIt() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/b") { _ in .text("ok") }
        let redis = RedisClient(
            configuration: .init(
                endpoint: .tcp(host: "127.0.0.1", port: try TestSockets.freePort()), connectTimeout: .milliseconds(300),
                replyTimeout: .milliseconds(300)))
        defer { redis.close() }
        let limiter = FleetRateLimiter(
            redis: redis,
            policy: .init(
                rate: 10, burst: 1, processCount: 1, keyPrefix: "fleet-bound", probeDelay: .seconds(60), maximumFallbackQueueLength: 2))
        let manager = URLTaskManager(interceptors: [limiter])
        let first = await fetched(manager.session, URLRequest(url: server.url("/b?first")))
        XCTAssertEqual(first.status, 200, "\(String(describing: first.error))")
        XCTAssertFalse(limiter.isShared)
        // Six at once, just after the bucket's one token went: two wait, four are refused.
        let results = await withTaskGroup(of: Fetched.self) { group in
            for index in 0..<6 {
                group.addTask { await fetched(manager.session, URLRequest(url: server.url("/b?i=\(index)"))) }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        let refused = results.filter { ($0.error as? URLTaskError)?.code == .rateLimitQueueFull }
        let answered = results.filter { $0.status == 200 }
        printFigures("fallback bound 2: \(answered.count) answered, \(refused.count) refused of 6")
        XCTAssertEqual(refused.count + answered.count, 6, "\(results.compactMap(\.error))")
        XCTAssertGreaterThanOrEqual(refused.count, 3, "at most 2 wait (and one may have found a token)")
        XCTAssertLessThanOrEqual(answered.count, 3)
        let error = try XCTUnwrap(refused.first?.error as? URLTaskError)
        XCTAssertTrue(error.underlying is RateLimitQueueFullError, "\(error)")
    }

    /// An infinite rate limits nothing and asks Redis nothing; a rate that is not positive lets
    /// no request through, which then fails at its `timeoutInterval`, as with `RateLimiter`.
    func testAnInfiniteRateAsksNothingAndAZeroRateWaitsForTheTimeout() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/z") { _ in .text("ok") }
        let redis = RedisClient(configuration: .init(endpoint: .tcp(host: "127.0.0.1", port: try TestSockets.freePort())))
        defer { redis.close() }
        let unlimited = FleetRateLimiter(redis: redis, policy: .init(rate: .infinity, processCount: 2))
        let unlimitedEvents = FleetEvents(unlimited.events())
        let free = URLTaskManager(interceptors: [unlimited])
        for _ in 0..<3 {
            let result = await fetched(free.session, URLRequest(url: server.url("/z")))
            XCTAssertEqual(result.status, 200)
        }
        XCTAssertTrue(unlimited.isShared, "Redis (absent here) was never asked, so never missed")
        XCTAssertEqual(unlimitedEvents.all.count, 0)

        let closed = URLTaskManager(interceptors: [FleetRateLimiter(redis: redis, policy: .init(rate: 0, processCount: 2))])
        var request = URLRequest(url: server.url("/z"))
        request.timeoutInterval = 0.3
        let started = ContinuousClock.now
        let result = await fetched(closed.session, request)
        XCTAssertEqual((result.error as? URLError)?.code, .timedOut, "\(String(describing: result.error))")
        XCTAssertLessThan(started.duration(to: .now), .seconds(3))
        XCTAssertEqual(server.requests(path: "/z").count, 3)
    }
}

/// True once, then false.
final class FleetFlag: @unchecked Sendable {  // `taken` is guarded by `lock`.
    private let lock = NSLock()
    private var taken = false

    func takeFirst() -> Bool {
        lock.withLock {
            defer { taken = true }
            return !taken
        }
    }
}
