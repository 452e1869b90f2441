import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The benchmark's server for the modes that run it apart from the client: on any IPv4 address
/// (inside a network namespace for `netem`, on 127.0.0.1 for `callgrind`), until it is killed.
///
/// `LoopbackServer` binds 127.0.0.1 only, and it writes a response's head and body in two
/// sends, so how many reads the client makes depends on timing; this one answers every request
/// head with the same bytes as `LoopbackServer`'s `.text("ok")` in one send, which keeps the
/// client's instruction count the same from run to run. It serves GETs without a body (all the
/// benchmark sends), one thread per connection, keep-alive.
enum AddressServer {
    static let response = Array("HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n\r\nok".utf8)

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// `Benchmarks serve-at ADDRESS PORT [DELAY-MS]`: binds, prints the port it listens on,
    /// serves forever. With a delay, each response is sent that long after its request head
    /// was read: a network's round trip where the kernel has no `netem` (see bench-netem.sh).
    static func serve(address: String, port: UInt16, delay: Double = 0) throws -> Never {
        #if canImport(Glibc)
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let listener = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard listener >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        var yes: Int32 = 1
        _ = setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var socketAddress = sockaddr_in()
        socketAddress.sin_family = sa_family_t(AF_INET)
        socketAddress.sin_port = port.bigEndian
        guard inet_pton(AF_INET, address, &socketAddress.sin_addr) == 1 else {
            throw Failure(description: "not an IPv4 address: \(address)")
        }
        let bound = withUnsafePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw Failure(description: "bind \(address):\(port): errno \(errno)") }
        guard listen(listener, 1024) == 0 else { throw Failure(description: "listen: errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        FileHandle.standardOutput.write(Data("\(UInt16(bigEndian: socketAddress.sin_port))\n".utf8))
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                throw Failure(description: "accept: errno \(errno)")
            }
            _ = setsockopt(connection, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
            Thread.detachNewThread { serveConnection(connection, delay: delay) }
        }
    }

    /// Answers each complete request head (up to its blank line) until the peer closes.
    private static func serveConnection(_ connection: Int32, delay: Double) {
        defer { close(connection) }
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        var pending = [UInt8]()
        let terminator: [UInt8] = Array("\r\n\r\n".utf8)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return }
            pending.append(contentsOf: buffer[0..<count])
            while let end = firstRange(of: terminator, in: pending) {
                pending.removeFirst(end)
                if delay > 0 { Thread.sleep(forTimeInterval: delay / 1_000) }
                guard sendAll(connection) else { return }
            }
            if pending.count > 64 << 10 { return }  // not a request head
        }
    }

    /// The index just past the first `needle` in `haystack`, if any.
    private static func firstRange(of needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start..<start + needle.count].elementsEqual(needle) {
            return start + needle.count
        }
        return nil
    }

    private static func sendAll(_ connection: Int32) -> Bool {
        response.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                #if canImport(Glibc)
                let sent = send(connection, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
                #else
                let sent = send(connection, bytes.baseAddress! + offset, bytes.count - offset, 0)
                #endif
                if sent < 0 && errno == EINTR { continue }
                guard sent > 0 else { return false }
                offset += sent
            }
            return true
        }
    }
}
