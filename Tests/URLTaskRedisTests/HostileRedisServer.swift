import Foundation

@testable import URLTaskRedis

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A server on 127.0.0.1 (a port the system chose) that speaks just enough RESP to be taken for
/// Redis, and answers as a hostile peer would: bytes that are not RESP, an array 100,000 levels
/// deep, gigabytes announced and streamed as fast as the client reads, a reply that never ends,
/// a reply dripped a piece at a time, a flood of pub/sub messages. Each accepted connection takes
/// the next behaviour of the queue (``enqueue(_:)``); once the queue is empty, connections are
/// well behaved, so a test sees the client reconnect and work. Every connection has a thread of
/// its own and ends when the client closes it, at ``stop()``, or after 30 s at most.
final class HostileRedisServer: @unchecked Sendable {  // `queue`, `accepted`, `stopped`, `floods` are guarded by `condition`.
    /// What one connection does with the commands it reads.
    enum Behaviour: Sendable, CustomStringConvertible {
        /// Answers like Redis: `PING` `+PONG`, `ECHO x` `x`, `SUBSCRIBE channel` its
        /// confirmation then one message `hello` on it, anything else `-ERR`.
        case wellBehaved
        /// Answers the first command with `bytes` at once, then behaves (if the client stays).
        case reply([UInt8])
        /// Answers the first command with `bytes` at once, then closes the connection.
        case closeAfter([UInt8])
        /// Answers the first command with `head`, then `chunk` again and again, as fast as the
        /// client takes it, until the client closes the connection.
        case stream(head: [UInt8], chunk: [UInt8])
        /// Answers the first command with `bytes`, `piece` bytes every `interval`, then behaves
        /// (if the client stays).
        case drip([UInt8], piece: Int, interval: Duration)
        /// Confirms the first `SUBSCRIBE`, then sends what `push` says (one of the cases above)
        /// as the subscription's next message.
        indirect case subscribed(push: Behaviour)
        /// Confirms the first `SUBSCRIBE`, then publishes numbered messages of `size` bytes
        /// (`seq:<n>:` and padding) as fast as the client takes them, for `duration` or until
        /// `maximumBytes` were sent, then one message `last:<n>` (n: how many came before), then
        /// behaves.
        case flood(size: Int, duration: Duration, maximumBytes: Int)

        var description: String {
            switch self {
            case .wellBehaved: return "well behaved"
            case .reply(let bytes): return "a reply of \(bytes.count) bytes (\(Self.preview(bytes)))"
            case .closeAfter(let bytes): return "\(bytes.count) bytes (\(Self.preview(bytes))), then the end"
            case .stream(let head, let chunk):
                return "\(Self.preview(head)) then \(chunk.count)-byte chunks (\(Self.preview(chunk))) without end"
            case .drip(let bytes, let piece, let interval):
                return "\(bytes.count) bytes (\(Self.preview(bytes))), \(piece) every \(interval)"
            case .subscribed(let push): return "subscribed, then \(push)"
            case .flood(let size, let duration, _): return "a flood of \(size)-byte messages for \(duration)"
            }
        }

        private static func preview(_ bytes: [UInt8]) -> String {
            String(decoding: bytes.prefix(24), as: UTF8.self).replacingOccurrences(of: "\r\n", with: "⏎")
        }
    }

    /// The channel a well-behaved subscription confirms and the message it then sends.
    static let greeting = "hello"

    let port: Int
    private let listener: Int32
    private let condition = NSCondition()
    private var queue: [Behaviour] = []
    private var accepted = 0
    private var stopped = false
    private var floods: [(sent: Int, bytes: Int)] = []

    init() throws {
        let (listener, port) = try TestSockets.listener(backlog: 16)
        self.listener = listener
        self.port = port
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    deinit { stop() }

    /// The configuration of a client of this server: the library's defaults but the endpoint.
    var configuration: RedisClient.Configuration { .init(endpoint: .tcp(host: "127.0.0.1", port: port)) }

    /// The next connection (after those already queued) behaves as `behaviour`.
    func enqueue(_ behaviour: Behaviour) {
        condition.withLock { queue.append(behaviour) }
    }

    /// How many connections the server has accepted.
    var acceptedCount: Int { condition.withLock { accepted } }

    /// Waits (at most `seconds`) until `count` floods have ended; their message counts and bytes.
    func floodsEnded(_ count: Int, within seconds: TimeInterval) -> [(sent: Int, bytes: Int)]? {
        let deadline = Date().addingTimeInterval(seconds)
        condition.lock()
        defer { condition.unlock() }
        while floods.count < count, Date() < deadline { _ = condition.wait(until: deadline) }
        return floods.count >= count ? floods : nil
    }

    func stop() {
        let first = condition.withLock {
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private var isStopped: Bool { condition.withLock { stopped } }

    private func acceptLoop() {
        while true {
            let client = TestSockets.accept(listener)
            if client < 0 { return }
            let behaviour: Behaviour = condition.withLock {
                accepted += 1
                return queue.isEmpty ? .wellBehaved : queue.removeFirst()
            }
            Thread.detachNewThread { [self] in
                defer { close(client) }
                serve(client, behaviour)
            }
        }
    }

    // MARK: - One connection

    private func serve(_ fd: Int32, _ behaviour: Behaviour) {
        // A blocked send gives up after 50 ms, so that every loop sees the deadline and `stop()`.
        var timeout = timeval(tv_sec: 0, tv_usec: 50_000)
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let connection = Connection(fd: fd, deadline: .now + .seconds(30), isStopped: { [weak self] in self?.isStopped ?? true })
        switch behaviour {
        case .wellBehaved:
            wellBehaved(connection)
        case .subscribed(let push):
            guard let command = connection.nextCommand(), command.first?.uppercased() == "SUBSCRIBE", command.count > 1 else { return }
            guard connection.send(Self.confirmation(command[1])) else { return }
            answer(connection, push)
        case .flood(let size, let duration, let maximumBytes):
            guard let command = connection.nextCommand(), command.first?.uppercased() == "SUBSCRIBE", command.count > 1 else { return }
            guard connection.send(Self.confirmation(command[1])) else { return }
            flood(connection, channel: command[1], size: size, until: .now + duration, maximumBytes: maximumBytes)
            wellBehaved(connection)
        default:
            guard connection.nextCommand() != nil else { return }
            answer(connection, behaviour)
        }
    }

    /// Sends what `behaviour` says, then answers as Redis until the client closes.
    private func answer(_ connection: Connection, _ behaviour: Behaviour) {
        switch behaviour {
        case .reply(let bytes):
            guard connection.send(bytes) else { return }
        case .closeAfter(let bytes):
            _ = connection.send(bytes)
            return
        case .stream(let head, let chunk):
            guard connection.send(head) else { return }
            while connection.send(chunk) {}
            return
        case .drip(let bytes, let piece, let interval):
            var offset = 0
            while offset < bytes.count {
                let end = min(bytes.count, offset + piece)
                guard connection.send(Array(bytes[offset..<end])) else { return }
                offset = end
                // Paced, not synchronised: the wait ends early when the client closes.
                if connection.closedWithin(interval) { return }
            }
        case .wellBehaved, .subscribed, .flood:
            break
        }
        // A client that took the answer for a reply goes on with this connection.
        wellBehaved(connection)
    }

    private func wellBehaved(_ connection: Connection) {
        while let command = connection.nextCommand() {
            let reply: [UInt8]
            switch command.first?.uppercased() {
            case "PING"?: reply = Array("+PONG\r\n".utf8)
            case "ECHO"? where command.count == 2: reply = Self.bulk(command[1])
            case "SUBSCRIBE"? where command.count == 2:
                reply = Self.confirmation(command[1]) + Self.message(command[1], Array(Self.greeting.utf8))
            default: reply = Array("-ERR unknown command\r\n".utf8)
            }
            guard connection.send(reply) else { return }
        }
    }

    private func flood(_ connection: Connection, channel: String, size: Int, until: ContinuousClock.Instant, maximumBytes: Int) {
        var started = 0
        var bytes = 0
        var ended = false
        var pending: [UInt8] = []
        var offset = 0
        let padding = [UInt8](repeating: UInt8(ascii: "x"), count: size)
        // Each message is sent whole (a stream cut inside one would not be RESP). The flood
        // ends at `until` (or `maximumBytes`) even while a send is blocked by a client that
        // stopped reading: what was started is finished later, then `last:<n>`.
        while !isStopped, ContinuousClock.now < connection.deadline {
            if !ended, ContinuousClock.now >= until || bytes >= maximumBytes {
                ended = true
                condition.withLock {
                    floods.append((started, bytes))
                    condition.broadcast()
                }
            }
            if offset == pending.count {
                if ended {
                    // The last message; then the connection behaves.
                    _ = connection.send(Self.message(channel, Array("last:\(started)".utf8)))
                    return
                }
                var payload = Array("seq:\(started):".utf8)
                payload += padding.prefix(max(0, size - payload.count))
                pending = Self.message(channel, payload)
                offset = 0
                started += 1
                bytes += pending.count
            }
            guard let sent = connection.sendSome(pending[offset...]) else { return }
            offset += sent
        }
    }

    // MARK: - RESP

    static func bulk(_ text: String) -> [UInt8] { bulk(Array(text.utf8)) }

    static func bulk(_ bytes: [UInt8]) -> [UInt8] { Array("$\(bytes.count)\r\n".utf8) + bytes + [13, 10] }

    static func confirmation(_ channel: String) -> [UInt8] {
        Array("*3\r\n".utf8) + bulk("subscribe") + bulk(channel) + Array(":1\r\n".utf8)
    }

    static func message(_ channel: String, _ payload: [UInt8]) -> [UInt8] {
        Array("*3\r\n".utf8) + bulk("message") + bulk(channel) + bulk(payload)
    }

    /// One accepted connection: its commands, read with the client's own parser (the client's
    /// commands are well formed), and sends bounded by the connection's deadline.
    private final class Connection {
        let fd: Int32
        let deadline: ContinuousClock.Instant
        let isStopped: () -> Bool
        private var parser = RESPParser()
        private var buffer = [UInt8](repeating: 0, count: 64 * 1024)

        init(fd: Int32, deadline: ContinuousClock.Instant, isStopped: @escaping () -> Bool) {
            self.fd = fd
            self.deadline = deadline
            self.isStopped = isStopped
        }

        /// The next command's words, or `nil` once the client closed (or the deadline passed).
        func nextCommand() -> [String]? {
            while true {
                do {
                    if let value = try parser.next() {
                        return value.array?.map { $0.string ?? "" } ?? []
                    }
                } catch {
                    return nil
                }
                guard readable(within: 50) else {
                    if ContinuousClock.now >= deadline || isStopped() { return nil }
                    continue
                }
                let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if count <= 0 { return nil }
                parser.append(buffer[0..<count])
            }
        }

        /// Sends every byte; `false` once the client is gone, at the connection's deadline or at
        /// `stop()`.
        func send(_ bytes: [UInt8]) -> Bool {
            var offset = 0
            while offset < bytes.count {
                let sent = bytes.withUnsafeBytes { raw in
                    #if canImport(Glibc)
                    Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                    #else
                    Darwin.send(fd, raw.baseAddress! + offset, raw.count - offset, 0)
                    #endif
                }
                if sent > 0 {
                    offset += sent
                    continue
                }
                guard sent < 0, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR else { return false }
                if ContinuousClock.now >= deadline || isStopped() { return false }
            }
            return true
        }

        /// Sends what the socket takes within its 50 ms send timeout: the count (0 if it took
        /// nothing), `nil` once the client is gone.
        func sendSome(_ bytes: ArraySlice<UInt8>) -> Int? {
            let sent = bytes.withUnsafeBytes { raw in
                #if canImport(Glibc)
                Glibc.send(fd, raw.baseAddress!, raw.count, Int32(MSG_NOSIGNAL))
                #else
                Darwin.send(fd, raw.baseAddress!, raw.count, 0)
                #endif
            }
            if sent >= 0 { return sent }
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : nil
        }

        /// Waits `interval` for the client to close (bytes it sends meanwhile are kept for
        /// ``nextCommand()``); `true` if it did.
        func closedWithin(_ interval: Duration) -> Bool {
            let until = ContinuousClock.now + interval
            while ContinuousClock.now < until {
                guard readable(within: RedisSocket.milliseconds(until: until)) else { continue }
                let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if count <= 0 { return true }
                parser.append(buffer[0..<count])
            }
            return false
        }

        private func readable(within milliseconds: Int32) -> Bool {
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            return poll(&entry, 1, milliseconds) > 0
        }
    }
}

/// The replies a hostile server answers with, as bytes.
enum HostileReplies {
    /// `*1` `levels` times around an integer: an array nested `levels` deep, in 4 bytes a level.
    static func deepArray(levels: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(levels * 4 + 4)
        for _ in 0..<levels { bytes += [UInt8(ascii: "*"), UInt8(ascii: "1"), 13, 10] }
        return bytes + Array(":1\r\n".utf8)
    }

    /// A bulk string of `announced` bytes: its header, and 64 KiB of its body to send again and
    /// again.
    static func hugeBulk(announced: Int) -> (head: [UInt8], chunk: [UInt8]) {
        (Array("$\(announced)\r\n".utf8), [UInt8](repeating: UInt8(ascii: "x"), count: 64 * 1024))
    }

    /// An array of `announced` integers: its header, and 16,384 of its elements to send again
    /// and again.
    static func hugeArray(announced: Int) -> (head: [UInt8], chunk: [UInt8]) {
        (Array("*\(announced)\r\n".utf8), Array(String(repeating: ":1\r\n", count: 16_384).utf8))
    }

    /// A reply that never ends within any bound a client could have: an array of 100,000
    /// bulk strings of 1 MiB each (100 GB), every header within Redis's own limits.
    static func endless() -> (head: [UInt8], chunk: [UInt8]) {
        (Array("*100000\r\n".utf8), HostileRedisServer.bulk([UInt8](repeating: UInt8(ascii: "y"), count: 1 << 20)))
    }

    /// Replies that are not RESP: an unknown type byte, a bulk longer than announced, an
    /// integer with letters, a negative length, a boolean that is neither, binary noise.
    static let malformed: [[UInt8]] = [
        Array("?what\r\n".utf8), Array("$3\r\nabcdef\r\n".utf8), Array(":12a\r\n".utf8), Array("$-5\r\n".utf8),
        Array("#x\r\n".utf8), [0, 255, 13, 10, 7, 1, 2, 3],
    ]
}
