// The only file of the client that talks to the C library: every platform difference (Glibc vs
// Darwin) is kept behind these small wrappers.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#else
#error("URLTaskRedis supports Glibc (Linux) and Darwin (Apple platforms) only.")
#endif

/// Blocking socket calls with deadlines, run on the client's own threads (never on the
/// concurrency pool's).
enum RedisSocket {
    /// Opens a stream socket to `endpoint` within `timeout`: `.timeout` when the peer does not
    /// answer in time, `.connectionClosed` when it refuses or cannot be resolved.
    static func connect(to endpoint: RedisClient.Configuration.Endpoint, timeout: Duration) throws(RedisError) -> Int32 {
        let deadline = ContinuousClock.now + timeout
        switch endpoint {
        case .tcp(let host, let port):
            return try connectTCP(host: host, port: port, deadline: deadline, timeout: timeout)
        case .unixSocket(let path):
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let capacity = MemoryLayout.size(ofValue: address.sun_path)
            let bytes = Array(path.utf8)
            guard bytes.count < capacity else { throw .closed("the Unix socket path is longer than the system allows") }
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                raw.copyBytes(from: bytes)
                raw[bytes.count] = 0
            }
            #if canImport(Darwin)
            address.sun_len = UInt8(MemoryLayout<sockaddr_un>.size)
            #endif
            let length = socklen_t(MemoryLayout<sockaddr_un>.size)
            return try withUnsafePointer(to: &address) { (pointer) throws(RedisError) -> Int32 in
                try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { (address) throws(RedisError) -> Int32 in
                    try connectOne(
                        family: AF_UNIX, address: address, length: length, deadline: deadline, timeout: timeout, name: "the Unix socket")
                }
            }
        }
    }

    private static func connectTCP(
        host: String, port: Int, deadline: ContinuousClock.Instant, timeout: Duration
    ) throws(RedisError) -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Glibc)
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
        hints.ai_socktype = SOCK_STREAM
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let resolved = getaddrinfo(host, String(port), &hints, &list)
        guard resolved == 0, let first = list else { throw .closed("could not resolve \(host)") }
        defer { freeaddrinfo(first) }
        var lastError = RedisError.closed("could not connect to \(host):\(port)")
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let current = entry {
            entry = current.pointee.ai_next
            guard let address = current.pointee.ai_addr else { continue }
            do {
                let fd = try connectOne(
                    family: current.pointee.ai_family, address: address, length: current.pointee.ai_addrlen, deadline: deadline,
                    timeout: timeout, name: "\(host):\(port)")
                setNoDelay(fd)
                return fd
            } catch {
                if error.kind == .timeout { throw error }
                lastError = error
            }
        }
        throw lastError
    }

    private static func connectOne(
        family: Int32, address: UnsafePointer<sockaddr>, length: socklen_t, deadline: ContinuousClock.Instant, timeout: Duration,
        name: String
    ) throws(RedisError) -> Int32 {
        #if canImport(Glibc)
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #else
        let fd = socket(family, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw .closed("could not create a socket (errno \(errno))") }
        #if canImport(Darwin)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        var yes: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &yes, socklen_t(MemoryLayout<Int32>.size))
        #endif
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        let result = systemConnect(fd, address, length)
        if result != 0 {
            let code = errno
            guard code == EINPROGRESS || code == EINTR else {
                close(fd)
                throw .closed("could not connect to \(name) (\(describe(code)))")
            }
            while true {
                let remaining = milliseconds(until: deadline)
                if remaining <= 0 {
                    close(fd)
                    throw .timeout("connecting to \(name) took longer than \(timeout)")
                }
                var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                let ready = poll(&entry, 1, remaining)
                if ready < 0 && errno == EINTR { continue }
                if ready == 0 { continue }
                break
            }
            var failure: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &size)
            if failure != 0 {
                close(fd)
                throw .closed("could not connect to \(name) (\(describe(failure)))")
            }
        }
        _ = fcntl(fd, F_SETFL, flags & ~O_NONBLOCK)
        return fd
    }

    /// Milliseconds left until `deadline` for `poll` (0 once passed, at most a day).
    static func milliseconds(until deadline: ContinuousClock.Instant) -> Int32 {
        let left = ContinuousClock.now.duration(to: deadline)
        if left <= .zero { return 0 }
        let (seconds, attoseconds) = left.components
        let total = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(min(total, 86_400_000))
    }

    /// Makes a blocked `send` give up after `timeout` (a server that stopped reading).
    static func setSendTimeout(_ fd: Int32, _ timeout: Duration) {
        let (seconds, attoseconds) = timeout.components
        var value = timeval()
        value.tv_sec = .init(seconds)
        value.tv_usec = .init(attoseconds / 1_000_000_000_000)
        if seconds == 0 && value.tv_usec == 0 { value.tv_usec = 1000 }
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Writes every byte or throws; never raises SIGPIPE.
    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws(RedisError) {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes { raw in
                #if canImport(Glibc)
                send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                #else
                send(fd, raw.baseAddress! + offset, raw.count - offset, 0)
                #endif
            }
            if sent < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK { throw .timeout("the server did not read a command in time") }
                throw .closed("the connection closed while a command was written (\(describe(code)))")
            }
            offset += sent
        }
    }

    /// Waits until `fd` (or the wake socket) is readable or `timeout` milliseconds pass (-1:
    /// no limit); returns whether each is readable (hung up or failed counts as readable).
    static func waitReadable(_ fd: Int32, wake: Int32, timeout: Int32) -> (socket: Bool, wake: Bool) {
        var entries = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
        let result = entries.withUnsafeMutableBufferPointer { poll($0.baseAddress, 2, timeout) }
        if result < 0 { return (false, false) }
        return (entries[0].revents != 0, entries[1].revents != 0)
    }

    /// Reads what is available; the byte count, 0 at end of stream, -1 on an error.
    static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        while true {
            let count = recv(fd, buffer.baseAddress, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            return count
        }
    }

    /// A connected pair of local sockets: writing a byte to the second wakes a `poll` on the first.
    static func makeWakePair() throws(RedisError) -> (reader: Int32, writer: Int32) {
        var pair: [Int32] = [-1, -1]
        #if canImport(Glibc)
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        #else
        let type = SOCK_STREAM
        #endif
        guard socketpair(AF_UNIX, type, 0, &pair) == 0 else { throw .closed("could not create a wake socket (errno \(errno))") }
        for fd in pair {
            let flags = fcntl(fd, F_GETFL)
            _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
            #if canImport(Darwin)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            var yes: Int32 = 1
            _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &yes, socklen_t(MemoryLayout<Int32>.size))
            #endif
        }
        return (pair[0], pair[1])
    }

    /// Wakes the thread polling the other end of a wake pair (a full pair is already awake).
    static func wake(_ writer: Int32) {
        var byte: UInt8 = 1
        #if canImport(Glibc)
        _ = send(writer, &byte, 1, Int32(MSG_NOSIGNAL))
        #else
        _ = send(writer, &byte, 1, 0)
        #endif
    }

    /// Empties a wake socket.
    static func drain(_ reader: Int32) {
        var bytes = [UInt8](repeating: 0, count: 64)
        while bytes.withUnsafeMutableBytes({ recv(reader, $0.baseAddress, 64, 0) }) > 0 {}
    }

    /// Stops both directions: wakes a thread blocked in `recv`, `send` or `poll` on this socket.
    static func shutdownBoth(_ fd: Int32) {
        #if canImport(Glibc)
        _ = shutdown(fd, Int32(SHUT_RDWR))
        #else
        _ = shutdown(fd, SHUT_RDWR)
        #endif
    }

    /// Releases the descriptor.
    static func closeDescriptor(_ fd: Int32) {
        _ = close(fd)
    }

    private static func setNoDelay(_ fd: Int32) {
        var yes: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
    }

    private static func describe(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}

private func systemConnect(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) -> Int32 {
    connect(fd, address, length)
}
