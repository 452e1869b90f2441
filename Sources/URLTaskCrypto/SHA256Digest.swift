import Foundation

/// SHA-256 (FIPS 180-4) with no dependency: the package's one implementation. CryptoKit is not on
/// Linux and the package takes no dependency, so this is the whole of it. URLTaskManager and
/// URLTaskOAuth2 use the one-shot ``SHA256Digest/hash(_:)`` (a PKCE code challenge, RFC 7636
/// §4.2, and a task's trace id); LoopbackServer's public `SHA256` wraps ``SHA256Hasher`` to
/// fingerprint bodies of any size while they stream.
public enum SHA256Digest {
    /// The 32-byte digest of `message`.
    public static func hash(_ message: some Collection<UInt8>) -> [UInt8] {
        var hasher = SHA256Hasher()
        let contiguous: Void? = message.withContiguousStorageIfAvailable { hasher.update(UnsafeRawBufferPointer($0)) }
        if contiguous == nil {
            Array(message).withUnsafeBytes { hasher.update($0) }
        }
        return hasher.finalize()
    }
}

/// An incremental SHA-256: feed the message in pieces of any size with ``update(_:)``, then read
/// the digest with ``finalize()``.
public struct SHA256Hasher: Sendable {
    private var h0: UInt32 = 0x6a09_e667
    private var h1: UInt32 = 0xbb67_ae85
    private var h2: UInt32 = 0x3c6e_f372
    private var h3: UInt32 = 0xa54f_f53a
    private var h4: UInt32 = 0x510e_527f
    private var h5: UInt32 = 0x9b05_688c
    private var h6: UInt32 = 0x1f83_d9ab
    private var h7: UInt32 = 0x5be0_cd19
    /// The bytes of an incomplete block, fewer than 64.
    private var pending: [UInt8] = []
    private var totalLength: UInt64 = 0

    /// Starts a new, empty digest.
    public init() {}

    /// Feeds more message bytes; call as often as needed, in order.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard var input = bytes.baseAddress, bytes.count > 0 else { return }
        var remaining = bytes.count
        totalLength &+= UInt64(remaining)
        if !pending.isEmpty {
            let take = min(64 - pending.count, remaining)
            pending.append(contentsOf: UnsafeRawBufferPointer(start: input, count: take))
            input += take
            remaining -= take
            if pending.count < 64 { return }
            let block = pending
            pending.removeAll(keepingCapacity: true)
            block.withUnsafeBytes { compress($0.baseAddress!, blocks: 1) }
        }
        let whole = remaining / 64
        if whole > 0 {
            compress(input, blocks: whole)
            input += whole * 64
            remaining -= whole * 64
        }
        if remaining > 0 {
            pending.append(contentsOf: UnsafeRawBufferPointer(start: input, count: remaining))
        }
    }

    /// The 32-byte digest of everything fed so far; the receiver is left untouched so hashing can
    /// go on.
    public func finalize() -> [UInt8] {
        var copy = self
        // The padding: 0x80, zeros up to 56 bytes into a block, the message's length in bits.
        var tail: [UInt8] = [0x80]
        let used = Int(totalLength % 64)
        tail.append(contentsOf: repeatElement(0, count: used < 56 ? 55 - used : 119 - used))
        let bits = totalLength &* 8
        for shift in stride(from: 56, through: 0, by: -8) {
            tail.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift)))
        }
        tail.withUnsafeBytes { copy.update($0) }
        var digest: [UInt8] = []
        digest.reserveCapacity(32)
        for word in [copy.h0, copy.h1, copy.h2, copy.h3, copy.h4, copy.h5, copy.h6, copy.h7] {
            digest.append(UInt8(truncatingIfNeeded: word >> 24))
            digest.append(UInt8(truncatingIfNeeded: word >> 16))
            digest.append(UInt8(truncatingIfNeeded: word >> 8))
            digest.append(UInt8(truncatingIfNeeded: word))
        }
        return digest
    }

    /// Runs the compression function on `blocks` whole 64-byte blocks at `input`.
    private mutating func compress(_ input: UnsafeRawPointer, blocks: Int) {
        var (h0, h1, h2, h3, h4, h5, h6, h7) = (self.h0, self.h1, self.h2, self.h3, self.h4, self.h5, self.h6, self.h7)
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { w in
            Self.roundConstants.withUnsafeBufferPointer { k in
                let w = w.baseAddress!
                let k = k.baseAddress!
                var block = input
                for _ in 0..<blocks {
                    for i in 0..<16 {
                        w[i] = UInt32(bigEndian: block.loadUnaligned(fromByteOffset: i * 4, as: UInt32.self))
                    }
                    for i in 16..<64 {
                        let x = w[i - 15], y = w[i - 2]
                        let s0 = (x >> 7 | x << 25) ^ (x >> 18 | x << 14) ^ (x >> 3)
                        let s1 = (y >> 17 | y << 15) ^ (y >> 19 | y << 13) ^ (y >> 10)
                        w[i] = w[i - 16] &+ s0 &+ w[i - 7] &+ s1
                    }
                    var a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7
                    for i in 0..<64 {
                        let s1 = (e >> 6 | e << 26) ^ (e >> 11 | e << 21) ^ (e >> 25 | e << 7)
                        let choice = (e & f) ^ (~e & g)
                        let t1 = h &+ s1 &+ choice &+ k[i] &+ w[i]
                        let s0 = (a >> 2 | a << 30) ^ (a >> 13 | a << 19) ^ (a >> 22 | a << 10)
                        let majority = (a & b) ^ (a & c) ^ (b & c)
                        let t2 = s0 &+ majority
                        h = g; g = f; f = e; e = d &+ t1
                        d = c; c = b; b = a; a = t1 &+ t2
                    }
                    h0 &+= a; h1 &+= b; h2 &+= c; h3 &+= d
                    h4 &+= e; h5 &+= f; h6 &+= g; h7 &+= h
                    block += 64
                }
            }
        }
        (self.h0, self.h1, self.h2, self.h3, self.h4, self.h5, self.h6, self.h7) = (h0, h1, h2, h3, h4, h5, h6, h7)
    }

    private static let roundConstants: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]
}

/// Random bytes and the encodings the OAuth2 and tracing code sends them in.
public enum RandomBytes {
    /// `count` bytes from the system's cryptographically secure generator (`getrandom` on
    /// Linux, `arc4random` on Apple platforms).
    public static func make(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in generator.next() }
    }

    /// Base64url without padding (RFC 4648 §5, RFC 7636 Appendix A).
    public static func base64URL(_ bytes: some Collection<UInt8>) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Lowercase hexadecimal, two digits a byte.
    public static func hex(_ bytes: some Collection<UInt8>) -> String {
        let digits = Array("0123456789abcdef")
        var text = ""
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return text
    }
}
