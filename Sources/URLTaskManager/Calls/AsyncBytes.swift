import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension URLTaskManager {
    /// The body of a ``URLTaskManager/bytes(for:)`` call, byte by byte as it arrives, as
    /// `URLSession.AsyncBytes` gives it (which swift-corelibs-foundation does not have).
    ///
    /// Read it once, from one task at a time. Reading never slows the transfer (corelibs cannot
    /// pause one): what you have not read yet is kept in memory up to 1 MiB, and beyond that in
    /// a temporary file that is gone from disk as soon as it is made, so a slow reader costs
    /// disk, not memory. That file holds at most
    /// ``URLTaskManager/Options/maximumSpilledBodySize`` (256 MiB by default) of what you have
    /// not read: a reader that falls further behind gets every byte that came before, then
    /// ``URLTaskError/Code-swift.struct/spillLimitReached``, and the transfer is stopped there.
    /// Stop reading (let the sequence go, or cancel your task) and the transfer stops. A
    /// transfer that fails midway throws its error where the body breaks off.
    ///
    /// The sequence is `Sendable`, so two tasks can hold it; a body is one stream of bytes,
    /// though, and each piece goes to one read. A read asked for while another task's read is
    /// under way throws ``URLTaskError/Code-swift.struct/alreadyBeingRead`` at once and changes
    /// nothing: the read under way goes on as if it had not been asked.
    public struct AsyncBytes: AsyncSequence, Sendable {
        public typealias Element = UInt8

        @usableFromInline let reader: ByteStreamReader

        /// The body in the pieces it arrives in, for code that handles bytes in bulk (hashing,
        /// writing to a file) rather than one at a time.
        public var chunks: Chunks { Chunks(reader: reader) }

        public func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(reader: reader)
        }

        /// Reads the body a byte at a time; suspends only when the piece at hand is used up.
        ///
        /// `next()` is inlined into the reading loop, so a byte costs no call across modules:
        /// only taking the next piece is a call (measured: <doc:Performance>, "The manager's own
        /// methods").
        public struct AsyncIterator: AsyncIteratorProtocol {
            @usableFromInline let reader: ByteStreamReader
            @usableFromInline var chunk = Data()
            @usableFromInline var index = 0

            init(reader: ByteStreamReader) {
                self.reader = reader
            }

            @inlinable
            public mutating func next() async throws -> UInt8? {
                if index < chunk.endIndex {
                    defer { index += 1 }
                    return chunk[index]
                }
                return try await nextChunk()
            }

            @usableFromInline
            mutating func nextChunk() async throws -> UInt8? {
                while let next = try await reader.stream.next() {
                    if next.isEmpty { continue }
                    chunk = next
                    index = chunk.startIndex + 1
                    return chunk[chunk.startIndex]
                }
                chunk = Data()
                index = 0
                return nil
            }
        }

        /// The body of a ``URLTaskManager/bytes(for:)`` call in the pieces it arrives in.
        public struct Chunks: AsyncSequence, Sendable {
            public typealias Element = Data

            let reader: ByteStreamReader

            public func makeAsyncIterator() -> AsyncIterator {
                AsyncIterator(reader: reader)
            }

            /// Reads the body a piece at a time.
            public struct AsyncIterator: AsyncIteratorProtocol {
                let reader: ByteStreamReader

                public mutating func next() async throws -> Data? {
                    try await reader.stream.next()
                }
            }
        }
    }

    /// Sends `request` through the interceptors and reactors and returns, as soon as its
    /// response head arrives, the response and its body as a byte sequence that streams as it
    /// arrives: `URLSession.bytes(for:)`, which swift-corelibs-foundation lacks.
    ///
    /// Everything else is as ``data(for:)``: redirects, challenges, errors (those before the head
    /// are thrown here, those after it by the sequence), and cancelling the calling task. A
    /// reactor sees the response with the body that came (reactors that need the body, such as
    /// a refresh on a 401, get it, since their responses are never streamed to the caller).
    /// Memory stays flat however large the body and however slowly it is read, and the disk it
    /// waits on is bounded (``Options/maximumSpilledBodySize``): see ``AsyncBytes``.
    public func bytes(for request: URLRequest) async throws -> (AsyncBytes, URLResponse) {
        let stream = ByteStream(url: request.url, spillLimit: options.maximumSpilledBodySize)
        return try await pipeline.call(request, body: URLTaskBody(request: request), started: stream.attach) {
            ByteStreamSink(call: $0, stream: stream)
        }
    }

    /// A GET of `url` (the request `URLRequest(url:)` makes, as ``data(from:)`` sends it),
    /// streamed as ``bytes(for:)`` streams it.
    public func bytes(from url: URL) async throws -> (AsyncBytes, URLResponse) {
        try await bytes(for: URLRequest(url: url))
    }
}
