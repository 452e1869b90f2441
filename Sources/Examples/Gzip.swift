import CZlib
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// gzip through the system's zlib, for the gzip-upload example: the client compresses, the
/// example's server inflates.
enum Gzip {
    struct Failed: Error, CustomStringConvertible {
        let description: String
    }

    /// `data` as a gzip stream (RFC 1952).
    static func compress(_ data: Data) throws -> Data {
        var stream = z_stream()
        // 15 window bits + 16: a gzip header and trailer instead of zlib's.
        guard
            deflateInit2_(
                &stream, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
                == Z_OK
        else {
            throw Failed(description: "deflateInit2 failed")
        }
        defer { deflateEnd(&stream) }
        return try run(&stream, input: data, finish: Z_FINISH) { deflate(&$0, $1) }
    }

    /// The bytes of the gzip stream `data`.
    static func decompress(_ data: Data) throws -> Data {
        var stream = z_stream()
        guard inflateInit2_(&stream, 15 + 16, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            throw Failed(description: "inflateInit2 failed")
        }
        defer { inflateEnd(&stream) }
        return try run(&stream, input: data, finish: Z_NO_FLUSH) { inflate(&$0, $1) }
    }

    private static func run(_ stream: inout z_stream, input: Data, finish: Int32, step: (inout z_stream, Int32) -> Int32) throws -> Data {
        var input = [UInt8](input)
        var output = Data()
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        return try input.withUnsafeMutableBufferPointer { inputBuffer in
            stream.next_in = inputBuffer.baseAddress
            stream.avail_in = uInt(inputBuffer.count)
            while true {
                let (status, produced) = chunk.withUnsafeMutableBufferPointer { out -> (Int32, Int) in
                    stream.next_out = out.baseAddress
                    stream.avail_out = uInt(out.count)
                    let status = step(&stream, finish)
                    return (status, out.count - Int(stream.avail_out))
                }
                output.append(contentsOf: chunk[0..<produced])
                if status == Z_STREAM_END { return output }
                guard status == Z_OK || (status == Z_BUF_ERROR && produced > 0) else {
                    throw Failed(description: "zlib status \(status)")
                }
            }
        }
    }
}
