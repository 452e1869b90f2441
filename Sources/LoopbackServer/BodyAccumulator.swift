import Foundation

/// Collects a request body as it streams in: hashes every byte, counts them, and keeps only the
/// first `limit` bytes, so a 100 MB upload is verified without being held in memory.
struct BodyAccumulator {
    private let limit: Int
    private(set) var data = Data()
    private(set) var length = 0
    private var hasher = SHA256()

    /// Keeps at most `limit` bytes of the body.
    init(limit: Int) { self.limit = max(0, limit) }

    /// Feeds the next piece of the body.
    mutating func consume(_ bytes: UnsafeRawBufferPointer) {
        length += bytes.count
        hasher.update(bytes)
        let room = limit - data.count
        if room > 0 {
            data.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes.prefix(room)))
        }
    }

    /// Lowercase hex SHA-256 of everything consumed.
    var sha256: String { hasher.hexDigest() }
}
