import Foundation
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2
import XCTest

@testable import URLTaskRedis

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Fleet credentials over a real `redis-server` (skipped, with how to install it, where it is
/// absent): several in-process authenticators, each with its own ``RedisClient`` and
/// ``FleetCredential`` as separate processes would have, sharing one Redis and one token
/// endpoint that rotates refresh tokens.
final class FleetCredentialRedisTests: XCTestCase {
    /// One member of the fleet: what a process would own.
    private struct Member: Sendable {
        let client: RedisClient
        let fleet: FleetCredential
        let authenticator: OAuth2Authenticator
        let manager: URLTaskManager
        let events: FleetEventLog
    }

    private func member(
        _ redis: RedisServerProcess, _ server: OAuthServer, prefix: String, lease: Duration = .seconds(5),
        outageWait: Duration = .milliseconds(500)
    ) -> Member {
        let client = RedisClient(configuration: redis.configuration(replyTimeout: .seconds(1)))
        let fleet = FleetCredential(
            client: client,
            configuration: .init(
                keyPrefix: prefix, leaseTimeToLive: lease, writeBackDelay: .milliseconds(50), maximumWriteBackDelay: .milliseconds(200),
                redisOutageWait: outageWait),
            tokenEndpoint: OAuth2TokenEndpoint(url: server.tokenURL, clientID: "fleet", timeout: .seconds(3)))
        let authenticator = fleet.makeAuthenticator(origins: [server.baseURL], refreshBackoff: .zero)
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: authenticator)], reactors: [OAuth2RefreshReactor(authenticator: authenticator)])
        return Member(client: client, fleet: fleet, authenticator: authenticator, manager: manager, events: FleetEventLog(fleet))
    }

    private func prefix() -> String { "urltask:cred:test-\(UUID().uuidString.prefix(8))" }

    /// The number of `GET` answers that were `200 ok`, over `count` concurrent requests per member.
    private static func storm(_ members: [Member], _ url: URL, count: Int) async -> (ok: Int, failures: [String]) {
        await withTaskGroup(of: String?.self) { group in
            for member in members {
                for _ in 0..<count {
                    group.addTask {
                        do {
                            let (data, response) = try await member.manager.session.data(for: URLRequest(url: url))
                            let status = (response as? HTTPURLResponse)?.statusCode ?? -1
                            let text = String(decoding: data, as: UTF8.self)
                            return status == 200 && text.hasPrefix("ok ") ? nil : "\(status) \(text)"
                        } catch {
                            return "\(error)"
                        }
                    }
                }
            }
            var ok = 0
            var failures: [String] = []
            for await failure in group {
                if let failure { failures.append(failure) } else { ok += 1 }
            }
            return (ok, failures)
        }
    }

    /// ``storm(_:_:count:)`` on a task of its own, for a test to act while it runs.
    private static func stormInBackground(_ members: [Member], _ url: URL, count: Int) -> Task<(ok: Int, failures: [String]), Never> {
        Task { await storm(members, url, count: count) }
    }

    /// Redis's count of commands processed, read on a connection of its own.
    private func commandsProcessed(_ redis: RedisServerProcess) async throws -> Int {
        let client = RedisClient(configuration: redis.configuration())
        defer { client.close() }
        guard case .bulkString(let data?) = try await client.send(["INFO", "stats"]) else { throw TestFailure("INFO answered no text") }
        let line = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline).first {
            $0.hasPrefix("total_commands_processed:")
        }
        return Int(line?.split(separator: ":").last ?? "") ?? -1
    }

    /// The credential stored under `prefix`, as a process starting now would load it.
    private func stored(_ redis: RedisServerProcess, prefix: String) async throws -> OAuth2Credential? {
        let client = RedisClient(configuration: redis.configuration())
        defer { client.close() }
        let fleet = FleetCredential(client: client, configuration: .init(keyPrefix: prefix), refresh: { $0 })
        defer { fleet.shutdown() }
        return try await fleet.store.load()
    }

    func testFourProcessesOfTwentyRequestsNeedingARefreshCostOneTokenRequest() async throws {
        let redis = try RedisServerProcess()
        // Stopped last, once every client is closed (a release right after its last use would
        // stop it under their connections).
        defer { redis.stop() }
        let server = try OAuthServer(name: "f", access: nil, refresh: "refresh-0")
        defer { server.shutdown() }
        let prefix = prefix()
        let members = (0..<4).map { _ in member(redis, server, prefix: prefix) }
        defer {
            for member in members {
                member.fleet.shutdown()
                member.client.close()
            }
        }
        // Signed in once, for the fleet: the token has expired in every process.
        let expired = OAuth2Credential(accessToken: "stale", refreshToken: "refresh-0", expiresAt: Date(timeIntervalSinceNow: -1))
        try await members[0].authenticator.signIn(expired)
        for member in members { _ = try await member.authenticator.currentCredential() }

        let result = await Self.storm(members, server.apiURL(), count: 20)

        XCTAssertEqual(result.ok, 80, "\(result.failures.prefix(5))")
        XCTAssertEqual(server.tokenRequestCount, 1, "one refresh for the fleet")
        XCTAssertEqual(server.refreshTokensReceived, ["refresh-0"], "no refresh token presented twice: no invalid_grant")
        let current = try XCTUnwrap(server.currentAccess)
        for member in members {
            let credential = try await member.authenticator.currentCredential()
            XCTAssertEqual(credential?.accessToken, current)
            XCTAssertEqual(credential?.refreshToken, server.currentRefresh)
        }
        let inRedis = try await stored(redis, prefix: prefix)
        XCTAssertEqual(inRedis?.accessToken, current)
        XCTAssertEqual(inRedis?.refreshToken, server.currentRefresh)
        // Events reach their readers a moment after they are emitted.
        for member in members { try await member.events.wait(forAnyOf: [.refreshed, .adopted], within: .seconds(2)) }
        XCTAssertEqual(members.filter { $0.events.contains(.refreshed) }.count, 1, "one process refreshed for the fleet")
        XCTAssertEqual(members.filter { $0.events.contains(.adopted) }.count, 3, "the others took its credential")

        // The server revokes the token: every process gets 401s, and still one refresh for all.
        server.revokeAccess()
        let revoked = await Self.storm(members, server.apiURL(), count: 20)
        XCTAssertEqual(revoked.ok, 80, "\(revoked.failures.prefix(5))")
        XCTAssertEqual(server.tokenRequestCount, 2, "one more refresh for the fleet")
        XCTAssertEqual(server.refreshTokensReceived, ["refresh-0", "f-refresh-1"])
        for member in members {
            let credential = try await member.authenticator.currentCredential()
            XCTAssertEqual(credential?.accessToken, server.currentAccess)
        }

        // While the token is fresh, a request costs no Redis round trip.
        let before = try await commandsProcessed(redis)
        let again = await Self.storm(members, server.apiURL(), count: 10)
        XCTAssertEqual(again.ok, 40, "\(again.failures.prefix(5))")
        let after = try await commandsProcessed(redis)
        XCTAssertLessThanOrEqual(after - before, 1, "only the INFO command itself")
    }

    func testAStaleWriterWhoseLeaseExpiredIsRefusedByTheFence() async throws {
        let redis = try RedisServerProcess()
        // Stopped last, once every client is closed (a release right after its last use would
        // stop it under their connections).
        defer { redis.stop() }
        let prefix = prefix()
        let clients = (0..<2).map { _ in RedisClient(configuration: redis.configuration(replyTimeout: .seconds(1))) }
        defer { clients.forEach { $0.close() } }
        let start = OAuth2Credential(accessToken: "access-0", refreshToken: "refresh-0", expiresAt: Date(timeIntervalSinceNow: -1))
        let fromA = OAuth2Credential(accessToken: "access-a", refreshToken: "refresh-a", expiresAt: Date(timeIntervalSinceNow: 3600))
        let fromB = OAuth2Credential(accessToken: "access-b", refreshToken: "refresh-b", expiresAt: Date(timeIntervalSinceNow: 3600))
        let started = AsyncLatch()
        let release = AsyncLatch()
        // A holds the lease, then is slow past its lease's life (a pause, a slow endpoint).
        let slow = FleetCredential(
            client: clients[0], configuration: .init(keyPrefix: prefix, leaseTimeToLive: .milliseconds(300)),
            refresh: { _ in
                await started.open()
                await release.wait()
                return fromA
            })
        let quick = FleetCredential(
            client: clients[1], configuration: .init(keyPrefix: prefix, leaseTimeToLive: .milliseconds(300)), refresh: { _ in fromB })
        defer {
            slow.shutdown()
            quick.shutdown()
        }
        let slowEvents = FleetEventLog(slow)
        let quickEvents = FleetEventLog(quick)
        try await slow.store.save(start)
        _ = try await quick.store.load()

        async let slowResult = slow.refresh(start)
        await started.wait()
        // B waits for A's announcement, which never comes within the lease: it takes over.
        let quickResult = try await quick.refresh(start)
        XCTAssertEqual(quickResult, fromB)
        await release.open()
        let late = try await slowResult

        XCTAssertEqual(late.accessToken, fromB.accessToken, "the stale writer hands out the newer credential")
        let inRedis = try await stored(redis, prefix: prefix)
        XCTAssertEqual(inRedis?.accessToken, fromB.accessToken, "the stale write did not land")
        try await slowEvents.wait(for: .staleWriteRefused, within: .seconds(2))
        try await quickEvents.wait(for: .leaseExpired, within: .seconds(2))
        try await quickEvents.wait(for: .refreshed, within: .seconds(2))
    }

    /// Any client the documented ACL allows may publish on the update channel: a bogus
    /// announcement (the largest fence, a fake refusal) only makes the waiting refreshes read the
    /// record, which decides. Before, one `PUBLISH <prefix>:updated 9223372036854775807` made every
    /// later wait end at once and count as a lost round, and the refreshes failed in 0.3 s.
    func testABogusAnnouncementCannotEndAWaitOrFailARefresh() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let server = try OAuthServer(name: "p", access: nil, refresh: "refresh-0")
        defer { server.shutdown() }
        let prefix = prefix()
        let members = (0..<3).map { _ in member(redis, server, prefix: prefix) }
        let rogue = RedisClient(configuration: redis.configuration())
        defer {
            for member in members {
                member.fleet.shutdown()
                member.client.close()
            }
            rogue.close()
        }
        let expired = OAuth2Credential(accessToken: "stale", refreshToken: "refresh-0", expiresAt: Date(timeIntervalSinceNow: -1))
        try await members[0].authenticator.signIn(expired)
        for member in members { _ = try await member.authenticator.currentCredential() }
        _ = try await rogue.send(["PUBLISH", prefix + ":updated", "9223372036854775807"])

        // The holder's token request takes 600 ms; the others wait for it, hearing lies meanwhile.
        server.delayTokenAnswers(by: .milliseconds(600))
        let storming = Self.stormInBackground(members, server.apiURL(), count: 5)
        for index in 0..<20 {
            _ = try await rogue.send(["PUBLISH", prefix + ":updated", index.isMultiple(of: 2) ? "9223372036854775807" : "refused:1"])
            try await Task.sleep(for: .milliseconds(20))  // the rogue's pace, not a synchronisation
        }
        let result = await storming.value
        XCTAssertEqual(result.ok, 15, "\(result.failures.prefix(3))")
        XCTAssertEqual(server.tokenRequestCount, 1, "one refresh for the fleet, the lies notwithstanding")
        for member in members { XCTAssertFalse(member.events.contains(.leaseExpired), "no wait ended as a lease lost") }
    }

    /// A Redis that stalls for 3 s (`CLIENT PAUSE 3000 ALL`, which answers the pausing client at
    /// once and so starts the stall at a known moment; `DEBUG SLEEP 3` stalls alike) while the
    /// holder asks the token endpoint: another
    /// process's lease script times out, and it waits for Redis instead of refreshing alone with
    /// the same refresh token (a second token request, and with rotation an `invalid_grant`).
    func testARedisThatStallsDuringARefreshIsWaitedForNotRefreshedAround() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let server = try OAuthServer(name: "s", access: nil, refresh: "refresh-0")
        defer { server.shutdown() }
        let prefix = prefix()
        let members = (0..<2).map { _ in member(redis, server, prefix: prefix, outageWait: .seconds(10)) }
        let staller = RedisClient(configuration: redis.configuration())
        defer {
            for member in members {
                member.fleet.shutdown()
                member.client.close()
            }
            staller.close()
        }
        let expired = OAuth2Credential(accessToken: "stale", refreshToken: "refresh-0", expiresAt: Date(timeIntervalSinceNow: -1))
        try await members[0].authenticator.signIn(expired)
        for member in members { _ = try await member.authenticator.currentCredential() }

        let (arrivals, arrived) = AsyncStream.makeStream(of: Void.self)
        server.onTokenRequest { arrived.yield() }
        server.delayTokenAnswers(by: .milliseconds(300))
        let holder = Self.stormInBackground([members[0]], server.apiURL(), count: 1)
        for await _ in arrivals { break }
        // The holder is at the token endpoint: Redis stalls for 3 s.
        _ = try await staller.send(["CLIENT", "PAUSE", "3000", "ALL"])
        let other = await Self.storm([members[1]], server.apiURL(), count: 5)
        let first = await holder.value
        XCTAssertEqual(first.ok + other.ok, 6, "\(first.failures) \(other.failures)")
        XCTAssertEqual(server.tokenRequestCount, 1, "a stall is waited out, not refreshed around")
        XCTAssertEqual(server.refreshRefusals, 0)
    }

    func testRedisStoppedMidRunFallsBackAndTheCredentialIsWrittenBackWhenItReturns() async throws {
        let redis = try RedisServerProcess()
        // Stopped last, once every client is closed (a release right after its last use would
        // stop it under their connections).
        defer { redis.stop() }
        let server = try OAuthServer(name: "f", access: nil, refresh: "refresh-0")
        defer { server.shutdown() }
        let prefix = prefix()
        let members = (0..<2).map { _ in member(redis, server, prefix: prefix) }
        defer {
            for member in members {
                member.fleet.shutdown()
                member.client.close()
            }
        }
        let expired = OAuth2Credential(accessToken: "stale", refreshToken: "refresh-0", expiresAt: Date(timeIntervalSinceNow: -1))
        try await members[0].authenticator.signIn(expired)
        for member in members { _ = try await member.authenticator.currentCredential() }
        let first = await Self.storm(members, server.apiURL(), count: 5)
        XCTAssertEqual(first.ok, 10, "\(first.failures.prefix(5))")
        XCTAssertEqual(server.tokenRequestCount, 1)

        // Redis goes away (no persistence: it comes back empty); the access token is revoked.
        redis.stop()
        server.revokeAccess()
        let during = await Self.storm([members[0]], server.apiURL(), count: 10)
        XCTAssertEqual(during.ok, 10, "no request fails because Redis is away: \(during.failures.prefix(5))")
        XCTAssertEqual(server.tokenRequestCount, 2, "one refresh, alone")
        try await members[0].events.wait(for: .redisUnreachable, within: .seconds(2))
        try await members[0].events.wait(for: .refreshedAlone, within: .seconds(2))
        XCTAssertTrue(members[0].fleet.owesRedis)
        let renewed = try XCTUnwrap(server.currentAccess)

        try redis.start()
        try await members[0].events.wait(for: .wroteBack, within: .seconds(10))
        XCTAssertFalse(members[0].fleet.owesRedis)
        let inRedis = try await stored(redis, prefix: prefix)
        XCTAssertEqual(inRedis?.accessToken, renewed, "the credential refreshed alone is back in Redis")
        XCTAssertEqual(inRedis?.refreshToken, server.currentRefresh, "with the rotated refresh token")

        // The other process's token was revoked too: it takes the credential from Redis.
        let after = await Self.storm([members[1]], server.apiURL(), count: 5)
        XCTAssertEqual(after.ok, 5, "\(after.failures.prefix(5))")
        XCTAssertEqual(server.tokenRequestCount, 2, "no token request: the written-back credential is used")
        let other = try await members[1].authenticator.currentCredential()
        XCTAssertEqual(other?.accessToken, renewed)
    }

    func testAnACLUserLimitedToThePrefixIsEnoughAndErrorsCarryNoToken() async throws {
        let redis = try RedisServerProcess()
        // Stopped last, once every client is closed (a release right after its last use would
        // stop it under their connections).
        defer { redis.stop() }
        let admin = RedisClient(configuration: redis.configuration())
        defer { admin.close() }
        _ = try await admin.send([
            "ACL", "SETUSER", "fleet", "on", ">fleet-password", "~urltask:cred:acl:*", "&urltask:cred:acl:*", "+@all",
        ])
        var configuration = redis.configuration()
        configuration.username = "fleet"
        configuration.password = "fleet-password"
        let client = RedisClient(configuration: configuration)
        defer { client.close() }
        let secret = OAuth2Credential(
            accessToken: "secret-access", refreshToken: "secret-refresh", expiresAt: Date(timeIntervalSinceNow: 3600))

        let allowed = FleetCredential(client: client, configuration: .init(keyPrefix: "urltask:cred:acl:api"), refresh: { $0 })
        defer { allowed.shutdown() }
        try await allowed.store.save(secret)
        let loaded = try await stored(redis, prefix: "urltask:cred:acl:api")
        XCTAssertEqual(loaded?.refreshToken, "secret-refresh")
        let expired = OAuth2Credential(
            accessToken: "secret-access", refreshToken: "secret-refresh", expiresAt: Date(timeIntervalSinceNow: -1))
        let refreshed = try await allowed.refresh(expired)
        XCTAssertEqual(refreshed.accessToken, "secret-access", "the lease, the commit and the announcement are all allowed")

        let forbidden = FleetCredential(client: client, configuration: .init(keyPrefix: "other:api"), refresh: { $0 })
        defer { forbidden.shutdown() }
        do {
            _ = try await forbidden.refresh(expired)
            XCTFail("keys outside the user's pattern are refused")
        } catch let error as RedisError {
            XCTAssertEqual(error.kind, .reply(code: "NOPERM"))
            XCTAssertFalse("\(error)".contains("secret"), "no token in \(error)")
            XCTAssertFalse(String(reflecting: error).contains("secret"))
        }
    }

    /// The narrow ACL RunningAFleet shows: the fleet's keys and channels, and only the commands
    /// the client sends and its scripts call. A fleet credential runs its whole life under it:
    /// sign-in, load, a refresh with a waiter, a refusal recorded and adopted; and a fleet rate
    /// limiter its script.
    func testTheNarrowACLOfRunningAFleetIsEnoughForTheWholeLifecycle() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let admin = RedisClient(configuration: redis.configuration())
        defer { admin.close() }
        // The same line as RunningAFleet's (split into arguments).
        _ = try await admin.send(
            ("ACL SETUSER fleet on >fleet-password resetkeys ~urltask:* resetchannels &urltask:* -@all "
                + "+auth +hello +ping +evalsha +script|load +hmget +publish +subscribe +unsubscribe "
                + "+get +set +del +hget +hset +hdel +incr +pexpire +pttl +time").split(separator: " ").map(String.init))
        let server = try OAuthServer(name: "n", access: nil, refresh: "refresh-0")
        defer { server.shutdown() }
        var configuration = redis.configuration(replyTimeout: .seconds(1))
        configuration.username = "fleet"
        configuration.password = "fleet-password"
        let prefix = "urltask:cred:narrow"
        let members: [Member] = (0..<2).map { _ in
            let client = RedisClient(configuration: configuration)
            let fleet = FleetCredential(
                client: client, configuration: .init(keyPrefix: prefix, leaseTimeToLive: .seconds(5)),
                tokenEndpoint: OAuth2TokenEndpoint(url: server.tokenURL, clientID: "fleet", timeout: .seconds(3)))
            let authenticator = fleet.makeAuthenticator(origins: [server.baseURL], refreshBackoff: .zero)
            let manager = URLTaskManager(
                interceptors: [BearerInterceptor(authenticator: authenticator)],
                reactors: [OAuth2RefreshReactor(authenticator: authenticator)])
            return Member(client: client, fleet: fleet, authenticator: authenticator, manager: manager, events: FleetEventLog(fleet))
        }
        let limiterClient = RedisClient(configuration: configuration)
        defer {
            for member in members {
                member.fleet.shutdown()
                member.client.close()
            }
            limiterClient.close()
        }
        let expired = OAuth2Credential(accessToken: "stale", refreshToken: "refresh-0", expiresAt: Date(timeIntervalSinceNow: -1))
        try await members[0].authenticator.signIn(expired)
        for member in members { _ = try await member.authenticator.currentCredential() }
        server.delayTokenAnswers(by: .milliseconds(200))  // the second member waits for the first
        let refreshed = await Self.storm(members, server.apiURL(), count: 3)
        XCTAssertEqual(refreshed.ok, 6, "\(refreshed.failures.prefix(3))")
        XCTAssertEqual(server.tokenRequestCount, 1)
        // A refusal: recorded by one, adopted by the other.
        server.revokeRefresh()
        server.revokeAccess()
        let refused = await Self.storm(members, server.apiURL(), count: 3)
        XCTAssertEqual(refused.ok, 0)
        XCTAssertFalse(refused.failures.contains { $0.contains("NOPERM") }, "\(refused.failures.prefix(3))")
        XCTAssertEqual(server.tokenRequestCount, 2, "the refusal recorded once, adopted by the other")
        var recorded = 0
        for member in members where member.events.contains(.refusalRecorded) { recorded += 1 }
        XCTAssertEqual(recorded, 1)
        // The fleet rate limiter's script.
        let limiter = FleetRateLimiter(
            redis: limiterClient, policy: .init(rate: 0.5, burst: 1, processCount: 1, keyPrefix: "urltask:ratelimit"))
        let limited = URLTaskManager(interceptors: [limiter])
        defer { limited.session.invalidateAndCancel() }
        let (_, response) = try await limited.data(for: URLRequest(url: server.server.url("/other")))
        XCTAssertNotNil(response)
        let keys = try await admin.send(["KEYS", "urltask:ratelimit:*"])
        XCTAssertEqual(keys.array?.isEmpty, false, "the shared bucket was taken, not the local fallback: \(keys)")
    }

    /// A lease that keeps changing hands without a new credential (here a client that retakes it
    /// as soon as it expires) ends the refresh after ``FleetCredential/Configuration/maximumLeaseRounds``
    /// rounds with a ``FleetCredentialError`` naming the fleet: through the manager, a
    /// `URLTaskError` coded `reactorFailed`, never a `RedisError` while Redis is up.
    func testLeaseRoundsExhaustedFailWithAnErrorNamingTheFleet() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let server = try OAuthServer(name: "x", access: nil, refresh: "refresh-0")
        defer { server.shutdown() }
        let prefix = prefix()
        let client = RedisClient(configuration: redis.configuration(replyTimeout: .seconds(1)))
        let squatter = RedisClient(configuration: redis.configuration())
        let fleet = FleetCredential(
            client: client, configuration: .init(keyPrefix: prefix, leaseTimeToLive: .seconds(5), maximumLeaseRounds: 2),
            tokenEndpoint: OAuth2TokenEndpoint(url: server.tokenURL, clientID: "fleet", timeout: .seconds(3)))
        let authenticator = fleet.makeAuthenticator(origins: [server.baseURL], refreshBackoff: .zero)
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: authenticator)], reactors: [OAuth2RefreshReactor(authenticator: authenticator)])
        // A holder that never writes, and keeps its lease alive: every round of the refresh waits
        // out a short lease and finds it held again.
        _ = try await squatter.send(["SET", prefix + ":lease", "squatter", "PX", "150"])
        let squatting = Task {
            while !Task.isCancelled {
                _ = try? await squatter.send(["PEXPIRE", prefix + ":lease", "150"])
                try? await Task.sleep(for: .milliseconds(20))  // the squatter's pace, not a synchronisation
            }
        }
        defer {
            squatting.cancel()
            fleet.shutdown()
            client.close()
            squatter.close()
        }
        try await authenticator.signIn(
            OAuth2Credential(accessToken: "stale", refreshToken: "refresh-0", expiresAt: Date(timeIntervalSinceNow: -1)))
        do {
            _ = try await manager.data(for: URLRequest(url: server.apiURL()))
            XCTFail("the refresh cannot succeed")
        } catch let error as URLTaskError {
            XCTAssertEqual(error.code, .reactorFailed, "\(error)")
            let fleetError = try XCTUnwrap(error.underlying as? FleetCredentialError, "\(error)")
            XCTAssertEqual(fleetError, FleetCredentialError(kind: .leaseRoundsExhausted, keyPrefix: prefix, rounds: 2))
            XCTAssertTrue("\(fleetError)".contains(prefix))
        }
        XCTAssertEqual(server.tokenRequestCount, 0)
    }

    func testACancelledCallerStopsWaitingButTheRefreshRunsOnAndIsKept() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let client = RedisClient(configuration: redis.configuration(replyTimeout: .seconds(1)))
        defer { client.close() }
        let start = OAuth2Credential(accessToken: "access-0", refreshToken: "refresh-0", expiresAt: Date(timeIntervalSinceNow: -1))
        let rotated = OAuth2Credential(accessToken: "access-1", refreshToken: "refresh-1", expiresAt: Date(timeIntervalSinceNow: 3600))
        let started = AsyncLatch()
        let answer = AsyncLatch()
        let calls = LockedState(0)
        let fleet = FleetCredential(
            client: client, configuration: .init(keyPrefix: prefix()),
            refresh: { _ in
                calls.withLock { $0 += 1 }
                await started.open()
                await answer.wait()
                return rotated
            })
        defer { fleet.shutdown() }
        let events = FleetEventLog(fleet)
        try await fleet.store.save(start)

        let caller = Task { try await fleet.refresh(start) }
        await started.wait()
        caller.cancel()
        let outcome = await caller.result
        XCTAssertThrowsError(try outcome.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        await answer.open()
        try await events.wait(for: .refreshed, within: .seconds(5))
        let inRedis = try await stored(redis, prefix: fleet.configuration.keyPrefix)
        XCTAssertEqual(inRedis?.refreshToken, "refresh-1", "the rotated refresh token is stored")
        let again = try await fleet.refresh(start)
        XCTAssertEqual(again, rotated)
        XCTAssertEqual(calls.withLock { $0 }, 1, "taken without a second token request")
    }

    func testAHolderThatDiesBeforeItsTokenRequestIsReplacedOnceItsLeaseExpires() async throws {
        let redis = try RedisServerProcess()
        defer { redis.stop() }
        let server = try OAuthServer(name: "f", access: nil, refresh: "refresh-0")
        defer { server.shutdown() }
        let prefix = prefix()
        let deadClient = RedisClient(configuration: redis.configuration(replyTimeout: .seconds(1)))
        defer { deadClient.close() }
        let started = AsyncLatch()
        let end = AsyncLatch()
        // The holder takes the lease and then never sends its token request (as if killed).
        let dead = FleetCredential(
            client: deadClient, configuration: .init(keyPrefix: prefix, leaseTimeToLive: .milliseconds(400)),
            refresh: { _ in
                await started.open()
                await end.wait()
                throw CancellationError()
            })
        defer { dead.shutdown() }
        let live = member(redis, server, prefix: prefix, lease: .milliseconds(400))
        defer {
            live.fleet.shutdown()
            live.client.close()
        }
        let expired = OAuth2Credential(accessToken: "stale", refreshToken: "refresh-0", expiresAt: Date(timeIntervalSinceNow: -1))
        try await live.authenticator.signIn(expired)
        _ = try await dead.store.load()

        let holder = Task { try await dead.refresh(expired) }
        await started.wait()
        let began = ContinuousClock.now
        let result = await Self.storm([live], server.apiURL(), count: 20)
        let waited = began.duration(to: .now)

        XCTAssertEqual(result.ok, 20, "\(result.failures.prefix(5))")
        XCTAssertEqual(server.tokenRequestCount, 1, "the live process refreshed once the lease expired")
        XCTAssertEqual(server.refreshTokensReceived, ["refresh-0"], "no invalid_grant")
        XCTAssertGreaterThanOrEqual(waited, .milliseconds(300), "it waited for the lease to expire")
        try await live.events.wait(for: .leaseExpired, within: .seconds(2))
        let inRedis = try await stored(redis, prefix: prefix)
        XCTAssertEqual(inRedis?.accessToken, server.currentAccess)
        await end.open()
        _ = await holder.result
    }
}

/// The events a fleet credential emitted, collected as they come; waits are woken by the events
/// themselves (``FleetEvents``), with a deadline.
final class FleetEventLog: Sendable {
    private let events: FleetEvents<FleetCredential.Event>

    init(_ fleet: FleetCredential) {
        events = FleetEvents(fleet.events())
    }

    var all: [FleetCredential.Event] { events.all }

    func contains(_ event: FleetCredential.Event) -> Bool { all.contains(event) }

    /// Returns once `event` was emitted, failing after `limit`.
    func wait(for event: FleetCredential.Event, within limit: Duration) async throws {
        try await events.wait("\(event)", timeout: limit) { $0 == event }
    }

    /// Returns once any of `wanted` was emitted, failing after `limit`.
    func wait(forAnyOf wanted: [FleetCredential.Event], within limit: Duration) async throws {
        try await events.wait("any of \(wanted)", timeout: limit) { wanted.contains($0) }
    }
}

/// Opens once; every waiter, earlier or later, goes on.
actor AsyncLatch {
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func open() {
        isOpen = true
        let waiting = waiters
        waiters = []
        for waiter in waiting { waiter.resume() }
    }

    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiters.append($0) }
    }
}
