import Foundation
import LoopbackServer
import XCTest

/// Known-answer and streaming tests for the bundled SHA-256 and the generated body pattern.
final class SHA256Tests: XCTestCase {
    func testKnownVectors() {
        XCTAssertEqual(SHA256.hex(Data()), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(SHA256.hex(Data("abc".utf8)), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(
            SHA256.hex(Data("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        )
    }

    func testMillionA() {
        var hasher = SHA256()
        let block = Data(repeating: UInt8(ascii: "a"), count: 1000)
        for _ in 0..<1000 { hasher.update(data: block) }
        XCTAssertEqual(hasher.hexDigest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    func testIncrementalSplitsMatchOneShot() {
        let bytes = GeneratedBody.bytes(offset: 0, count: 1000)
        let expected = SHA256.hex(Data(bytes))
        for split in [0, 1, 55, 56, 63, 64, 65, 127, 128, 500, 999, 1000] {
            var hasher = SHA256()
            hasher.update(bytes: Array(bytes[..<split]))
            hasher.update(bytes: Array(bytes[split...]))
            XCTAssertEqual(hasher.hexDigest(), expected, "split at \(split)")
        }
        var byteByByte = SHA256()
        for byte in bytes { byteByByte.update(bytes: [byte]) }
        XCTAssertEqual(byteByByte.hexDigest(), expected)
    }

    func testFinalizeDoesNotConsumeState() {
        var hasher = SHA256()
        hasher.update(data: Data("ab".utf8))
        _ = hasher.finalize()
        hasher.update(data: Data("c".utf8))
        XCTAssertEqual(hasher.hexDigest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    func testGeneratedBodyIsDeterministicAndOffsetConsistent() {
        let whole = GeneratedBody.bytes(offset: 0, count: 200_000)
        XCTAssertEqual(GeneratedBody.bytes(offset: 70_000, count: 1000), Array(whole[70_000..<71_000]))
        XCTAssertEqual(GeneratedBody.sha256(length: 200_000), SHA256.hex(Data(whole)))
        XCTAssertEqual(whole[0], 0)
        XCTAssertEqual(whole[251], 0)
        XCTAssertEqual(whole[65_536], UInt8(truncatingIfNeeded: 65_536 % 251 + 1))
    }
}
