import Foundation
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2
import XCTest
@testable import URLTaskRedis
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A fleet of processes this package builds: this test binary run again as children
/// (``FleetChildProcess``, ``FleetWorker``), each with its own `RedisClient`, ``FleetCredential``
/// and manager, against one `redis-server` and one ``OAuthServer`` (rotating refresh tokens)
/// that live in the parent, which counts what reached them.
///
/// Sizes: the issue's (the lease-holder test uses 4 processes besides the holder, and a 2 s
/// lease). On the 2-core machine these were written on, shared with other builds, the four take
/// about 25 s together, 16 of them the rate limit's 800 requests at 50 a second; every wait has
/// a deadline, and a child that misses one is killed and its output's tail is in the failure.
final class FleetProcessTests: XCTestCase {
    static let processes = 8

    /// A child's whole life, when this binary was started as one (``FleetWorker``); nothing in
    /// an ordinary run.
    func testWorker() async throws {
        let environment = ProcessInfo.processInfo.environment
        guard let mode = environment[FleetWorker.modeVariable] else { return }
        try await FleetWorker.run(mode: mode, environment: environment)
    }

    /// 8 processes × 50 concurrent requests, across 3 server-side expiries of the access token,
    /// refresh tokens rotating: exactly 3 token requests, 0 `invalid_grant`, 0 failed requests;
    /// and while the token is fresh, no Redis command at all.
    func testEightProcessesRefreshOncePerExpiry() async throws {
        let redisServer = try RedisServerProcess()
        // Stopped here: its deinit's stop waits out both deadlines (10 s), its exit handler
        // holding it weakly.
        defer { redisServer.stop() }
        let oauth = try OAuthServer(name: "fleet", access: "fleet-start", refresh: "refresh-0")
        defer { oauth.shutdown() }
        let prefix = "urltask:cred:{a}"
        try await Self.signIn(
            redisServer, prefix: prefix, OAuth2Credential(accessToken: "fleet-start", refreshToken: "refresh-0", expiresAt: .distantFuture))
        let started = ContinuousClock.now
        let children = try await Self.spawn(
            Self.processes,
            environment: FleetWorker.environment(redisPort: redisServer.port, api: oauth.baseURL, tokenURL: oauth.tokenURL, prefix: prefix))
        defer { for child in children { child.kill() } }

        // A warm-up round: each process loads the credential from Redis once.
        var ok = try await Self.round(children, requests: 10).ok
        XCTAssertEqual(oauth.tokenRequestCount, 0)
        for expiry in 1...3 {
            oauth.revokeAccess()  // the server expires the token; the processes learn it from 401s
            let round = try await Self.round(children, requests: 50)
            XCTAssertEqual(round.failed, 0, "after expiry \(expiry): \(round.lines)")
            ok += round.ok
            XCTAssertEqual(oauth.tokenRequestCount, expiry, "one token request per expiry for the whole fleet")
        }
        // The token is fresh: 400 requests, and Redis hears nothing (the INFO that asks counts one).
        let observer = RedisClient(configuration: redisServer.configuration())
        defer { observer.close() }
        let before = try await Self.commandsProcessed(observer)
        let fresh = try await Self.round(children, requests: 50)
        let commands = try await Self.commandsProcessed(observer) - before - 1
        ok += fresh.ok
        var totals: [String: Int] = [:]
        for child in children { totals.merge(try await child.finish(within: 30)) { $0 + $1 } }
        let elapsed = started.duration(to: .now)

        let invalidGrants = Self.invalidGrants(oauth)
        printFigures(
            "FLEET-FIGURES 8 processes × (10 + 3 × 50 + 50): ok=\(ok) failed=\(totals["failed", default: 0]) token_requests=\(oauth.tokenRequestCount) "
                + "invalid_grant=\(invalidGrants) refreshed=\(totals["refreshed", default: 0]) adopted=\(totals["adopted", default: 0]) "
                + "redis_commands_while_fresh=\(commands)/\(fresh.ok) in \(elapsed)")
        XCTAssertEqual(ok, Self.processes * (10 + 4 * 50))
        XCTAssertEqual(totals["failed"], 0)
        XCTAssertEqual(oauth.tokenRequestCount, 3, "exactly one refresh per expiry")
        XCTAssertEqual(invalidGrants, 0)
        XCTAssertEqual(totals["invalid_grant"], 0)
        XCTAssertEqual(totals["refreshed"], 3, "3 refreshes, each by one process")
        XCTAssertEqual(commands, 0, "no Redis round trip while the token is fresh")
    }

    /// The lease holder is killed (SIGKILL) once it holds the lease, before its token request
    /// is sent: another process takes over once the lease expired (2 s here), and refreshes
    /// once; 0 `invalid_grant`. 4 processes besides the holder, 20 requests each (the issue
    /// asks for "another process": 4 show that only one of them refreshes).
    func testALeaseHolderKilledIsReplacedOnceItsLeaseExpires() async throws {
        let redisServer = try RedisServerProcess()
        defer { redisServer.stop() }
        let oauth = try OAuthServer(name: "fleet", access: nil, refresh: "refresh-0")  // the stored token is expired
        defer { oauth.shutdown() }
        let prefix = "urltask:cred:{b}"
        let lease = Duration.seconds(2)
        try await Self.signIn(
            redisServer, prefix: prefix, OAuth2Credential(accessToken: "expired", refreshToken: "refresh-0", expiresAt: .distantFuture))
        let environment = FleetWorker.environment(
            redisPort: redisServer.port, api: oauth.baseURL, tokenURL: oauth.tokenURL, prefix: prefix, lease: lease)
        let others = try await Self.spawn(4, environment: environment)
        defer { for child in others { child.kill() } }
        let holder = try await Self.spawn(1, mode: "holder", environment: environment, name: "holder")[0]
        defer { holder.kill() }

        holder.send("GO 1")
        _ = try await holder.line("FLEET-LEASE-TAKEN", within: 30)
        let leaseSeen = ContinuousClock.now
        holder.kill()
        XCTAssertEqual(oauth.tokenRequestCount, 0, "the holder died before its token request")

        let round = try await Self.round(others, requests: 20)
        var totals: [String: Int] = [:]
        for child in others { totals.merge(try await child.finish(within: 30)) { $0 + $1 } }
        let tokenRequest = try XCTUnwrap(oauth.tokenRequests.first, "someone refreshed")
        let after = leaseSeen.duration(to: tokenRequest.arrivedAt)
        printFigures(
            "FLEET-FIGURES lease holder killed: ok=\(round.ok) failed=\(round.failed) token_requests=\(oauth.tokenRequestCount) "
                + "invalid_grant=\(Self.invalidGrants(oauth)) lease_expired=\(totals["lease_expired", default: 0]) "
                + "token request \(after) after the lease was seen taken (lease \(lease))")
        XCTAssertEqual(round.ok, 80, "\(round.lines)")
        XCTAssertEqual(oauth.tokenRequestCount, 1, "one process took over, once")
        XCTAssertEqual(Self.invalidGrants(oauth), 0)
        XCTAssertEqual(totals["refreshed"], 1)
        // The lease was taken before the holder said so: its expiry is at most `lease` after that
        // line, and the pipe's latency is far below the margin.
        XCTAssertGreaterThan(after, lease - .milliseconds(500), "the takeover waited for the lease to expire")
    }

    /// Redis stopped for 2 s mid-run and started again on the same port, with its data (an
    /// append-only file, as a production Redis keeps it), and a fleet rate limit in every
    /// process as well: no request fails because of it, at most one extra refresh per process,
    /// 0 `invalid_grant`. The rounds: the stored token expired (one refresh, through Redis);
    /// Redis stopped; 50 requests each while it is away (the token fresh: Redis not needed);
    /// the token expired again and one process's 50 requests (it refreshes alone); Redis back
    /// after 2 s, and that process writes its credential back; 50 requests each (the others
    /// take the written-back credential from Redis, without a token request).
    func testRedisStoppedForTwoSecondsFailsNoRequest() async throws {
        try await redisOutage(keepingData: true, refreshAlone: true, prefix: "urltask:cred:{c}")
    }

    /// Redis stopped for 2 s and back with its data, then the token expires: the processes'
    /// subscriptions reconnect on their own, and one whose lease holder's announcement fell in
    /// that gap reads the record rather than wait out the lease (it waited 30 s, past the
    /// refresh reactor's limit, before that was fixed).
    func testRedisStoppedThenAnExpiryFailsNoRequest() async throws {
        try await redisOutage(keepingData: true, refreshAlone: false, prefix: "urltask:cred:{g}")
    }

    /// The same with a Redis that comes back empty (no persistence): the credential refreshed
    /// alone is written back to it, and the others take it from there.
    func testRedisRestartedEmptyGetsTheCredentialWrittenBack() async throws {
        try await redisOutage(keepingData: false, refreshAlone: true, prefix: "urltask:cred:{e}")
    }

    /// A Redis that comes back empty, and the next expiry after it (no process owes Redis a
    /// write). The fence counter starts again at 1 in the empty Redis while every process has
    /// seen a higher fence: the lease script keeps the holder's fence above the newest it saw, so
    /// its fresh credential is not overwritten by another process's restore of the older one.
    /// Before that floor, 4 of 6 runs cost 3 token requests for 2 expiries and 1 `invalid_grant`;
    /// after it, 6 of 6 ran clean.
    func testRedisRestartedEmptyThenAnExpiryFailsNoRequest() async throws {
        try await redisOutage(keepingData: false, refreshAlone: false, prefix: "urltask:cred:{f}")
    }

    /// Rounds of every process's 50 requests: the stored token expired (one refresh, through
    /// Redis); Redis stopped; a round while it is away (the token fresh: Redis not needed); with
    /// `refreshAlone`, the token expired and one process's round (it refreshes alone); Redis
    /// back 2 s after it stopped (and, with `refreshAlone`, that process's credential written
    /// back); without `refreshAlone` the token expired again; a last round.
    private func redisOutage(keepingData: Bool, refreshAlone: Bool, prefix: String) async throws {
        let redisServer = try RedisServerProcess(extraArguments: keepingData ? ["--appendonly", "yes", "--appendfsync", "always"] : [])
        defer { redisServer.stop() }
        let oauth = try OAuthServer(name: "fleet", access: nil, refresh: "refresh-0")
        defer { oauth.shutdown() }
        try await Self.signIn(
            redisServer, prefix: prefix, OAuth2Credential(accessToken: "expired", refreshToken: "refresh-0", expiresAt: .distantFuture))
        let children = try await Self.spawn(
            Self.processes,
            environment: FleetWorker.environment(
                redisPort: redisServer.port, api: oauth.baseURL, tokenURL: oauth.tokenURL, prefix: prefix,
                // The lone refresh happens during the outage: a short wait for Redis.
                rate: (10_000, 1_000, Self.processes), outageWait: refreshAlone ? .milliseconds(300) : nil))
        defer { for child in children { child.kill() } }

        let first = try await Self.round(children, requests: 50)  // the stored token is expired: one refresh
        XCTAssertEqual(oauth.tokenRequestCount, 1)
        redisServer.stop()
        let stoppedAt = ContinuousClock.now
        let during = try await Self.round(children, requests: 50)
        var alone = (ok: 0, failed: 0, lines: [String]())
        if refreshAlone {
            oauth.revokeAccess()
            alone = try await Self.round([children[0]], requests: 50)
        }
        // The outage lasts 2 s by the script, whatever the rounds took.
        try await Task.sleep(until: stoppedAt + .seconds(2))
        try redisServer.start()
        if refreshAlone {
            children[0].send("WAIT-WROTE-BACK")
            let wroteBack = FleetWorker.figures(try await children[0].line("FLEET-WROTE-BACK", within: 30))
            XCTAssertEqual(wroteBack["ok"], 1, "the credential refreshed alone was written back")
        } else {
            oauth.revokeAccess()
        }
        let after = try await Self.round(children, requests: 50)
        var totals: [String: Int] = [:]
        for child in children { totals.merge(try await child.finish(within: 30)) { $0 + $1 } }
        let extra = oauth.tokenRequestCount - 2
        let (ok, failed) = (first.ok + during.ok + alone.ok + after.ok, first.failed + during.failed + alone.failed + after.failed)
        printFigures(
            "FLEET-FIGURES Redis stopped 2 s (\(keepingData ? "data kept" : "data lost"), \(refreshAlone ? "a refresh alone" : "an expiry after")): ok=\(ok) "
                + "failed=\(failed) token_requests=\(oauth.tokenRequestCount) (2 expiries, \(extra) extra) "
                + "invalid_grant=\(Self.invalidGrants(oauth)) unreachable=\(totals["unreachable", default: 0]) "
                + "refreshed_alone=\(totals["refreshed_alone", default: 0]) wrote_back=\(totals["wrote_back", default: 0])")
        XCTAssertEqual(failed, 0, "\(first.lines) \(during.lines) \(alone.lines) \(after.lines)")
        XCTAssertEqual(ok, Self.processes * 150 + alone.ok)
        XCTAssertLessThanOrEqual(extra, Self.processes, "at most one extra refresh per process")
        XCTAssertEqual(Self.invalidGrants(oauth), 0)
    }

    /// 8 processes × 100 requests to one host, a fleet limit of 50 a second in bursts of 10
    /// (``FleetRateLimiter``): every request succeeds, and no one-second window of arrivals at
    /// the server holds more than 60. 800 requests at 50 a second: about 16 s.
    func testEightProcessesShareOneRateLimit() async throws {
        let redisServer = try RedisServerProcess()
        defer { redisServer.stop() }
        let oauth = try OAuthServer(name: "fleet", access: "fleet-start", refresh: "refresh-0")
        defer { oauth.shutdown() }
        let prefix = "urltask:cred:{d}"
        try await Self.signIn(
            redisServer, prefix: prefix, OAuth2Credential(accessToken: "fleet-start", refreshToken: "refresh-0", expiresAt: .distantFuture))
        let children = try await Self.spawn(
            Self.processes,
            environment: FleetWorker.environment(
                redisPort: redisServer.port, api: oauth.baseURL, tokenURL: oauth.tokenURL, prefix: prefix, rate: (50, 10, Self.processes)))
        defer { for child in children { child.kill() } }

        // Connections opened first (requests the limit exempts), so that the first burst is not
        // slowed by connection set-up while the requests after it are not: that would bunch
        // arrivals at the server that the limiter released apart.
        _ = try await Self.round(children, requests: 10, command: "WARM")
        let started = ContinuousClock.now
        let round = try await Self.round(children, requests: 100, within: 90)
        let elapsed = started.duration(to: .now)
        for child in children { _ = try await child.finish(within: 30) }
        let arrivals = oauth.apiRequests.filter { $0.path.hasPrefix("/api/items/") }.map(\.arrivedAt)
        let busiest = fleetBusiestWindow(arrivals)
        let sorted = arrivals.sorted()
        let worst = sorted.indices.first { start in sorted[start...].prefix { $0 < sorted[start] + .seconds(1) }.count == busiest }
        let worstAt = worst.map { sorted[0].duration(to: sorted[$0]) } ?? .zero
        printFigures(
            "FLEET-FIGURES 8 × 100 at 50/s burst 10: ok=\(round.ok) failed=\(round.failed) busiest_second=\(busiest) "
                + "(starting \(worstAt) after the first arrival) in \(elapsed)")
        XCTAssertEqual(round.ok, Self.processes * 100, "\(round.lines)")
        XCTAssertEqual(arrivals.count, Self.processes * 100)
        // The limiter releases at most 60 in any second of Redis's clock (a burst of 10, then one
        // every 20 ms); what the server sees adds the jitter between a release and its arrival,
        // 8 processes on 2 busy cores (a request released a few ms early arriving late enough to
        // share a window). The allowance is that jitter, not the limiter's.
        XCTAssertLessThanOrEqual(busiest, 60 + fleetArrivalAllowance(rate: 50))
        // 800 turns at 50 a second after a burst of 10: at least 15.8 s.
        XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(15_500))
    }

    /// A token expiring under load in a fleet: 2 processes × 50 concurrent GETs under a fleet
    /// limit of 20 a second in bursts of 10 (the schedule needs 4.5 s), while the server stops
    /// accepting the access token 1.5 s into the round, with most requests still in the
    /// limiters' lines. Every GET ends 200 within the schedule plus 0.3 s, with one token request
    /// for the fleet, and the turns the limiters took from Redis equal the requests the server
    /// received (the 401s' retries included). Before: each refresh sent every queued request
    /// back through the interceptors, where it took another turn at the back of the line (the
    /// second after each expiry carried 5–11 of 30 allowed requests).
    func testTwoProcessesKeepTheirFleetTurnsAcrossATokenRefresh() async throws {
        let redisServer = try RedisServerProcess()
        defer { redisServer.stop() }
        let serverStarted = ContinuousClock.now
        let oauth = try OAuthServer(name: "fleet", access: "fleet-start", refresh: "refresh-0")
        defer { oauth.shutdown() }
        let prefix = "urltask:cred:{u}"
        try await Self.signIn(
            redisServer, prefix: prefix, OAuth2Credential(accessToken: "fleet-start", refreshToken: "refresh-0", expiresAt: .distantFuture))
        let (processes, each, rate, burst) = (2, 50, 20.0, 10)
        let children = try await Self.spawn(
            processes,
            environment: FleetWorker.environment(
                redisPort: redisServer.port, api: oauth.baseURL, tokenURL: oauth.tokenURL, prefix: prefix, rate: (rate, burst, processes)))
        defer { for child in children { child.kill() } }
        _ = try await Self.round(children, requests: 5, command: "WARM")

        // The server's clock counts a token's life from its start, when it issued the first one;
        // the token the refresh brings lives on (one expiry in the round).
        oauth.expireAccessTokens(after: serverStarted.duration(to: .now) + .milliseconds(1_500))
        oauth.onTokenRequest { [weak oauth] in oauth?.expireAccessTokens(after: nil) }
        let started = ContinuousClock.now
        for child in children { child.send("GO \(each)") }
        let lines = try await Self.roundLines(children, within: 60)
        let elapsed = started.duration(to: .now)
        for child in children { _ = try await child.finish(within: 30) }
        let ok = lines.map { $0.figures["ok", default: 0] }.reduce(0, +)
        let turns = lines.map { $0.figures["turns", default: 0] - $0.figures["turns_given_back", default: 0] }.reduce(0, +)
        let sent = oauth.apiRequests.filter { $0.path.hasPrefix("/api/items/") }.count
        let schedule = Duration.seconds(Double(processes * each - burst) / rate)
        printFigures(
            "FLEET-FIGURES \(processes) × \(each) at \(rate)/s burst \(burst), the token expiring 1.5 s in: ok=\(ok) in \(elapsed) "
                + "(schedule \(schedule)); token requests \(oauth.tokenRequestCount), 401s \(oauth.unauthorizedCount); "
                + "turns taken \(turns), requests sent \(sent)")
        XCTAssertEqual(ok, processes * each, "\(lines.map(\.line))")
        XCTAssertGreaterThan(oauth.unauthorizedCount, 0, "the token expired during the round")
        XCTAssertEqual(oauth.tokenRequestCount, 1, "one token request for the fleet per expiry crossed")
        XCTAssertEqual(turns, sent, "the limiters' turns = requests sent")
        XCTAssertLessThan(elapsed, schedule + .milliseconds(300), "the fleet limit's schedule plus 0.3 s")
    }

    // MARK: The parent's side

    /// Signs the fleet in: the credential every child loads from Redis.
    static func signIn(_ redisServer: RedisServerProcess, prefix: String, _ credential: OAuth2Credential) async throws {
        let client = RedisClient(configuration: redisServer.configuration())
        defer { client.close() }
        let fleet = FleetCredential(client: client, configuration: .init(keyPrefix: prefix)) { _ in throw OAuth2Error.notSignedIn }
        defer { fleet.shutdown() }
        let auth = fleet.makeAuthenticator(origins: [URL(string: "http://127.0.0.1")!])
        try await auth.signIn(credential)
        let stored = try await client.send(["HEXISTS", prefix + ":credential", "credential"])
        guard stored.integer == 1 else { throw TestFailure("the sign-in was not written to Redis: \(stored)") }
    }

    /// Starts `count` children and waits until each is ready.
    static func spawn(
        _ count: Int, mode: String = "requests", environment: [String: String], name: String = "worker"
    ) async throws -> [FleetChildProcess] {
        let children = try (0..<count).map { try FleetChildProcess(name: "\(name)-\($0)", mode: mode, environment: environment) }
        for child in children { _ = try await child.line("FLEET-READY", within: 60) }
        return children
    }

    /// One round: each child sends `requests` concurrent requests; their figures added up.
    static func round(
        _ children: [FleetChildProcess], requests: Int, command: String = "GO", within seconds: TimeInterval = 60
    ) async throws -> (ok: Int, failed: Int, lines: [String]) {
        for child in children { child.send("\(command) \(requests)") }
        return try await roundEnded(children, within: seconds)
    }

    /// The round the children were sent, once each has answered: its figures added up, and the
    /// lines of the children that had failures.
    static func roundEnded(
        _ children: [FleetChildProcess], within seconds: TimeInterval = 60
    ) async throws -> (ok: Int, failed: Int, lines: [String]) {
        var (ok, failed, lines) = (0, 0, [String]())
        for (child, line, figures) in try await roundLines(children, within: seconds) {
            ok += figures["ok", default: 0]
            failed += figures["failed", default: 0]
            if figures["failed", default: 0] > 0 { lines.append("\(child.name): \(line)") }
        }
        return (ok, failed, lines)
    }

    /// Each child's `FLEET-ROUND` line and its figures, in the children's order.
    static func roundLines(
        _ children: [FleetChildProcess], within seconds: TimeInterval = 60
    ) async throws -> [(child: FleetChildProcess, line: String, figures: [String: Int])] {
        var lines: [(child: FleetChildProcess, line: String, figures: [String: Int])] = []
        for child in children {
            let line = try await child.line("FLEET-ROUND", within: seconds)
            lines.append((child, line, FleetWorker.figures(line)))
        }
        return lines
    }

    /// Redis's `total_commands_processed`.
    static func commandsProcessed(_ client: RedisClient) async throws -> Int {
        let info = try await client.send(["INFO", "stats"]).string ?? ""
        let line = info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("total_commands_processed:") }
        guard let value = line.flatMap({ Int($0.split(separator: ":")[1]) }) else {
            throw TestFailure("no total_commands_processed in INFO")
        }
        return value
    }

    /// Token requests the server refused: each accepted refresh rotated the token
    /// (`fleet-refresh-<n>`), so every refresh token presented beyond those was a dead one.
    static func invalidGrants(_ oauth: OAuthServer) -> Int {
        let issued = oauth.currentRefresh.flatMap { $0.split(separator: "-").last.flatMap { Int($0) } } ?? 0
        return oauth.refreshTokensReceived.count - issued
    }
}
