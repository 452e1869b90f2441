import Foundation
import XCTest
@testable import URLTaskRedis

/// The GCRA script against a real `redis-server`: the bucket's burst and rate, one bucket shared
/// by two clients (as by two processes), the pause, the expiry.
final class FleetRateLimitScriptTests: XCTestCase {
    private func limiter(_ redis: RedisClient, rate: Double, burst: Int, prefix: String = "test") -> FleetRateLimiter {
        FleetRateLimiter(redis: redis, policy: .init(rate: rate, burst: burst, processCount: 2, keyPrefix: prefix))
    }

    /// `burst` turns at once, then one per interval (200 ms at 5 a second), timed by the server.
    func testBurstThenRate() async throws {
        let server = try RedisServerProcess()
        // Stopped here, not in its deinit (where its exit handler no longer sees it: a 10 s wait).
        defer { server.stop() }
        let redis = RedisClient(configuration: server.fleetConfiguration)
        defer { redis.close() }
        let limiter = limiter(redis, rate: 5, burst: 3)
        let burstAsked = ContinuousClock.now
        for turn in 1...3 {
            let answer = try await limiter.take(host: "h")
            XCTAssertEqual(answer, .go, "turn \(turn) of the burst")
        }
        let fourthAsked = ContinuousClock.now
        guard case .wait(let wait, paused: false) = try await limiter.take(host: "h") else {
            return XCTFail("the fourth turn waits")
        }
        // An interval after the first turn of the burst, less what passed since (as below).
        XCTAssertGreaterThanOrEqual(wait, .milliseconds(200) - burstAsked.duration(to: .now) - .milliseconds(1))
        XCTAssertGreaterThan(wait, .zero)
        XCTAssertLessThanOrEqual(wait, .milliseconds(200))
        // The protocol: sleep as told, then ask again.
        try await Task.sleep(for: wait)
        let afterWait = try await limiter.take(host: "h")
        XCTAssertEqual(afterWait, .go)
        guard case .wait(let next, paused: false) = try await limiter.take(host: "h") else {
            return XCTFail("then one per interval")
        }
        // A whole interval after the last turn, less the time the two asks took beyond the wait
        // they were told (on Redis's clock at most what passed here from sending the fourth ask
        // to hearing this one, less the wait; a millisecond for the script's rounding): no bound
        // on how busy the machine is.
        let late = fourthAsked.duration(to: .now) - wait
        XCTAssertGreaterThanOrEqual(next, .milliseconds(200) - late - .milliseconds(1), "a whole interval after the last turn")
        XCTAssertLessThanOrEqual(next, .milliseconds(200))
        // The bucket's key expires when it would be full again: a quiet host keeps nothing.
        let ttl = try await redis.send(["PTTL", limiter.key("tat", "h")])
        guard case .integer(let milliseconds) = ttl else { return XCTFail("PTTL: \(ttl)") }
        XCTAssertGreaterThan(milliseconds, 0)
        XCTAssertLessThanOrEqual(milliseconds, 3 * 200 + 1)
        // Another host has a bucket of its own.
        let elsewhere = try await limiter.take(host: "other")
        XCTAssertEqual(elsewhere, .go)
    }

    /// Two clients (two processes) with one prefix share one bucket; another prefix is another.
    func testTwoClientsShareOneBucket() async throws {
        let server = try RedisServerProcess()
        // Stopped here, not in its deinit (where its exit handler no longer sees it: a 10 s wait).
        defer { server.stop() }
        let first = RedisClient(configuration: server.fleetConfiguration)
        let second = RedisClient(configuration: server.fleetConfiguration)
        defer {
            first.close()
            second.close()
        }
        let one = limiter(first, rate: 2, burst: 4)
        let two = limiter(second, rate: 2, burst: 4)
        var answers: [FleetRateLimitScripts.Answer] = []
        for _ in 0..<2 {
            answers.append(try await one.take(host: "h"))
            answers.append(try await two.take(host: "h"))
        }
        XCTAssertEqual(answers, [.go, .go, .go, .go], "the burst of 4, spent by both")
        let oneWaits = try await one.take(host: "h")
        let twoWaits = try await two.take(host: "h")
        for answer in [oneWaits, twoWaits] {
            guard case .wait(let wait, paused: false) = answer else { return XCTFail("the shared burst is spent: \(answer)") }
            XCTAssertGreaterThan(wait, .milliseconds(300))
            XCTAssertLessThanOrEqual(wait, .milliseconds(500))
        }
        let apart = limiter(second, rate: 2, burst: 4, prefix: "another")
        let otherPrefix = try await apart.take(host: "h")
        XCTAssertEqual(otherPrefix, .go, "another prefix, another bucket")
    }

    /// A pause answers first, with its remaining time; a shorter pause does not shorten it; it
    /// spends the burst, which refills over the pause.
    func testThePauseAnswersFirstAndKeepsTheLongerOne() async throws {
        let server = try RedisServerProcess()
        // Stopped here, not in its deinit (where its exit handler no longer sees it: a 10 s wait).
        defer { server.stop() }
        let redis = RedisClient(configuration: server.fleetConfiguration)
        defer { redis.close() }
        let limiter = limiter(redis, rate: 10, burst: 5)
        let pauseKeys = [limiter.key("pause", "h"), limiter.key("tat", "h")]
        let set = try await redis.run(FleetRateLimitScripts.pause, keys: pauseKeys, arguments: ["600", "400000"])
        XCTAssertEqual(set, .integer(1))
        let shorter = try await redis.run(FleetRateLimitScripts.pause, keys: pauseKeys, arguments: ["100", "400000"])
        XCTAssertEqual(shorter, .integer(0), "the longer pause stays")
        guard case .wait(let wait, paused: true) = try await limiter.take(host: "h") else { return XCTFail("paused") }
        XCTAssertGreaterThan(wait, .milliseconds(400))
        XCTAssertLessThanOrEqual(wait, .milliseconds(600))
        try await Task.sleep(for: wait)
        // 600 ms of refill at 10 a second over a bucket left with one turn: full again (5).
        var went = 0
        while try await limiter.take(host: "h") == .go { went += 1 }
        XCTAssertEqual(went, 5, "a burst goes when the pause ends, as the local limiter does")
    }

    /// A turn given back (a request that joined an identical transfer sent nothing) is there for
    /// the next request; a bucket already full keeps nothing.
    func testARefundGivesOneTurnBack() async throws {
        let server = try RedisServerProcess()
        defer { server.stop() }
        let redis = RedisClient(configuration: server.fleetConfiguration)
        defer { redis.close() }
        let limiter = limiter(redis, rate: 1, burst: 2)
        let first = try await limiter.take(host: "h")
        let second = try await limiter.take(host: "h")
        XCTAssertEqual([first, second], [.go, .go])
        guard case .wait = try await limiter.take(host: "h") else { return XCTFail("the burst is spent") }
        let refunded = try await redis.run(FleetRateLimitScripts.refund, keys: [limiter.key("tat", "h")], arguments: ["1000000"])
        XCTAssertEqual(refunded, .integer(1))
        let afterRefund = try await limiter.take(host: "h")
        XCTAssertEqual(afterRefund, .go)
        _ = try await redis.run(FleetRateLimitScripts.refund, keys: [limiter.key("tat", "h")], arguments: ["1000000"])
        _ = try await redis.run(FleetRateLimitScripts.refund, keys: [limiter.key("tat", "h")], arguments: ["1000000"])
        let exists = try await redis.send(["EXISTS", limiter.key("tat", "h")])
        XCTAssertEqual(exists, .integer(0), "refunded down to a full bucket: the key is gone")
        let nothing = try await redis.run(FleetRateLimitScripts.refund, keys: [limiter.key("tat", "h")], arguments: ["1000000"])
        XCTAssertEqual(nothing, .integer(0))
    }
}
