import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The temporary file where the part of a streamed body its reader has not taken yet waits
/// once memory holds ``ByteStream/memoryLimit`` of it (see ``ByteStreamStateMachine``).
///
/// Made on the first write, unlinked at once (nothing is left on disk, even after a crash), and
/// closed when the stream is discarded. Reads and writes name their offset (`pread`/`pwrite`),
/// so the transfer writes while the reader reads; the descriptor's lock is held across each
/// call only so that a close never lands between a check and a write (a reused descriptor).
final class SpillFile: Sendable {
    /// The descriptor: -1 before the first write; `nil` once discarded.
    private let descriptor = LockedState<Int32?>(-1)

    /// Writes `data` at `offset`; returns how many bytes were written.
    func write(_ data: Data, at offset: Int) throws -> Int {
        try descriptor.withLock { descriptor in
            guard var fd = descriptor else { throw CocoaError(.fileWriteUnknown) }
            if fd < 0 {
                fd = try Self.makeFile()
                descriptor = fd
            }
            try data.withUnsafeBytes { bytes in
                var done = 0
                while done < bytes.count {
                    let written = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset + done))
                    if written < 0 {
                        if errno == EINTR { continue }
                        throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
                    }
                    done += written
                }
            }
            return data.count
        }
    }

    /// Reads `count` bytes at `offset` (written before).
    func read(at offset: Int, count: Int) throws -> Data {
        try descriptor.withLock { descriptor in
            guard let fd = descriptor, fd >= 0 else { throw CocoaError(.fileReadUnknown) }
            var data = Data(count: count)
            try data.withUnsafeMutableBytes { bytes in
                var done = 0
                while done < count {
                    let read = pread(fd, bytes.baseAddress! + done, count - done, off_t(offset + done))
                    if read < 0 {
                        if errno == EINTR { continue }
                        throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
                    }
                    if read == 0 { throw CocoaError(.fileReadCorruptFile) }
                    done += read
                }
            }
            return data
        }
    }

    /// Closes the file (gone from disk since it was made); later writes and reads fail.
    func discard() {
        let fd: Int32? = descriptor.withLock { descriptor in
            defer { descriptor = nil }
            return descriptor
        }
        if let fd, fd >= 0 { close(fd) }
    }

    private static func makeFile() throws -> Int32 {
        var template = Array((FileManager.default.temporaryDirectory.path + "/URLTaskManager-bytes-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        let path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        unlink(path)
        return fd
    }
}
