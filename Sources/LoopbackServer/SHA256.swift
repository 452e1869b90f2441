import Foundation
import URLTaskCrypto

/// A dependency-free, incremental SHA-256 (FIPS 180-4), so request and response bodies of any
/// size can be fingerprinted while streaming, on every platform, without CryptoKit or OpenSSL.
///
/// The package's one SHA-256, the same code that makes URLTaskManager's trace ids and
/// URLTaskOAuth2's PKCE challenges.
public struct SHA256: Sendable {
    private var hasher = SHA256Hasher()

    /// Starts a new, empty digest.
    public init() {}

    /// Feeds more message bytes; call as often as needed, in order.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        hasher.update(bytes)
    }

    /// Feeds the bytes of `data`.
    public mutating func update(data: Data) {
        data.withUnsafeBytes { hasher.update($0) }
    }

    /// Feeds the bytes of an array (convenient for `GeneratedBody.bytes`).
    public mutating func update(bytes: [UInt8]) {
        bytes.withUnsafeBytes { hasher.update($0) }
    }

    /// The 32-byte digest of everything fed so far; the receiver is left untouched so hashing can go on.
    public func finalize() -> [UInt8] {
        hasher.finalize()
    }

    /// The digest as 64 lowercase hex characters, the form `RecordedRequest.bodySHA256` uses.
    public func hexDigest() -> String {
        SHA256.hex(bytes: finalize())
    }

    /// Lowercase hex SHA-256 of `data` in one call.
    public static func hex(_ data: Data) -> String {
        var hasher = SHA256()
        hasher.update(data: data)
        return hasher.hexDigest()
    }

    /// Lowercase hex encoding of arbitrary bytes (for example a `finalize()` result).
    public static func hex(bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
