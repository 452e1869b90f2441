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
///
/// The file is a ring of `capacity` bytes: an offset (which counts every byte spilled since the
/// reader last caught up) is taken modulo `capacity`, and a write or a read that reaches the
/// end goes on at the start. The state machine never has more than `capacity` bytes unread, so
/// a write only ever lands on bytes already read, and the file never grows past `capacity`
/// however long its reader stays behind.
final class SpillFile: Sendable {
    /// The descriptor: -1 before the first write; `nil` once discarded.
    private let descriptor = LockedState<Int32?>(-1)
    /// The file's most bytes (at least 1).
    let capacity: Int

    init(capacity: Int = .max) {
        self.capacity = max(1, capacity)
    }

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
                    let (position, room) = place(offset + done)
                    let written = pwrite(fd, bytes.baseAddress! + done, min(bytes.count - done, room), off_t(position))
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
                    let (position, room) = place(offset + done)
                    let read = pread(fd, bytes.baseAddress! + done, min(count - done, room), off_t(position))
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

    /// The file's size on disk (0 before the first write and once discarded): what a slow
    /// reader costs, which the tests check stays within `capacity`.
    var size: Int {
        descriptor.withLock { descriptor in
            guard let fd = descriptor, fd >= 0 else { return 0 }
            var status = stat()
            return fstat(fd, &status) == 0 ? Int(status.st_size) : 0
        }
    }

    /// Where in the file `offset` is, and how many bytes from there to the file's end.
    private func place(_ offset: Int) -> (position: Int, room: Int) {
        let position = offset % capacity
        return (position, capacity - position)
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
