import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A one-connection TCP proxy in front of Redis that forwards the client's command, then only
/// the first half of the server's reply, and closes: a reply cut in half.
final class HalfReplyProxy: @unchecked Sendable {  // `forwarded` is locked; the rest is immutable.
    let port: Int
    private let listener: Int32
    private let lock = NSLock()
    private var forwarded = 0

    var forwardedBytes: Int { lock.withLock { forwarded } }

    init(upstreamPort: Int) throws {
        let (listener, port) = try TestSockets.listener(backlog: 4)
        self.listener = listener
        self.port = port
        Thread.detachNewThread { [self] in serve(upstreamPort: upstreamPort) }
    }

    deinit { close(listener) }

    private func serve(upstreamPort: Int) {
        let client = TestSockets.accept(listener)
        guard client >= 0 else { return }
        defer { close(client) }
        guard let upstream = try? TestSockets.connect(port: upstreamPort) else { return }
        defer { close(upstream) }
        // The command (small: one read has it all).
        guard let command = try? TestSockets.receive(client, count: 1, timeout: 5), !command.isEmpty else { return }
        var rest = [UInt8](repeating: 0, count: 4096)
        var entry = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
        var request = command
        if poll(&entry, 1, 50) > 0 {
            let more = rest.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            if more > 0 { request += rest[0..<more] }
        }
        try? TestSockets.sendAll(upstream, request)
        // The whole reply of a 100,000-byte value is "$100000\r\n" + 100,000 bytes + CRLF.
        guard let reply = try? TestSockets.receive(upstream, count: 100_011, timeout: 5) else { return }
        let half = Array(reply[0..<(reply.count / 2)])
        try? TestSockets.sendAll(client, half)
        lock.withLock { forwarded = half.count }
    }
}
