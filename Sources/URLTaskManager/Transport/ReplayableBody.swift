import Foundation

/// Turns a one-shot `httpBodyStream` into a body that can be sent again.
///
/// Runs once per task, before its first send, on the pipeline's own thread: reading a stream
/// may block, and URLSession's queues must never block.
enum ReplayableBody {
    /// Reads `stream` into memory if it holds at most `limit` bytes. A longer stream is
    /// returned as a stream that yields the bytes already read and then the rest, so the first
    /// send still carries the whole body.
    static func prepare(_ stream: InputStream, limit: Int) -> Result<URLTaskBody, URLTaskError> {
        if stream.streamStatus == .notOpen { stream.open() }
        var collected = Data()
        let chunk = 64 * 1024
        let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: chunk)
        defer { buffer.deallocate() }
        while collected.count <= limit {
            let count = stream.read(buffer, maxLength: chunk)
            if count < 0 {
                stream.close()
                let reason = stream.streamError.map { "reading the body stream failed: \($0)" } ?? "reading the body stream failed"
                return .failure(.bodyNotReplayable(reason: reason))
            }
            if count == 0 {
                stream.close()
                return .success(.data(collected))
            }
            collected.append(buffer, count: count)
        }
        return .success(.stream(PrefixedInputStream(prefix: collected, rest: stream)))
    }
}
