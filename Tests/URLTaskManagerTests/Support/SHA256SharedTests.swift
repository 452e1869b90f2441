import Foundation
import LoopbackServer
import URLTaskCrypto
import XCTest

/// The package's one SHA-256 (URLTaskCrypto's `SHA256Hasher`) through its three doors: the
/// one-shot `SHA256Digest.hash(_:)` (PKCE, trace ids), LoopbackServer's public `SHA256` and the
/// hasher itself agree, whatever the length and however the message is split or stored.
final class SHA256SharedTests: XCTestCase {
    func testTheThreeDoorsAgreeAcrossBlockBoundaries() {
        let bytes = GeneratedBody.bytes(offset: 0, count: 300)
        for length in [0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 300] {
            let message = Array(bytes[..<length])
            let oneShot = SHA256Digest.hash(message)
            XCTAssertEqual(SHA256.hex(bytes: oneShot), SHA256.hex(Data(message)), "length \(length)")
            var hasher = SHA256Hasher()
            message.withUnsafeBytes { all in
                for start in stride(from: 0, to: all.count, by: 7) {
                    hasher.update(UnsafeRawBufferPointer(rebasing: all[start..<min(start + 7, all.count)]))
                }
            }
            XCTAssertEqual(hasher.finalize(), oneShot, "length \(length), pieces of 7 bytes")
        }
    }

    func testANonContiguousMessageHashesAsItsBytes() {
        let lazy = (0..<1_000).lazy.map { UInt8(truncatingIfNeeded: $0 % 251) }
        XCTAssertEqual(SHA256Digest.hash(lazy), SHA256Digest.hash(Array(lazy)))
        XCTAssertEqual(
            RandomBytes.hex(SHA256Digest.hash(Data("abc".utf8))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}
