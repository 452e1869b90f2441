import Foundation
import XCTest

@testable import URLTaskRedis

/// The parser alone, no I/O: every reply type, whole and split at every byte.
final class RESPParserTests: XCTestCase {
    private let samples: [(bytes: String, value: RESPValue)] = [
        ("+OK\r\n", .simpleString("OK")),
        ("-ERR unknown command\r\n", .error("ERR unknown command")),
        (":-42\r\n", .integer(-42)),
        ("$5\r\nhe\r\no\r\n", .bulkString(Data("he\r\no".utf8))),
        ("$0\r\n\r\n", .bulkString(Data())),
        ("$-1\r\n", .bulkString(nil)),
        ("*-1\r\n", .array(nil)),
        ("*0\r\n", .array([])),
        (
            "*3\r\n:1\r\n*2\r\n+a\r\n$1\r\nb\r\n$-1\r\n",
            .array([.integer(1), .array([.simpleString("a"), .bulkString(Data("b".utf8))]), .bulkString(nil)])
        ),
        ("_\r\n", .null),
        ("#t\r\n", .boolean(true)),
        ("#f\r\n", .boolean(false)),
        (",3.5\r\n", .double(3.5)),
        ("%1\r\n+k\r\n:1\r\n", .array([.simpleString("k"), .integer(1)])),
        ("~2\r\n:1\r\n:2\r\n", .array([.integer(1), .integer(2)])),
        (">2\r\n+message\r\n$1\r\nx\r\n", .array([.simpleString("message"), .bulkString(Data("x".utf8))])),
        ("=8\r\ntxt:some\r\n", .bulkString(Data("some".utf8))),
        ("!5\r\nERR x\r\n", .error("ERR x")),
        ("|1\r\n+key\r\n+attr\r\n:7\r\n", .integer(7)),
    ]

    func testEveryReplyTypeWhole() throws {
        for sample in samples {
            var parser = RESPParser()
            parser.append(Array(sample.bytes.utf8))
            XCTAssertEqual(try parser.next(), sample.value, sample.bytes)
            XCTAssertNil(try parser.next())
            XCTAssertFalse(parser.isMidReply)
        }
    }

    func testEveryReplySplitAtEveryByte() throws {
        let all = samples.map(\.bytes).joined()
        var parser = RESPParser()
        var values: [RESPValue] = []
        for byte in Array(all.utf8) {
            parser.append([byte])
            while let value = try parser.next() { values.append(value) }
        }
        XCTAssertEqual(values, samples.map(\.value))
        XCTAssertFalse(parser.isMidReply)
    }

    func testEverySplitPointOfOneReply() throws {
        let bytes = Array("*2\r\n$3\r\nfoo\r\n*1\r\n:10\r\n".utf8)
        for cut in 0...bytes.count {
            var parser = RESPParser()
            parser.append(bytes[0..<cut])
            if cut < bytes.count { XCTAssertNil(try parser.next(), "cut at \(cut)") }
            parser.append(bytes[cut...])
            XCTAssertEqual(try parser.next(), .array([.bulkString(Data("foo".utf8)), .array([.integer(10)])]), "cut at \(cut)")
        }
    }

    func testManyRepliesInOneRead() throws {
        var parser = RESPParser()
        parser.append(Array(String(repeating: "+PONG\r\n", count: 1000).utf8))
        var count = 0
        while try parser.next() != nil { count += 1 }
        XCTAssertEqual(count, 1000)
    }

    func testBytesThatAreNotRESPAreAViolationForGood() {
        for bad in ["?x\r\n", ":12a\r\n", "$3\r\nabcd\r\n", "$-5\r\n", "#x\r\n", "\r\n"] {
            var parser = RESPParser()
            parser.append(Array(bad.utf8))
            XCTAssertThrowsError(try parser.next(), bad) { XCTAssertEqual(($0 as? RedisError)?.kind, .protocolViolation) }
            parser.append(Array("+OK\r\n".utf8))
            XCTAssertThrowsError(try parser.next(), bad)
        }
    }

    func testALineWithoutAnEndIsAViolationPastTheLimit() {
        var parser = RESPParser()
        parser.append([UInt8(ascii: "+")] + [UInt8](repeating: 65, count: RESPParser.maximumLineLength + 1))
        XCTAssertThrowsError(try parser.next())
    }

    /// Random bytes and mangled replies, in random pieces: the parser returns values or throws,
    /// and never traps or loops.
    func testGarbageNeverCrashes() {
        var generator = SplitMix(seed: 39)
        let valid = Array(samples.map(\.bytes).joined().utf8)
        for round in 0..<2000 {
            var bytes: [UInt8]
            if round % 2 == 0 {
                bytes = (0..<Int(generator.next() % 64)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            } else {
                bytes = valid
                for _ in 0..<3 { bytes[Int(generator.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: generator.next()) }
            }
            var parser = RESPParser()
            var offset = 0
            parsing: while offset < bytes.count {
                let size = min(bytes.count - offset, 1 + Int(generator.next() % 8))
                parser.append(bytes[offset..<(offset + size)])
                offset += size
                do {
                    while try parser.next() != nil {}
                } catch {
                    break parsing
                }
            }
        }
    }

    func testEncoderWritesArraysOfBulkStrings() {
        var bytes: [UInt8] = []
        RESPEncoder.append(["SET", "k", "v\r\n"], to: &bytes)
        XCTAssertEqual(String(decoding: bytes, as: UTF8.self), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n")
    }

    func testSHA1MatchesKnownDigests() {
        XCTAssertEqual(SHA1.hex([]), "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        XCTAssertEqual(SHA1.hex(Array("abc".utf8)), "a9993e364706816aba3e25717850c26c9cd0d89d")
        XCTAssertEqual(
            SHA1.hex(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)), "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
        XCTAssertEqual(SHA1.hex(Array(repeating: UInt8(ascii: "a"), count: 1_000_000)), "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
        XCTAssertEqual(RedisScript("return 1").sha1, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db")
    }

    func testErrorsNameTheCommandOnly() {
        let error = RedisError.reply("ERR unknown command 'x', with args beginning with: 'hunter2'", command: "X")
        XCTAssertEqual(error.kind, .reply(code: "ERR"))
        XCTAssertFalse(error.description.contains("hunter2"))
    }

    func testBackOffDoublesToTheMaximum() {
        let lifecycle = ConnectionLifecycle<NSObject, Int>(reconnectDelay: .milliseconds(50), maximumReconnectDelay: .milliseconds(300))
        XCTAssertEqual((1...5).map { lifecycle.delay(afterFailures: $0) }, [50, 100, 200, 300, 300].map { .milliseconds($0) })
    }

    func testLifecycleWaitsDuringAnAttemptAndFailsFastWhileBackingOff() {
        var lifecycle = ConnectionLifecycle<NSObject, Int>(reconnectDelay: .milliseconds(100), maximumReconnectDelay: .seconds(1))
        let start = ContinuousClock.now
        guard case .connect = lifecycle.acquire(1, now: start) else { return XCTFail("the first command connects") }
        guard case .wait = lifecycle.acquire(2, now: start) else { return XCTFail("the second waits for the attempt") }
        XCTAssertEqual(lifecycle.connectFailed(now: start), [1, 2])
        guard case .failBackingOff = lifecycle.acquire(3, now: start + .milliseconds(50)) else { return XCTFail("backing off") }
        guard case .connect = lifecycle.acquire(4, now: start + .milliseconds(100)) else { return XCTFail("due again") }
        let connection = NSObject()
        XCTAssertEqual(lifecycle.connected(connection), [4])
        guard case .use(let used) = lifecycle.acquire(5, now: start), used === connection else { return XCTFail("ready") }
        lifecycle.lost(connection)
        guard case .connect = lifecycle.acquire(6, now: start) else { return XCTFail("a lost connection reconnects at once") }
        XCTAssertEqual(lifecycle.close().waiters, [6])
        guard case .failClosed = lifecycle.acquire(7, now: start) else { return XCTFail("closed") }
    }
}

/// The parser's two bounds on a reply (depth and held size), and the subscription's bound on
/// the messages its reader has not taken: pure state machines, no I/O.
final class RESPLimitTests: XCTestCase {
    private func deep(_ levels: Int) -> [UInt8] { HostileReplies.deepArray(levels: levels) }

    private func assertViolation(
        _ parser: inout RESPParser, naming setting: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertThrowsError(try parser.next(), file: file, line: line) { error in
            XCTAssertEqual((error as? RedisError)?.kind, .protocolViolation, file: file, line: line)
            XCTAssertEqual((error as? RedisError)?.message.contains(setting), true, "\(error)", file: file, line: line)
        }
        // Final: the stream cannot be resynchronised.
        parser.append(Array("+OK\r\n".utf8))
        XCTAssertThrowsError(try parser.next(), file: file, line: line)
    }

    func testADefaultParserTakes32LevelsAndRefusesThe33rd() throws {
        var within = RESPParser()
        within.append(deep(32))
        var value = try XCTUnwrap(within.next())
        for _ in 0..<32 {
            guard case .array(let elements?) = value, elements.count == 1 else { return XCTFail("not 32 arrays deep") }
            value = elements[0]
        }
        XCTAssertEqual(value, .integer(1))
        var past = RESPParser()
        past.append(deep(33))
        assertViolation(&past, naming: "maximumReplyDepth (32 levels)")
        // 100,000 levels: refused at the 33rd header, before the rest is read.
        var hostile = RESPParser()
        hostile.append(deep(100_000))
        assertViolation(&hostile, naming: "maximumReplyDepth")
    }

    func testTheDepthIsConfigurableUpToItsCeiling() throws {
        var shallow = RESPParser(maximumDepth: 2)
        shallow.append(Array("*1\r\n*1\r\n:1\r\n".utf8))
        XCTAssertEqual(try shallow.next(), .array([.array([.integer(1)])]))
        shallow.append(Array("*1\r\n*1\r\n*1\r\n:1\r\n".utf8))
        assertViolation(&shallow, naming: "maximumReplyDepth (2 levels)")
        // Maps, sets, pushes and attributes are levels too.
        var mixed = RESPParser(maximumDepth: 2)
        mixed.append(Array("%1\r\n+k\r\n~1\r\n>1\r\n:1\r\n".utf8))
        assertViolation(&mixed, naming: "maximumReplyDepth")
        let ceiling = RedisClient.Configuration.maximumReplyDepthCeiling
        var deepest = RESPParser(maximumDepth: 1_000_000)
        XCTAssertEqual(deepest.maximumDepth, ceiling)
        deepest.append(deep(ceiling))
        XCTAssertNotNil(try deepest.next())
        deepest.append(deep(ceiling + 1))
        assertViolation(&deepest, naming: "maximumReplyDepth (\(ceiling) levels)")
    }

    /// The deepest value a client can be set to accept is compared, printed, dumped and released
    /// on a thread with a 512 KiB stack (Darwin's default for a secondary thread): the ceiling
    /// keeps every recursion over a value (the synthesized `==`, reflection, the nested enum's
    /// release) within such a stack. A 100,000-deep value overflowed an 8 MiB one.
    func testTheDeepestValueAllowedIsSafeOnASmallStack() {
        let levels = RedisClient.Configuration.maximumReplyDepthCeiling
        @Sendable func build() -> RESPValue {
            var value = RESPValue.bulkString(Data("leaf".utf8))
            for _ in 0..<levels { value = .array([value, .integer(7)]) }
            return value
        }
        let done = DispatchSemaphore(value: 0)
        let results = LockedBox()
        let thread = Thread {
            var first: RESPValue? = build()
            var second: RESPValue? = build()
            let equal = first == second
            let described = String(describing: first!).count
            var dumped = ""
            dump(first!, to: &dumped)
            first = nil
            second = nil
            results.set(equal: equal, described: described, dumped: dumped.count)
            done.signal()
        }
        thread.stackSize = 512 * 1024
        thread.start()
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        let (equal, described, dumped) = results.get()
        XCTAssertTrue(equal)
        XCTAssertGreaterThan(described, levels)
        XCTAssertGreaterThan(dumped, levels)
    }

    func testAReplyLargerThanTheSizeIsRefusedAtItsHeader() throws {
        let limit = 64 * 1024
        // A bulk string announced past the limit: refused with its header alone.
        var bulk = RESPParser(maximumSize: limit)
        bulk.append(Array("$\(limit + 1)\r\n".utf8))
        assertViolation(&bulk, naming: "maximumReplySize (64 KiB)")
        // An array whose slots alone pass it (24 bytes an element here).
        var array = RESPParser(maximumSize: limit)
        array.append(Array("*\(limit / RESPParser.elementSize)\r\n".utf8))
        assertViolation(&array, naming: "maximumReplySize")
        // Gigabytes announced: the same error, not the absolute caps'.
        for header in ["$4294967296\r\n", "*4294967296\r\n", "%4611686018427387904\r\n"] {
            var huge = RESPParser()
            huge.append(Array(header.utf8))
            assertViolation(&huge, naming: "maximumReplySize (16 MiB)")
        }
        // Within it: read.
        var fits = RESPParser(maximumSize: limit)
        let body = [UInt8](repeating: 120, count: limit - RESPParser.allocationOverhead)
        fits.append(HostileRedisServer.bulk(body))
        XCTAssertEqual(try fits.next(), .bulkString(Data(body)))
        XCTAssertEqual(fits.heldByteCount, 0)
    }

    /// What counts is what the reply holds while it is read: its arrays' storage and the
    /// strings already placed in them, not only the bytes buffered. Each header below fits; the
    /// reply as a whole does not.
    func testTheArraysBeingBuiltCountTowardTheSize() throws {
        let limit = 64 * 1024
        var nested = RESPParser(maximumSize: limit)
        // 100 arrays of 100 integers: about 100 × 2.4 KB of slots.
        let inner = "*100\r\n" + String(repeating: ":1\r\n", count: 100)
        nested.append(Array(("*100\r\n" + String(repeating: inner, count: 100)).utf8))
        assertViolation(&nested, naming: "maximumReplySize")
        // An array of simple strings, each line far below the line limit.
        var lines = RESPParser(maximumSize: limit)
        let line = "+" + String(repeating: "s", count: 1000) + "\r\n"
        lines.append(Array(("*100\r\n" + String(repeating: line, count: 100)).utf8))
        assertViolation(&lines, naming: "maximumReplySize")
        // The same replies within a larger limit, and the count back to zero after each.
        var roomy = RESPParser(maximumSize: 1 << 20)
        roomy.append(Array(("*100\r\n" + String(repeating: inner, count: 100)).utf8))
        XCTAssertEqual(try roomy.next()?.array?.count, 100)
        XCTAssertEqual(roomy.heldByteCount, 0)
        roomy.append(Array(("*100\r\n" + String(repeating: line, count: 100)).utf8))
        XCTAssertEqual(try roomy.next()?.array?.count, 100)
    }

    /// A bulk string arriving in pieces is counted at its header and moved out of the read
    /// buffer as it comes: the buffer holds no more than a piece, and the value is whole.
    func testABulkStringInPiecesIsHeldOnce() throws {
        var parser = RESPParser()
        let body = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let bytes = HostileRedisServer.bulk(body)
        var offset = 0
        var value: RESPValue?
        while offset < bytes.count {
            let end = min(bytes.count, offset + 65_536)
            parser.append(bytes[offset..<end])
            offset = end
            value = try parser.next()
            if value == nil {
                XCTAssertEqual(parser.heldByteCount, body.count + RESPParser.allocationOverhead)
                XCTAssertLessThanOrEqual(parser.bufferedByteCount, offset)
            }
        }
        XCTAssertEqual(value, .bulkString(Data(body)))
        XCTAssertFalse(parser.isMidReply)
    }

    // MARK: - The subscription's unread messages

    func testTheSubscriptionPausesAtItsBudgetAndResumesAtHalf() {
        let message = Data(repeating: 1, count: 1000)
        let cost = SubscriptionBuffer<Int>.cost(of: message)
        var buffer = SubscriptionBuffer<Int>(budget: cost * 4)
        for _ in 0..<3 {
            guard case .buffered = buffer.messageArrived(message) else { return XCTFail("below the budget: buffered") }
        }
        guard case .pause = buffer.messageArrived(message) else { return XCTFail("at the budget: pause") }
        XCTAssertTrue(buffer.isProducerPaused)
        XCTAssertEqual(buffer.heldBytes, cost * 4)
        guard case .deliver(_, wakeProducer: false) = buffer.nextRequested(1) else { return XCTFail("3 left: no wake yet") }
        guard case .deliver(_, wakeProducer: false) = buffer.nextRequested(1) else { return XCTFail("2 left: half, not below") }
        guard case .deliver(_, wakeProducer: true) = buffer.nextRequested(1) else { return XCTFail("1 left: wake") }
        XCTAssertFalse(buffer.isProducerPaused)
        guard case .deliver(_, wakeProducer: false) = buffer.nextRequested(1) else { return XCTFail("the last") }
        guard case .wait = buffer.nextRequested(2) else { return XCTFail("empty: wait") }
        guard case .resume(2) = buffer.messageArrived(message) else { return XCTFail("a waiting reader gets it at once") }
        XCTAssertEqual(buffer.heldBytes, 0)
    }

    func testTheSubscriptionsEndComesAfterItsMessagesAndItsErrorOnce() {
        var buffer = SubscriptionBuffer<Int>(budget: 1 << 20)
        _ = buffer.messageArrived(Data("a".utf8))
        XCTAssertNil(buffer.ended(RedisError.closed("refused")), "no reader waits")
        guard case .drop = buffer.messageArrived(Data("late".utf8)) else { return XCTFail("after the end: dropped") }
        guard case .deliver(let first, _) = buffer.nextRequested(1), first == Data("a".utf8) else { return XCTFail("the message first") }
        guard case .finish(let error?) = buffer.nextRequested(1), (error as? RedisError)?.message == "refused" else {
            return XCTFail("then the error")
        }
        guard case .finish(nil) = buffer.nextRequested(1) else { return XCTFail("then the end, without the error again") }
        var waiting = SubscriptionBuffer<Int>(budget: 1 << 20)
        guard case .wait = waiting.nextRequested(7) else { return XCTFail("wait") }
        XCTAssertEqual(waiting.ended(nil)?.waiter, 7)
    }

    func testALeavingReaderDropsTheMessagesAndWakesNobodyTwice() {
        var buffer = SubscriptionBuffer<Int>(budget: 10)
        guard case .pause = buffer.messageArrived(Data(repeating: 0, count: 100)) else { return XCTFail("over the budget") }
        XCTAssertNil(buffer.cancelled())
        XCTAssertFalse(buffer.isProducerPaused)
        XCTAssertEqual(buffer.heldBytes, 0)
        guard case .drop = buffer.messageArrived(Data("x".utf8)) else { return XCTFail("nobody reads: dropped") }
        guard case .finish(nil) = buffer.nextRequested(1) else { return XCTFail("ended") }
        var waiting = SubscriptionBuffer<Int>(budget: 10)
        _ = waiting.nextRequested(3)
        XCTAssertEqual(waiting.cancelled(), 3)
    }
}

/// A result handed from a thread to the test, under a lock.
private final class LockedBox: @unchecked Sendable {  // `values` is read and written under `lock`.
    private let lock = NSLock()
    private var values = (equal: false, described: 0, dumped: 0)

    func set(equal: Bool, described: Int, dumped: Int) { lock.withLock { values = (equal, described, dumped) } }
    func get() -> (Bool, Int, Int) { lock.withLock { values } }
}

/// The Redis URL a fleet's processes share.
final class RedisConfigurationURLTests: XCTestCase {
    func testRedisURLs() throws {
        let full = try XCTUnwrap(RedisClient.Configuration(url: URL(string: "redis://fleet:p%40ss@127.0.0.1:6390/3")!))
        XCTAssertEqual(full.endpoint, .tcp(host: "127.0.0.1", port: 6390))
        XCTAssertEqual(full.username, "fleet")
        XCTAssertEqual(full.password, "p@ss")
        XCTAssertEqual(full.database, 3)
        let passwordOnly = try XCTUnwrap(RedisClient.Configuration(url: URL(string: "redis://:secret@redis.internal")!))
        XCTAssertEqual(passwordOnly.endpoint, .tcp(host: "redis.internal", port: 6379))
        XCTAssertNil(passwordOnly.username)
        XCTAssertEqual(passwordOnly.password, "secret")
        XCTAssertEqual(passwordOnly.database, 0)
        let unix = try XCTUnwrap(RedisClient.Configuration(url: URL(string: "unix:///tmp/redis.sock?db=2")!))
        XCTAssertEqual(unix.endpoint, .unixSocket(path: "/tmp/redis.sock"))
        XCTAssertEqual(unix.database, 2)
        XCTAssertEqual(RedisClient.Configuration(url: URL(string: "redis://[::1]:7000")!)?.endpoint, .tcp(host: "::1", port: 7000))
        XCTAssertNil(RedisClient.Configuration(url: URL(string: "rediss://host")!))
        XCTAssertNil(RedisClient.Configuration(url: URL(string: "redis://host/x")!))
        XCTAssertNil(RedisClient.Configuration(url: URL(string: "http://host")!))
    }
}

/// A small deterministic generator for the fuzz test (SplitMix64).
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
