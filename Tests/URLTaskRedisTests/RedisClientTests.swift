import Foundation
import XCTest

@testable import URLTaskRedis

/// The client against a real `redis-server` the test starts (skipped where it is not installed).
final class RedisClientTests: XCTestCase {
    private var server: RedisServerProcess!
    private var clients: [RedisClient] = []

    override func setUpWithError() throws {
        server = try RedisServerProcess()
    }

    override func tearDown() {
        for client in clients { client.close() }
        clients = []
        server?.stop()
        server = nil
    }

    private func client(_ configure: (inout RedisClient.Configuration) -> Void = { _ in }) -> RedisClient {
        var configuration = server.configuration()
        configure(&configuration)
        let client = RedisClient(configuration: configuration)
        clients.append(client)
        return client
    }

    private func assertRedisError<T>(
        _ kinds: [RedisError.Kind], file: StaticString = #filePath, line: UInt = #line, _ body: () async throws -> T
    ) async -> RedisError? {
        do {
            _ = try await body()
            XCTFail("no error", file: file, line: line)
            return nil
        } catch let error as RedisError {
            XCTAssertTrue(kinds.contains(error.kind), "\(error.kind): \(error)", file: file, line: line)
            return error
        } catch {
            XCTFail("not a RedisError: \(error)", file: file, line: line)
            return nil
        }
    }

    // MARK: - Commands and replies

    func testCommandsAndEveryReplyType() async throws {
        let redis = client()
        let value1 = try await redis.send(["PING"])
        XCTAssertEqual(value1, .simpleString("PONG"))
        let value2 = try await redis.send(["SET", "k", "v"])
        XCTAssertEqual(value2, .simpleString("OK"))
        let value3 = try await redis.send(["GET", "k"])
        XCTAssertEqual(value3, .bulkString(Data("v".utf8)))
        let value4 = try await redis.send(["GET", "missing"])
        XCTAssertEqual(value4, .bulkString(nil))
        let value5 = try await redis.send(["INCRBY", "n", "41"])
        XCTAssertEqual(value5, .integer(41))
        let value6 = try await redis.send(["RPUSH", "l", "a", "b"])
        XCTAssertEqual(value6, .integer(2))
        let range = try await redis.send(["LRANGE", "l", "0", "-1"])
        XCTAssertEqual(range, .array([.bulkString(Data("a".utf8)), .bulkString(Data("b".utf8))]))
        let value7 = try await redis.send(["BLPOP", "empty", "0.01"])
        XCTAssertEqual(value7, .array(nil))
        let binary = Data((0...255).map { UInt8($0) } + [13, 10, 13, 10])
        let value8 = try await redis.send(data: [Data("SET".utf8), Data("bin".utf8), binary])
        XCTAssertEqual(value8, .simpleString("OK"))
        let value9 = try await redis.send(data: [Data("GET".utf8), Data("bin".utf8)])
        XCTAssertEqual(value9, .bulkString(binary))
        let error = await assertRedisError([.reply(code: "WRONGTYPE")]) { try await redis.send(["INCR", "l"]) }
        XCTAssertEqual(error?.message.contains("INCR"), true)
        // The server quotes an unknown command's arguments; the error names the command only.
        let unknown = await assertRedisError([.reply(code: "ERR")]) { try await redis.send(["NOSUCHCOMMAND", "hunter2-secret"]) }
        XCTAssertEqual(unknown?.description.contains("hunter2"), false)
        XCTAssertEqual(unknown?.description.contains("NOSUCHCOMMAND"), true)
        // An error reply inside a pipeline is a value in its place.
        let replies = try await redis.pipeline([["INCR", "l"], ["GET", "k"]])
        guard case .error(let text) = replies[0] else { return XCTFail("\(replies)") }
        XCTAssertTrue(text.hasPrefix("WRONGTYPE"))
        XCTAssertEqual(replies[1].string, "v")
        // RESP3 after HELLO 3: maps, doubles, nulls, booleans.
        let hello = try await redis.send(["HELLO", "3"])
        XCTAssertNotNil(hello.array)
        let value10 = try await redis.send(["GET", "missing"])
        XCTAssertEqual(value10, .null)
        _ = try await redis.send(["ZADD", "z", "1.5", "m"])
        let value11 = try await redis.send(["ZSCORE", "z", "m"])
        XCTAssertEqual(value11, .double(1.5))
        let value12 = try await redis.send(["EVAL", "redis.setresp(3); return true", "0"])
        XCTAssertEqual(value12, .boolean(true))
        let value13 = try await redis.send(["EVAL", "redis.setresp(3); return {double=2.5}", "0"])
        XCTAssertEqual(value13, .double(2.5))
    }

    func testUnixSocket() async throws {
        let missing = client { $0.endpoint = .unixSocket(path: self.server.directory.appendingPathComponent("none.sock").path) }
        _ = await assertRedisError([.connectionClosed]) { try await missing.send(["PING"]) }
        let redis = client { $0.endpoint = .unixSocket(path: self.server.socketPath) }
        let value14 = try await redis.send(["PING"])
        XCTAssertEqual(value14, .simpleString("PONG"))
        let value15 = try await redis.send(["ECHO", "over a Unix socket"]).string
        XCTAssertEqual(value15, "over a Unix socket")
    }

    func testConcurrentCallersGetTheirOwnReplies() async throws {
        let redis = client()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<200 {
                group.addTask {
                    _ = try await redis.send(["SET", "key\(index)", "value\(index)"])
                    let value = try await redis.send(["GET", "key\(index)"])
                    XCTAssertEqual(value.string, "value\(index)")
                }
            }
            try await group.waitForAll()
        }
    }

    func testPipelineOfAThousandCommands() async throws {
        let redis = client()
        _ = try await redis.send(["PING"])
        var roundTrips: [Duration] = []
        for _ in 0..<200 {
            let start = ContinuousClock.now
            _ = try await redis.send(["PING"])
            roundTrips.append(start.duration(to: .now))
        }
        let commands = (0..<1000).map { ["INCR", "counter\($0 % 10)"] }
        let start = ContinuousClock.now
        let replies = try await redis.pipeline(commands)
        let pipelined = start.duration(to: .now)
        XCTAssertEqual(replies.count, 1000)
        XCTAssertEqual(replies.last, .integer(100))
        let pings = ContinuousClock.now
        let pong = try await redis.pipeline(Array(repeating: ["PING"], count: 1000))
        let pingTime = pings.duration(to: .now)
        XCTAssertTrue(pong.allSatisfy { $0 == .simpleString("PONG") })
        // 1,000 callers at once share the connection: their commands go out as they come and
        // the replies are matched in order.
        let concurrent = ContinuousClock.now
        try await withThrowingTaskGroup(of: RESPValue.self) { group in
            for _ in 0..<1000 { group.addTask { try await redis.send(["PING"]) } }
            for try await reply in group { XCTAssertEqual(reply, .simpleString("PONG")) }
        }
        let concurrentTime = concurrent.duration(to: .now)
        printFigures("figures: 1,000 concurrent callers' PINGs \(concurrentTime)")
        let median = roundTrips.sorted()[roundTrips.count / 2]
        printFigures(
            "figures: round trip (PING, median of 200) \(median); 1,000 pipelined INCR \(pipelined); 1,000 pipelined PING \(pingTime)")
    }

    // MARK: - Reply limits

    /// Real Redis replies against the two limits: a value larger than `maximumReplySize` fails
    /// its command with a `.protocolViolation` naming the setting, the client reconnects for
    /// the next command, and the limit is per reply (a pipeline of replies that each fit, more
    /// than the limit together, is read); `XREAD` answers 5 levels deep, within the default
    /// depth and past a depth of 4.
    func testTheReplyLimitsAreConfigurableAndPerReply() async throws {
        let admin = client()
        _ = try await admin.send(["SET", "big", String(repeating: "b", count: 2 << 20)])
        _ = try await admin.send(["SET", "half", String(repeating: "h", count: 600 << 10)])
        let small = client { $0.maximumReplySize = 1 << 20 }
        let refused = await assertRedisError([.protocolViolation]) { try await small.send(["GET", "big"]) }
        XCTAssertEqual(refused?.message.contains("maximumReplySize (1 MiB)"), true, refused?.message ?? "")
        let pong = try await small.send(["PING"])
        XCTAssertEqual(pong, .simpleString("PONG"))
        let halves = try await small.pipeline([["GET", "half"], ["GET", "half"], ["GET", "half"]])
        XCTAssertEqual(halves.map { $0.data?.count }, [600 << 10, 600 << 10, 600 << 10])
        let roomy = client { $0.maximumReplySize = 4 << 20 }
        let value = try await roomy.send(["GET", "big"])
        XCTAssertEqual(value.data?.count, 2 << 20)

        _ = try await admin.send(["XADD", "stream", "*", "field", "value"])
        let read = try await admin.send(["XREAD", "STREAMS", "stream", "0"])
        XCTAssertEqual(Self.depth(of: read), 5)
        let shallow = client { $0.maximumReplyDepth = 4 }
        let tooDeep = await assertRedisError([.protocolViolation]) { try await shallow.send(["XREAD", "STREAMS", "stream", "0"]) }
        XCTAssertEqual(tooDeep?.message.contains("maximumReplyDepth (4 levels)"), true, tooDeep?.message ?? "")
    }

    /// How many arrays deep a value is (a scalar is 0).
    private static func depth(of value: RESPValue) -> Int {
        guard case .array(let elements?) = value else { return 0 }
        return 1 + (elements.map { depth(of: $0) }.max() ?? 0)
    }

    // MARK: - AUTH and SELECT

    func testAuthWithAnACLUserAndAWrongPassword() async throws {
        let admin = client()
        let password = "s3cret-fleet-pw"
        let value16 = try await admin.send(["ACL", "SETUSER", "fleet", "on", ">\(password)", "~fleet:*", "+@all"])
        XCTAssertEqual(value16, .simpleString("OK"))
        let fleet = client {
            $0.username = "fleet"
            $0.password = password
        }
        let value17 = try await fleet.send(["SET", "fleet:a", "1"])
        XCTAssertEqual(value17, .simpleString("OK"))
        let value18 = try await fleet.send(["ACL", "WHOAMI"]).string
        XCTAssertEqual(value18, "fleet")
        // The ACL's key pattern holds: a NOPERM reply, typed.
        _ = await assertRedisError([.reply(code: "NOPERM")]) { try await fleet.send(["GET", "other"]) }

        let wrong = "wrong-pw-\(UUID().uuidString)"
        let intruder = client {
            $0.username = "fleet"
            $0.password = wrong
        }
        let error = await assertRedisError([.reply(code: "WRONGPASS")]) { try await intruder.send(["PING"]) }
        XCTAssertEqual(error?.description.contains(wrong), false)
        XCTAssertEqual(error?.description.contains(password), false)
        XCTAssertEqual("\(String(describing: error))".contains(wrong), false)
        // During the back-off that follows, a command fails at once with the same reason.
        let again = await assertRedisError([.reply(code: "WRONGPASS")]) { try await intruder.send(["PING"]) }
        XCTAssertEqual(again?.message.contains("next attempt"), true)
        XCTAssertEqual(again?.message.contains(wrong), false)
        // A subscription refused by the server ends its stream with the typed error.
        let refused = await assertRedisError([.reply(code: "WRONGPASS")]) {
            for try await _ in intruder.subscribe(to: "fleet:news") {}
        }
        XCTAssertEqual(refused?.description.contains(wrong), false)
    }

    func testAuthWithAPasswordOnly() async throws {
        let admin = client()
        _ = try await admin.send(["CONFIG", "SET", "requirepass", "only-a-password"])
        let withPassword = client { $0.password = "only-a-password" }
        let value19 = try await withPassword.send(["PING"])
        XCTAssertEqual(value19, .simpleString("PONG"))
        let without = client()
        _ = await assertRedisError([.reply(code: "NOAUTH")]) { try await without.send(["GET", "k"]) }
    }

    func testSelectTheConfiguredDatabase() async throws {
        let third = client { $0.database = 3 }
        _ = try await third.send(["SET", "where", "three"])
        let zero = client()
        let value20 = try await zero.send(["GET", "where"])
        XCTAssertEqual(value20, .bulkString(nil))
        let value21 = try await third.send(["GET", "where"]).string
        XCTAssertEqual(value21, "three")
        let bad = client { $0.database = 99 }
        _ = await assertRedisError([.reply(code: "ERR")]) { try await bad.send(["PING"]) }
    }

    // MARK: - Scripts

    func testEvalshaLoadsTheScriptOnNoscript() async throws {
        let redis = client()
        let script = RedisScript("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        let value22 = try await redis.run(script, keys: ["s"], arguments: ["2"])
        XCTAssertEqual(value22, .integer(2))
        let value23 = try await redis.run(script, keys: ["s"], arguments: ["3"])
        XCTAssertEqual(value23, .integer(5))
        let value24 = try await scriptLoads(redis)
        XCTAssertEqual(value24, 1)
        let value25 = try await redis.send(["SCRIPT", "FLUSH"])
        XCTAssertEqual(value25, .simpleString("OK"))
        let value26 = try await redis.run(script, keys: ["s"], arguments: ["1"])
        XCTAssertEqual(value26, .integer(6))
        let value27 = try await scriptLoads(redis)
        XCTAssertEqual(value27, 2)
        let value28 = try await redis.send(["SCRIPT", "EXISTS", script.sha1])
        XCTAssertEqual(value28, .array([.integer(1)]))
        let failing = RedisScript("return redis.error_reply('FENCED stale writer')")
        _ = await assertRedisError([.reply(code: "FENCED")]) { try await redis.run(failing, keys: [], arguments: []) }
    }

    private func scriptLoads(_ redis: RedisClient) async throws -> Int {
        let info = try await redis.send(["INFO", "commandstats"]).string ?? ""
        guard let line = info.split(whereSeparator: \.isNewline).first(where: { $0.hasPrefix("cmdstat_script|load:") }),
            let calls = line.split(separator: ",").first?.split(separator: "=").last
        else { return 0 }
        return Int(calls) ?? 0
    }

    // MARK: - Pub/sub

    func testPublishedMessagesReachTheStreamAndSurviveARestart() async throws {
        let redis = client()
        let publisher = client()
        let (subscribed, subscribedContinuation) = AsyncStream<Void>.makeStream()
        let stream = redis.subscribe(to: "news") { subscribedContinuation.yield() }
        var messages = stream.makeAsyncIterator()
        var confirmations = subscribed.makeAsyncIterator()
        _ = await confirmations.next()
        let value29 = try await publisher.send(["PUBLISH", "news", "first"])
        XCTAssertEqual(value29, .integer(1))
        let value30 = try await messages.next()
        XCTAssertEqual(value30, Data("first".utf8))

        try server.restart()
        _ = await confirmations.next()  // resubscribed on the new server
        let receivers = try await publishAfterReconnect(publisher, "news", "second")
        XCTAssertEqual(receivers, 1)
        let value31 = try await messages.next()
        XCTAssertEqual(value31, Data("second".utf8))
    }

    /// The publisher's own connection died with the old server: its first command may fail.
    private func publishAfterReconnect(_ publisher: RedisClient, _ channel: String, _ message: String) async throws -> Int64? {
        do {
            return try await publisher.send(["PUBLISH", channel, message]).integer
        } catch let error as RedisError where error.kind == .connectionClosed {
            return try await publisher.send(["PUBLISH", channel, message]).integer
        }
    }

    func testASilentSubscriptionIsNoticedByItsHealthCheckAndResubscribed() async throws {
        let proxy = try BlackHoleProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        var configuration = RedisClient.Configuration(
            endpoint: .tcp(host: "127.0.0.1", port: proxy.port), replyTimeout: .milliseconds(300))
        configuration.subscriptionHealthCheckInterval = .milliseconds(200)
        let redis = RedisClient(configuration: configuration)
        clients.append(redis)
        let publisher = client()
        let (subscribed, confirm) = AsyncStream<Void>.makeStream()
        var messages = redis.subscribe(to: "quiet", onSubscribed: { confirm.yield() }).makeAsyncIterator()
        var confirmations = subscribed.makeAsyncIterator()
        _ = await confirmations.next()
        let value1 = try await publisher.send(["PUBLISH", "quiet", "one"])
        XCTAssertEqual(value1, .integer(1))
        let one = try await messages.next()
        XCTAssertEqual(one, Data("one".utf8))

        proxy.freezeExisting()
        let frozenAt = ContinuousClock.now
        _ = await confirmations.next()  // a new connection, subscribed again
        XCTAssertLessThan(frozenAt.duration(to: .now), .seconds(3))
        XCTAssertEqual(proxy.acceptedCount, 2)
        // The new connection receives (the silent one, closed by the client, may not be gone yet).
        let value2 = try await publisher.send(["PUBLISH", "quiet", "two"])
        XCTAssertGreaterThanOrEqual(value2.integer ?? 0, 1)
        let two = try await messages.next()
        XCTAssertEqual(two, Data("two".utf8))
    }

    func testCancellingTheIteratingTaskEndsTheSubscription() async throws {
        let redis = client()
        let publisher = client()
        let (subscribed, confirm) = AsyncStream<Void>.makeStream()
        let task = Task {
            var count = 0
            for try await _ in redis.subscribe(to: "c", onSubscribed: { confirm.yield() }) { count += 1 }
            return count
        }
        var confirmations = subscribed.makeAsyncIterator()
        _ = await confirmations.next()
        task.cancel()
        _ = try await task.value
        let deadline = ContinuousClock.now + .seconds(5)
        while try await publisher.send(["PUBSUB", "NUMSUB", "c"]).array?.last != .integer(0) {
            XCTAssertLessThan(ContinuousClock.now, deadline, "the subscription's connection stayed")
            if ContinuousClock.now > deadline { break }
            await Task.yield()
        }
    }

    // MARK: - Faults

    func testTheNextCommandAfterAServerRestartWorks() async throws {
        let redis = client()
        let value32 = try await redis.send(["SET", "k", "1"])
        XCTAssertEqual(value32, .simpleString("OK"))
        try server.restart()
        let value33 = try await redis.send(["GET", "k"])
        XCTAssertEqual(value33, .bulkString(nil))
        let value34 = try await redis.send(["PING"])
        XCTAssertEqual(value34, .simpleString("PONG"))
    }

    func testAKilledServerFailsTheCommandInFlightThenTheClientReconnects() async throws {
        let redis = client {
            $0.replyTimeout = .seconds(10)
            $0.reconnectDelay = .milliseconds(200)
        }
        let admin = client()
        _ = try await redis.send(["PING"])
        let blocked = Task { try await redis.send(["BLPOP", "never", "8"]) }
        // Wait until the server holds the command (an event, with a deadline).
        let deadline = ContinuousClock.now + .seconds(5)
        while try await admin.send(["INFO", "clients"]).string?.contains("blocked_clients:1") != true {
            guard ContinuousClock.now < deadline else { return XCTFail("the BLPOP never reached the server") }
            await Task.yield()
        }
        // Commands queued behind it on the same connection, all in flight when the server dies.
        let queued = (0..<20).map { index in Task { try await redis.send(["ECHO", "queued \(index)"]) } }
        let killedAt = ContinuousClock.now
        server.killNow()
        _ = await assertRedisError([.connectionClosed]) { try await blocked.value }
        for task in queued {
            _ = await assertRedisError([.connectionClosed]) { try await task.value }
        }
        XCTAssertLessThan(killedAt.duration(to: .now), .seconds(2))

        // While it is down: refused at once, then no attempt during the back-off.
        _ = await assertRedisError([.connectionClosed]) { try await redis.send(["PING"]) }
        let fast = ContinuousClock.now
        let backingOff = await assertRedisError([.connectionClosed]) { try await redis.send(["PING"]) }
        XCTAssertLessThan(fast.duration(to: .now), .milliseconds(100))
        XCTAssertEqual(backingOff?.message.contains("next attempt"), true)

        try server.start()
        let back = ContinuousClock.now + .seconds(5)
        while true {
            do {
                let value35 = try await redis.send(["PING"])
                XCTAssertEqual(value35, .simpleString("PONG"))
                break
            } catch let error as RedisError where error.kind == .connectionClosed && ContinuousClock.now < back {
                await Task.yield()
            }
        }
    }

    func testASlowServerTimesOut() async throws {
        let redis = client { $0.replyTimeout = .milliseconds(300) }
        let admin = client()
        _ = try await redis.send(["PING"])
        let start = ContinuousClock.now
        let error = await assertRedisError([.timeout]) { try await redis.send(["DEBUG", "SLEEP", "1"]) }
        let waited = start.duration(to: .now)
        XCTAssertGreaterThanOrEqual(waited, .milliseconds(290))
        XCTAssertLessThan(waited, .milliseconds(900))
        XCTAssertEqual(error?.message.contains("DEBUG"), true)
        // Once the server is awake again, the next command reconnects and works.
        let value36 = try await admin.send(["PING"])
        XCTAssertEqual(value36, .simpleString("PONG"))
        let value37 = try await redis.send(["PING"])
        XCTAssertEqual(value37, .simpleString("PONG"))
    }

    func testAReplyCutInHalfFailsWithoutAHang() async throws {
        let admin = client()
        let value = String(repeating: "x", count: 100_000)
        _ = try await admin.send(["SET", "big", value])
        let proxy = try HalfReplyProxy(upstreamPort: server.port)
        let redis = RedisClient(configuration: .init(endpoint: .tcp(host: "127.0.0.1", port: proxy.port), replyTimeout: .seconds(5)))
        clients.append(redis)
        let start = ContinuousClock.now
        _ = await assertRedisError([.connectionClosed, .protocolViolation]) { try await redis.send(["GET", "big"]) }
        XCTAssertLessThan(start.duration(to: .now), .seconds(2))
        XCTAssertGreaterThan(proxy.forwardedBytes, 1000)
    }

    func testARefusedConnectionFailsQuickly() async throws {
        let (fd, port) = try TestSockets.bound()
        defer { close(fd) }
        let redis = RedisClient(configuration: .init(endpoint: .tcp(host: "127.0.0.1", port: port)))
        clients.append(redis)
        let start = ContinuousClock.now
        _ = await assertRedisError([.connectionClosed]) { try await redis.send(["PING"]) }
        XCTAssertLessThan(start.duration(to: .now), .milliseconds(500))
    }

    func testConnectTimesOutOnAListenerThatNeverAccepts() async throws {
        let (listener, port) = try TestSockets.listener(backlog: 0)
        var fillers: [Int32] = []
        defer {
            for fd in fillers { close(fd) }
            close(listener)
        }
        for _ in 0..<8 { fillers.append(try TestSockets.connectNonBlocking(port: port)) }
        let redis = RedisClient(configuration: .init(endpoint: .tcp(host: "127.0.0.1", port: port), connectTimeout: .milliseconds(300)))
        clients.append(redis)
        let start = ContinuousClock.now
        _ = await assertRedisError([.timeout]) { try await redis.send(["PING"]) }
        let waited = start.duration(to: .now)
        XCTAssertGreaterThanOrEqual(waited, .milliseconds(290))
        XCTAssertLessThan(waited, .seconds(2))
    }

    func testCloseFailsCallsInFlightAndLater() async throws {
        let redis = client()
        _ = try await redis.send(["PING"])
        let blocked = Task { try await redis.send(["BLPOP", "never", "3"]) }
        let admin = client()
        let deadline = ContinuousClock.now + .seconds(5)
        while try await admin.send(["INFO", "clients"]).string?.contains("blocked_clients:1") != true {
            guard ContinuousClock.now < deadline else { return XCTFail("the BLPOP never reached the server") }
            await Task.yield()
        }
        redis.close()
        _ = await assertRedisError([.connectionClosed]) { try await blocked.value }
        _ = await assertRedisError([.connectionClosed]) { try await redis.send(["PING"]) }
        _ = await assertRedisError([.connectionClosed]) {
            for try await _ in redis.subscribe(to: "x") {}
        }
    }
}
