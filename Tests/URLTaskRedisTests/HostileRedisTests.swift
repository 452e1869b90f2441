import Foundation
import XCTest

@testable import URLTaskRedis

/// The client against a peer that is not Redis (``HostileRedisServer``): bytes that are not
/// RESP, an array 100,000 levels deep, gigabytes announced and streamed, a reply that never
/// ends, a dripped reply, and seeded random rounds of these, on the command connection and on
/// a subscription's. Each ends in a typed ``RedisError`` within the reply timeout (or, for a
/// subscription, a reconnect), holds at most ``growthLimitMiB`` of memory more than before it
/// (peak resident set, `VmHWM`, against the resident set at its start), and leaves a client
/// that works against the next, well-behaved connection. The library's defaults throughout:
/// what the limits are worth is what an app gets without setting them.
final class HostileRedisTests: XCTestCase {
    /// The most a hostile case may add to the process's peak resident set.
    static let growthLimitMiB = 64
    /// The environment variable that makes ``testChild()`` the body of a child process.
    static let childVariable = "URLTASK_HOSTILE_CHILD"
    /// The environment variable that repeats ``testRandomRoundsOfHostileReplies()``'s rounds.
    static let seedVariable = "URLTASK_HOSTILE_SEED"

    private var server: HostileRedisServer!
    private var clients: [RedisClient] = []

    override func setUpWithError() throws {
        server = try HostileRedisServer()
    }

    override func tearDown() {
        for client in clients { client.close() }
        clients = []
        server?.stop()
        server = nil
    }

    private func client() -> RedisClient {
        let client = RedisClient(configuration: server.configuration)
        clients.append(client)
        return client
    }

    /// What one hostile answer did to the client.
    struct Outcome {
        var error: RedisError?
        var value: RESPValue?
        var elapsed: Duration
        var growthMiB: Int?
    }

    /// A new client sends `PING` to a connection that answers as `behaviour` says: the error
    /// (or value) it ended in, how long that took and the peak growth of the resident set
    /// meanwhile. Then the same client must work again, on a new connection.
    private func hostileCommand(
        _ behaviour: HostileRedisServer.Behaviour, file: StaticString = #filePath, line: UInt = #line
    ) async throws -> Outcome {
        let redis = client()
        let accepted = server.acceptedCount
        server.enqueue(behaviour)
        XCTAssertTrue(MemoryProbe.resetPeak() || MemoryProbe.peakKiB == nil, "cannot reset VmHWM on this machine", file: file, line: line)
        let baseline = MemoryProbe.residentKiB
        let start = ContinuousClock.now
        var outcome = Outcome(elapsed: .zero)
        do {
            outcome.value = try await redis.send(["PING"])
        } catch let error as RedisError {
            outcome.error = error
        }
        outcome.elapsed = start.duration(to: .now)
        if let baseline, let peak = MemoryProbe.peakKiB { outcome.growthMiB = (peak - baseline) / 1024 }
        // The hostile connection is gone (closed by the client); the next one is well behaved.
        let pong = try await redis.send(["PING"])
        XCTAssertEqual(pong, .simpleString("PONG"), "\(behaviour)", file: file, line: line)
        // A hostile connection, then one that works (a valid answer keeps its connection).
        let connections = outcome.error == nil ? 1 : 2
        XCTAssertEqual(server.acceptedCount, accepted + connections, "\(behaviour)", file: file, line: line)
        redis.close()
        return outcome
    }

    /// Asserts that `outcome` is a typed error of one of `kinds`, within `within`, that grew the
    /// resident set by at most ``growthLimitMiB``.
    private func assertBounded(
        _ outcome: Outcome, _ kinds: [RedisError.Kind], within: Duration, _ name: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        if let value = outcome.value {
            // Described by its shape only: a value from a hostile peer may be too deep to print.
            XCTFail("\(name): a value (\(Self.shape(value))), not an error", file: file, line: line)
        }
        if let error = outcome.error {
            XCTAssertTrue(kinds.contains(error.kind), "\(name): \(error.kind): \(error)", file: file, line: line)
        }
        XCTAssertLessThan(outcome.elapsed, within, "\(name): took \(outcome.elapsed)", file: file, line: line)
        if let growth = outcome.growthMiB {
            XCTAssertLessThanOrEqual(
                growth, Self.growthLimitMiB, "\(name): the peak resident set grew \(growth) MiB", file: file, line: line)
        }
        printFigures(
            "figures: hostile \(name): \(outcome.error.map { "\($0.kind)" } ?? "value") in \(outcome.elapsed), "
                + "peak growth \(outcome.growthMiB.map { "\($0) MiB" } ?? "not measured"): \(outcome.error?.message ?? "")")
    }

    /// A value's type and size, without walking into it.
    static func shape(_ value: RESPValue) -> String {
        switch value {
        case .array(let elements?): return "an array of \(elements.count)"
        case .bulkString(let data?): return "a bulk string of \(data.count) bytes"
        default: return "a scalar"
        }
    }

    // MARK: - The command connection

    /// Bytes that are not RESP: a protocol violation at once, the connection closed and
    /// replaced. (Already so before the limits: this pins it.)
    func testMalformedRepliesEndInAProtocolViolation() async throws {
        for bytes in HostileReplies.malformed {
            let outcome = try await hostileCommand(.reply(bytes))
            assertBounded(outcome, [.protocolViolation], within: .seconds(1), "malformed \(Array(bytes.prefix(8)))")
        }
    }

    /// Gigabytes announced, and as many bytes as the client takes: refused at the header, before
    /// the body is read. Before the limits a bulk of 500 MB (within Redis's own 512 MB) was read
    /// (+529 MiB), and an array of 60 million integers held +120 MiB until the reply timeout.
    func testHugeBulkStringsAndArraysAreRefusedAtTheirHeader() async throws {
        let cases: [(String, (head: [UInt8], chunk: [UInt8]))] = [
            ("bulk of 500 MB", HostileReplies.hugeBulk(announced: 500_000_000)),
            ("bulk of 4 GiB", HostileReplies.hugeBulk(announced: 1 << 32)),
            ("array of 60 million", HostileReplies.hugeArray(announced: 60_000_000)),
            ("array of 4 billion", HostileReplies.hugeArray(announced: 1 << 32)),
        ]
        for (name, reply) in cases {
            let outcome = try await hostileCommand(.stream(head: reply.head, chunk: reply.chunk))
            assertBounded(outcome, [.protocolViolation], within: .seconds(1), name)
            XCTAssertEqual(outcome.error?.message.contains("maximumReplySize"), true, "\(name): \(outcome.error?.message ?? "")")
        }
    }

    /// An array of 100,000 bulk strings of 1 MiB each, streamed: cut at the reply size, not
    /// held until the reply timeout (+1,645 MiB in those 2 s before the limits).
    func testAnEndlessReplyIsCutAtTheReplySize() async throws {
        let reply = HostileReplies.endless()
        let outcome = try await hostileCommand(.stream(head: reply.head, chunk: reply.chunk))
        assertBounded(outcome, [.protocolViolation], within: .seconds(1), "endless reply")
        XCTAssertEqual(outcome.error?.message.contains("maximumReplySize"), true, outcome.error?.message ?? "")
    }

    /// A valid reply dripped 4 KiB every 20 ms (1 MiB would take 5 s): `.timeout` at the reply
    /// timeout, the drip's bytes not held past it. (Already so before the limits: this pins it.)
    func testADrippedReplyTimesOut() async throws {
        let bytes = HostileRedisServer.bulk([UInt8](repeating: UInt8(ascii: "d"), count: 1 << 20))
        let outcome = try await hostileCommand(.drip(bytes, piece: 4096, interval: .milliseconds(20)))
        assertBounded(outcome, [.timeout], within: .seconds(3), "dripped reply")
        XCTAssertGreaterThanOrEqual(outcome.elapsed, .milliseconds(1900))
    }

    /// Seeded random rounds (the seed is printed; `URLTASK_HOSTILE_SEED` repeats them): bytes
    /// that are not RESP, deep arrays, huge headers, endless replies, replies cut short, slow
    /// drips, and valid values of random shapes in random pieces, which must arrive intact.
    func testRandomRoundsOfHostileReplies() async throws {
        let seed = ProcessInfo.processInfo.environment[Self.seedVariable].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64.max)
        print("HostileRedisTests: seed \(seed) (\(Self.seedVariable)=\(seed) repeats these rounds)")
        var generator = SplitMix(seed: seed)
        for round in 0..<16 {
            let name = "round \(round) of seed \(seed)"
            let pick = generator.next() % 8
            switch pick {
            case 0:
                // An unknown type byte, then noise.
                let types = Array("+-:$*_#,(!=~>%|".utf8)
                var first = UInt8(truncatingIfNeeded: generator.next())
                while types.contains(first) { first &+= 1 }
                let noise = (0..<Int(generator.next() % 32)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
                let outcome = try await hostileCommand(.reply([first] + noise + [13, 10]))
                assertBounded(outcome, [.protocolViolation], within: .seconds(1), "\(name): malformed")
            case 1:
                let levels = 33 + Int(generator.next() % 100_000)
                let outcome = try await hostileCommand(.reply(HostileReplies.deepArray(levels: levels)))
                assertBounded(outcome, [.protocolViolation], within: .seconds(1), "\(name): \(levels) levels deep")
            case 2:
                let announced = (16 << 20) + 1 + Int(generator.next() % (1 << 32))
                let reply =
                    generator.next() % 2 == 0
                    ? HostileReplies.hugeBulk(announced: announced) : HostileReplies.hugeArray(announced: announced)
                let outcome = try await hostileCommand(.stream(head: reply.head, chunk: reply.chunk))
                assertBounded(outcome, [.protocolViolation], within: .seconds(1), "\(name): \(announced) announced")
            case 3:
                let reply = HostileReplies.endless()
                let outcome = try await hostileCommand(.stream(head: reply.head, chunk: reply.chunk))
                assertBounded(outcome, [.protocolViolation], within: .seconds(1), "\(name): endless")
            case 4:
                // Cut short: the server closes in the middle of a valid reply.
                let value = Self.randomValue(&generator)
                let bytes = Self.encode(value)
                let cut = Int(generator.next() % UInt64(bytes.count))
                let outcome = try await hostileCommand(.closeAfter(Array(bytes[0..<cut])))
                assertBounded(outcome, [.connectionClosed], within: .seconds(1), "\(name): cut at \(cut) of \(bytes.count)")
            case 5 where generator.next() % 3 == 0:
                // A slow drip (a second of it at most per round): the reply timeout.
                let bytes = HostileRedisServer.bulk([UInt8](repeating: UInt8(ascii: "s"), count: 1 << 20))
                let outcome = try await hostileCommand(.drip(bytes, piece: 1 + Int(generator.next() % 4096), interval: .milliseconds(20)))
                assertBounded(outcome, [.timeout], within: .seconds(3), "\(name): dripped")
            default:
                // A valid value of a random shape, in random pieces: it arrives intact.
                let value = Self.randomValue(&generator)
                let piece = 1 + Int(generator.next() % 70_000)
                let outcome = try await hostileCommand(.drip(Self.encode(value), piece: piece, interval: .zero))
                XCTAssertNil(outcome.error, "\(name): \(outcome.error.map { "\($0)" } ?? "")")
                XCTAssertTrue(outcome.value == value, "\(name): the value changed on its way")
                if let growth = outcome.growthMiB { XCTAssertLessThanOrEqual(growth, Self.growthLimitMiB, name) }
            }
        }
    }

    /// A value within every default limit: at most 8 levels, 200 elements an array, about
    /// 4 MiB of bulk strings in all.
    static func randomValue(_ generator: inout SplitMix) -> RESPValue {
        var budget = 4 << 20
        return randomValue(&generator, depth: 0, budget: &budget)
    }

    private static func randomValue(_ generator: inout SplitMix, depth: Int, budget: inout Int) -> RESPValue {
        switch generator.next() % (depth >= 8 || budget <= 0 ? 4 : 6) {
        case 0: return .simpleString(String(repeating: "s", count: Int(generator.next() % 40)))
        case 1: return .integer(Int64(bitPattern: generator.next()))
        case 2: return generator.next() % 2 == 0 ? .bulkString(nil) : .array(nil)
        case 3:
            let count = Int(generator.next() % 2000)
            budget -= count
            return .bulkString(Data((0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }))
        case 4:
            let count = Int(generator.next() % UInt64(max(1, min(1 << 20, budget))))
            budget -= count
            return .bulkString(Data(repeating: UInt8(ascii: "b"), count: count))
        default:
            let count = Int(generator.next() % 200)
            budget -= count * 48
            return .array((0..<count).map { _ in randomValue(&generator, depth: depth + 1, budget: &budget) })
        }
    }

    /// RESP2 bytes of a value ``randomValue(_:)`` makes.
    static func encode(_ value: RESPValue) -> [UInt8] {
        switch value {
        case .simpleString(let text): return Array("+\(text)\r\n".utf8)
        case .error(let text): return Array("-\(text)\r\n".utf8)
        case .integer(let number): return Array(":\(number)\r\n".utf8)
        case .bulkString(let data?): return HostileRedisServer.bulk(Array(data))
        case .bulkString(nil): return Array("$-1\r\n".utf8)
        case .array(let elements?): return Array("*\(elements.count)\r\n".utf8) + elements.flatMap { encode($0) }
        case .array(nil): return Array("*-1\r\n".utf8)
        case .null: return Array("_\r\n".utf8)
        case .boolean(let flag): return Array("#\(flag ? "t" : "f")\r\n".utf8)
        case .double(let number): return Array(",\(number)\r\n".utf8)
        }
    }

    // MARK: - A subscription's connection

    /// Subscribes to a server whose first subscription connection pushes as `push` says; the
    /// stream must then carry the well-behaved connection's greeting, within `within`, the
    /// resident set grown by at most ``growthLimitMiB``. Whether it did.
    @discardableResult
    private func hostileSubscription(
        _ push: HostileRedisServer.Behaviour, within: Duration, _ name: String, file: StaticString = #filePath, line: UInt = #line
    ) async throws -> Bool {
        let redis = client()
        defer { redis.close() }
        server.enqueue(.subscribed(push: push))
        XCTAssertTrue(MemoryProbe.resetPeak() || MemoryProbe.peakKiB == nil, "cannot reset VmHWM on this machine", file: file, line: line)
        let baseline = MemoryProbe.residentKiB
        let (confirmations, confirmed) = AsyncStream<Void>.makeStream()
        let start = ContinuousClock.now
        let stream = redis.subscribe(to: "news", onSubscribed: { confirmed.yield() })
        let reader = Task { () -> Data? in
            for try await message in stream { return message }
            return nil
        }
        // A deadline: a subscription that holds a hostile push for good fails here.
        let watchdog = Task {
            try await Task.sleep(for: within)
            reader.cancel()
        }
        let message = try? await reader.value
        watchdog.cancel()
        let elapsed = start.duration(to: .now)
        confirmed.finish()
        var count = 0
        for await _ in confirmations { count += 1 }
        var growth: Int?
        if let baseline, let peak = MemoryProbe.peakKiB { growth = (peak - baseline) / 1024 }
        let greeted = message == Data(HostileRedisServer.greeting.utf8)
        XCTAssertTrue(greeted, "\(name): no greeting within \(within)", file: file, line: line)
        XCTAssertEqual(count, 2, "\(name): subscribed on the hostile connection, then on a new one", file: file, line: line)
        let bounded = growth.map { $0 <= Self.growthLimitMiB } ?? true
        XCTAssertTrue(bounded, "\(name): the peak resident set grew \(growth ?? 0) MiB", file: file, line: line)
        printFigures(
            "figures: hostile subscription, \(name): resubscribed in \(elapsed), peak growth \(growth.map { "\($0) MiB" } ?? "not measured")"
        )
        return greeted && count == 2 && bounded
    }

    /// Pushes that are not RESP, huge, endless or dripped: the subscription's connection is
    /// closed and replaced within the reply timeout and a back-off, its memory bounded. Before
    /// the limits a message of 500 MB was read (+546 MiB), an endless push grew the process by
    /// 2.5 GiB in 5 s, and neither it, the array nor the drip ended within 5 s (the health check
    /// came after 15 s of silence, and they were not silent).
    func testHostilePushesReconnectTheSubscription() async throws {
        let channel = "news"
        let message = Array("*3\r\n".utf8) + HostileRedisServer.bulk("message") + HostileRedisServer.bulk(channel)
        let huge = HostileReplies.hugeBulk(announced: 500_000_000)
        let endless = HostileReplies.endless()
        let cases: [(String, HostileRedisServer.Behaviour)] = [
            ("malformed", .reply(Array("?what\r\n".utf8))),
            ("a message of 500 MB", .stream(head: message + huge.head, chunk: huge.chunk)),
            ("an endless push", .stream(head: endless.head, chunk: endless.chunk)),
            (
                "an array of 60 million",
                .stream(head: HostileReplies.hugeArray(announced: 60_000_000).head, chunk: HostileReplies.hugeArray(announced: 1).chunk)
            ),
            (
                "a dripped message",
                .drip(message + HostileRedisServer.bulk([UInt8](repeating: 100, count: 1 << 20)), piece: 4096, interval: .milliseconds(20))
            ),
        ]
        for (name, push) in cases {
            try await hostileSubscription(push, within: .seconds(5), name)
        }
    }

    /// Messages published faster than anyone reads them (64 KiB each, for 3 s or 1 GiB): the
    /// subscription stops reading once it holds a reply's size of unread messages, so memory
    /// stays bounded (+1,014 MiB for the 1 GiB sent before the limits), and the reader then gets
    /// every message, in order, none dropped.
    func testAFloodNobodyReadsKeepsMemoryBounded() async throws {
        let redis = client()
        server.enqueue(.flood(size: 64 * 1024, duration: .seconds(3), maximumBytes: 1 << 30))
        XCTAssertTrue(MemoryProbe.resetPeak() || MemoryProbe.peakKiB == nil, "cannot reset VmHWM on this machine")
        let baseline = MemoryProbe.residentKiB
        let (confirmations, confirmed) = AsyncStream<Void>.makeStream()
        let stream = redis.subscribe(to: "flood", onSubscribed: { confirmed.yield() })
        var subscribed = confirmations.makeAsyncIterator()
        _ = await subscribed.next()
        // Nobody reads until the server's flood has ended (an event, with a deadline).
        let floods = server.floodsEnded(1, within: 20)
        let sent = try XCTUnwrap(floods?.first, "the flood did not end")
        var growth: Int?
        if let baseline, let peak = MemoryProbe.peakKiB { growth = (peak - baseline) / 1024 }
        if let growth { XCTAssertLessThanOrEqual(growth, Self.growthLimitMiB, "the peak resident set grew \(growth) MiB") }
        printFigures(
            "figures: hostile flood: \(sent.sent) messages (\(sent.bytes / 1_048_576) MiB) sent, peak growth \(growth.map { "\($0) MiB" } ?? "not measured")"
        )
        // Then every message arrives, numbered without a gap, and the last.
        let reader = Task { () -> (count: Int, last: String?) in
            var count = 0
            for try await message in stream {
                let text = String(decoding: message.prefix(32), as: UTF8.self)
                if text.hasPrefix("last:") { return (count, text) }
                guard text.hasPrefix("seq:\(count):") else { return (count, "out of order: \(text)") }
                count += 1
            }
            return (count, nil)
        }
        let watchdog = Task {
            try await Task.sleep(for: .seconds(20))
            reader.cancel()
        }
        let read = try await reader.value
        watchdog.cancel()
        XCTAssertEqual(read.last, "last:\(sent.sent)")
        XCTAssertEqual(read.count, sent.sent)
    }

    // MARK: - A deep array, in a child process

    /// An array 100,000 levels deep, on the command connection and on a subscription's: a
    /// typed error (a reconnect for the subscription), no crash. Run in a child process: before
    /// the depth limit, releasing (or printing) such a value overflowed the stack and killed the
    /// process.
    func testADeepArrayIsRefusedWithoutACrash() throws {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("hostile-child-\(UUID().uuidString.prefix(8)).txt")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: output) }
        let handle = try FileHandle(forWritingTo: output)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = ["URLTaskRedisTests.HostileRedisTests/testChild"]
        process.environment = ProcessInfo.processInfo.environment.merging([Self.childVariable: "deep"]) { $1 }
        process.standardOutput = handle
        process.standardError = handle
        let exited = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
        let ended = exited.wait(timeout: .now() + 60) == .success
        if !ended { process.terminate() }
        try? handle.close()
        let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        let tail = text.split(separator: "\n").suffix(30).joined(separator: "\n")
        XCTAssertTrue(ended, "the child did not end within 60 s:\n\(tail)")
        guard ended else { return }
        XCTAssertEqual(process.terminationReason, .exit, "the child crashed (signal \(process.terminationStatus)):\n\(tail)")
        XCTAssertEqual(process.terminationStatus, 0, "the child failed:\n\(tail)")
        let result = text.split(separator: "\n").first { $0.hasPrefix("HOSTILE-RESULT") }.map(String.init)
        let figures = Dictionary(
            (result ?? "").split(separator: " ").dropFirst().compactMap { pair -> (String, String)? in
                let parts = pair.split(separator: "=", maxSplits: 1)
                return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
            }, uniquingKeysWith: { $1 })
        XCTAssertEqual(figures["command"], "protocolViolation", "\(result ?? "no result line"):\n\(tail)")
        XCTAssertEqual(figures["subscription"], "resubscribed", "\(result ?? "no result line"):\n\(tail)")
        if let growth = figures["growthMiB"].flatMap({ Int($0) }) { XCTAssertLessThanOrEqual(growth, Self.growthLimitMiB) }
        printFigures("figures: hostile deep array, in a child: \(result ?? "-")")
    }

    /// The child's body when ``childVariable`` is set; nothing in an ordinary run. Prints
    /// `HOSTILE-RESULT command=<the error's kind, or value> subscription=<resubscribed or
    /// failed> growthMiB=<n>`.
    func testChild() async throws {
        guard ProcessInfo.processInfo.environment[Self.childVariable] == "deep" else { return }
        let deep = HostileReplies.deepArray(levels: 100_000)
        let outcome = try await hostileCommand(.reply(deep))
        if let value = outcome.value {
            // What a caller that logs its replies does with one.
            print("HOSTILE-VALUE \(String(describing: value).count) characters")
        }
        let resubscribed = try await hostileSubscription(.reply(deep), within: .seconds(5), "100,000 levels deep")
        print(
            "HOSTILE-RESULT command=\(outcome.error.map { "\($0.kind)" } ?? "value") subscription=\(resubscribed ? "resubscribed" : "failed") "
                + "growthMiB=\(outcome.growthMiB.map(String.init) ?? "-")")
    }
}
