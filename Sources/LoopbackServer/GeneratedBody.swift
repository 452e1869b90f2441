/// The deterministic bytes a `.generated` response body produces, exposed so tests can compute the
/// expected content or SHA-256 without the server, and without ever holding a 100 MB body in memory.
///
/// Byte `i` is `(i % 251 + i >> 16) & 0xff`: the prime period catches shifted or duplicated ranges, the
/// high part catches whole dropped 64 KiB blocks.
public enum GeneratedBody {
    /// The bytes at `offset ..< offset + count` of the pattern.
    public static func bytes(offset: Int, count: Int) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            fill(UnsafeMutableRawBufferPointer(buffer), offset: offset)
            initialized = count
        }
    }

    /// Lowercase hex SHA-256 of the first `length` bytes of the pattern, computed in 64 KiB pieces.
    public static func sha256(length: Int) -> String {
        var hasher = SHA256()
        forEachPiece(length: length, pieceSize: 64 * 1024) { hasher.update($0) }
        return hasher.hexDigest()
    }

    /// Hands the first `length` bytes of the pattern to `body` in pieces of at most `pieceSize`
    /// bytes, in order, through one reused buffer: a 100 MB body is never in memory at once.
    /// The buffer is only valid during each call.
    public static func forEachPiece(length: Int, pieceSize: Int, _ body: (UnsafeRawBufferPointer) throws -> Void) rethrows {
        let piece = max(1, min(pieceSize, length))
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: piece, alignment: 8)
        defer { scratch.deallocate() }
        var offset = 0
        while offset < length {
            let count = min(piece, length - offset)
            let slice = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<count])
            fill(slice, offset: offset)
            try body(UnsafeRawBufferPointer(slice))
            offset += count
        }
    }

    /// Writes the pattern bytes starting at stream position `offset` into `buffer`.
    public static func fill(_ buffer: UnsafeMutableRawBufferPointer, offset: Int) {
        guard let base = buffer.baseAddress else { return }
        var position = offset
        var residue = offset % 251
        for index in 0..<buffer.count {
            base.storeBytes(of: UInt8(truncatingIfNeeded: residue &+ (position >> 16)), toByteOffset: index, as: UInt8.self)
            position &+= 1
            residue &+= 1
            if residue == 251 { residue = 0 }
        }
    }
}
