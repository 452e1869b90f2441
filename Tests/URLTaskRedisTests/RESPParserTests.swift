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
