import Foundation

extension ServerResponse {
    /// How the response body is produced and framed, so tests can exercise each framing the client must handle.
    public enum Body: Sendable {
        /// No body (`Content-Length: 0` unless the status forbids a body).
        case empty
        /// Fixed bytes sent with `Content-Length`.
        case data(Data)
        /// `Transfer-Encoding: chunked`, one chunk per element (empty elements are skipped, since an
        /// empty chunk ends the body), optionally pausing `chunkDelay` between chunks to test streaming.
        /// With a `Content-Length` header set by the response, the elements are sent unframed, one
        /// write each with the same pauses: a body of known length that arrives slowly.
        case chunked([Data], chunkDelay: Duration? = nil)
        /// `length` bytes of `GeneratedBody`'s pattern, produced `chunkSize` at a time and never held in
        /// memory, sent with `Content-Length` or, if `chunked`, one HTTP chunk per piece.
        case generated(length: Int, chunkSize: Int = 64 * 1024, chunked: Bool = false)
    }
}
