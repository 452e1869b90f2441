import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A TCP proxy in front of Redis whose existing connections can be turned into black holes
/// (bytes are swallowed, nothing is closed): a server gone without a word, as after a network
/// partition. Connections accepted afterwards forward normally.
final class BlackHoleProxy: @unchecked Sendable {  // Its counters and `stopped` are read and written under `lock`.
    let port: Int
    private let listener: Int32
    private let lock = NSLock()
    private var frozenBelow = 0
    private var accepted = 0
    private var stopped = false

    /// How many connections the proxy has accepted.
    var acceptedCount: Int { lock.withLock { accepted } }

    init(upstreamPort: Int) throws {
        let (listener, port) = try TestSockets.listener(backlog: 16)
        self.listener = listener
        self.port = port
        Thread.detachNewThread { [self] in acceptLoop(upstreamPort: upstreamPort) }
    }

    /// Every connection open now stops forwarding, in both directions.
    func freezeExisting() {
        lock.withLock { frozenBelow = accepted }
    }

    func stop() {
        lock.withLock { stopped = true }
        shutdown(listener, Int32(SHUT_RDWR))
    }

    deinit { close(listener) }

    private func acceptLoop(upstreamPort: Int) {
        while true {
            let client = TestSockets.accept(listener)
            if client < 0 { return }
            guard let upstream = try? TestSockets.connect(port: upstreamPort) else {
                close(client)
                continue
            }
            let number = lock.withLock {
                accepted += 1
                return accepted
            }
            Thread.detachNewThread { [self] in forward(client, upstream, number: number) }
        }
    }

    private func forward(_ client: Int32, _ upstream: Int32, number: Int) {
        defer {
            close(client)
            close(upstream)
        }
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let (frozen, stopped) = lock.withLock { (number <= frozenBelow, self.stopped) }
            if stopped { return }
            var entries = [pollfd(fd: client, events: Int16(POLLIN), revents: 0), pollfd(fd: upstream, events: Int16(POLLIN), revents: 0)]
            let ready = entries.withUnsafeMutableBufferPointer { poll($0.baseAddress, 2, 50) }
            if ready <= 0 { continue }
            for (index, entry) in entries.enumerated() where entry.revents != 0 {
                let from = index == 0 ? client : upstream
                let to = index == 0 ? upstream : client
                let count = buffer.withUnsafeMutableBytes { recv(from, $0.baseAddress, $0.count, 0) }
                if count <= 0 { return }
                if !frozen { try? TestSockets.sendAll(to, Array(buffer[0..<count])) }
            }
        }
    }
}
