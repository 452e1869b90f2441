import Foundation

/// An input stream that yields `prefix`, then whatever `rest` (already open) still holds.
///
/// What a body larger than ``URLTaskManager/Options/maximumReplayableBodySize`` becomes once
/// the pipeline has read past the limit: the bytes read so far are not lost, so the one send
/// such a body gets is complete.
final class PrefixedInputStream: InputStream {
    private let prefix: Data
    private var offset = 0
    private let rest: InputStream
    private var status = Stream.Status.notOpen

    init(prefix: Data, rest: InputStream) {
        self.prefix = prefix
        self.rest = rest
        super.init(data: Data())
    }

    override func open() {
        status = .open
    }

    override func close() {
        rest.close()
        status = .closed
    }

    override var streamStatus: Stream.Status {
        switch status {
        case .open where offset == prefix.count: rest.streamStatus
        default: status
        }
    }

    override var streamError: (any Error)? { rest.streamError }

    override var hasBytesAvailable: Bool {
        offset < prefix.count || rest.hasBytesAvailable
    }

    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength length: Int) -> Int {
        guard offset < prefix.count else { return rest.read(buffer, maxLength: length) }
        let count = min(length, prefix.count - offset)
        prefix.copyBytes(to: buffer, from: offset..<(offset + count))
        offset += count
        return count
    }

    override func getBuffer(_ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length len: UnsafeMutablePointer<Int>) -> Bool {
        false
    }
}
