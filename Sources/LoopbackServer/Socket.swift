// The only file in this module that talks to the C library directly: every
// platform difference (Glibc vs Darwin) is kept behind these small wrappers.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#else
#error("LoopbackServer supports Glibc (Linux) and Darwin (Apple platforms) only.")
#endif

/// Thin, blocking wrappers over the POSIX socket calls the server and the raw client use.
enum Socket {
    /// What one `accept` call produced.
    enum AcceptResult {
        case accepted(Int32)
        case retry
        case outOfDescriptors
        case failed(Int32)
    }

    /// The calling thread's `errno`.
    static var lastError: Int32 { errno }

    /// Creates a stream socket on 127.0.0.1 on `port` (0: OS-chosen) and starts listening.
    static func listenOnLoopback(backlog: Int32, port: Int = 0) throws -> (fd: Int32, port: Int) {
        let fd = try makeStreamSocket()
        var yes: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = loopbackAddress(port: UInt16(clamping: port))
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if bound != 0 {
            let code = errno
            close(fd)
            throw LoopbackServerError.bindFailed(errno: code)
        }
        if listen(fd, backlog) != 0 {
            let code = errno
            close(fd)
            throw LoopbackServerError.listenFailed(errno: code)
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        if named != 0 {
            let code = errno
            close(fd)
            throw LoopbackServerError.socketFailed(operation: "getsockname", errno: code)
        }
        return (fd, Int(UInt16(bigEndian: actual.sin_port)))
    }

    /// Opens a blocking TCP connection to 127.0.0.1:`port`.
    static func connectToLoopback(port: Int) throws -> Int32 {
        let fd = try makeStreamSocket()
        var address = loopbackAddress(port: UInt16(truncatingIfNeeded: port))
        while true {
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            if result == 0 { return fd }
            let code = errno
            if code == EINTR { continue }
            close(fd)
            throw LoopbackServerError.connectFailed(errno: code)
        }
    }

    /// Accepts one connection from a listening socket (call after `waitReadable` says it is ready).
    static func acceptConnection(_ listener: Int32) -> AcceptResult {
        let fd = accept(listener, nil, nil)
        if fd >= 0 {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            configureConnection(fd)
            return .accepted(fd)
        }
        let code = errno
        switch code {
        case EINTR, EAGAIN, ECONNABORTED, EPROTO:
            return .retry
        case EMFILE, ENFILE, ENOBUFS, ENOMEM:
            return .outOfDescriptors
        default:
            return .failed(code)
        }
    }

    /// Reads whatever is available (blocking until at least one byte, EOF or error).
    /// Returns the byte count, 0 at end of stream, or -1 with `lastError` set.
    static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        while true {
            let count = recv(fd, buffer.baseAddress, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            return count
        }
    }

    /// Writes every byte or throws; never raises SIGPIPE.
    static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws {
        guard var pointer = bytes.baseAddress else { return }
        var remaining = bytes.count
        while remaining > 0 {
            #if canImport(Glibc)
            let sent = send(fd, pointer, remaining, Int32(MSG_NOSIGNAL))
            #else
            let sent = send(fd, pointer, remaining, 0)
            #endif
            if sent < 0 {
                let code = errno
                if code == EINTR { continue }
                throw LoopbackServerError.ioFailed(operation: "send", errno: code)
            }
            remaining -= sent
            pointer += sent
        }
    }

    /// Blocks until one of `fds` is readable (or hung up); returns which ones are.
    static func waitReadable(_ fds: [Int32]) -> [Bool] {
        var entries = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        while true {
            let result = entries.withUnsafeMutableBufferPointer {
                poll($0.baseAddress, nfds_t($0.count), -1)
            }
            if result >= 0 { break }
            if errno != EINTR { return fds.map { _ in true } }
        }
        return entries.map { $0.revents != 0 }
    }

    /// A connected pair of local sockets, used to wake the accept loop.
    static func makeWakePair() throws -> (reader: Int32, writer: Int32) {
        var pair: [Int32] = [-1, -1]
        #if canImport(Glibc)
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        #else
        let type = SOCK_STREAM
        #endif
        if socketpair(AF_UNIX, type, 0, &pair) != 0 {
            throw LoopbackServerError.socketFailed(operation: "socketpair", errno: errno)
        }
        configureConnection(pair[0])
        configureConnection(pair[1])
        return (pair[0], pair[1])
    }

    /// Makes blocking reads give up after `seconds` (EAGAIN), so raw clients cannot hang a test.
    static func setReceiveTimeout(_ fd: Int32, seconds: Double) {
        let whole = seconds.rounded(.down)
        var value = timeval()
        value.tv_sec = .init(whole)
        value.tv_usec = .init((seconds - whole) * 1_000_000)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Whether an errno value means a receive timeout fired.
    static func isTimeout(_ code: Int32) -> Bool { code == EAGAIN || code == EWOULDBLOCK }

    /// Disables Nagle so small responses are not delayed behind the client's delayed ACKs.
    static func setNoDelay(_ fd: Int32) {
        var yes: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Stops both directions: wakes any thread blocked in recv/send on this socket.
    static func shutdownBoth(_ fd: Int32) {
        #if canImport(Glibc)
        _ = shutdown(fd, Int32(SHUT_RDWR))
        #else
        _ = shutdown(fd, SHUT_RDWR)
        #endif
    }

    /// Sends FIN while still allowing reads.
    static func shutdownWrite(_ fd: Int32) {
        #if canImport(Glibc)
        _ = shutdown(fd, Int32(SHUT_WR))
        #else
        _ = shutdown(fd, SHUT_WR)
        #endif
    }

    /// Makes the next close send RST instead of FIN, discarding unsent data: an abrupt reset.
    static func setLingerZero(_ fd: Int32) {
        var value = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &value, socklen_t(MemoryLayout<linger>.size))
    }

    /// Releases the descriptor.
    static func closeDescriptor(_ fd: Int32) {
        _ = close(fd)
    }

    private static func makeStreamSocket() throws -> Int32 {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        if fd < 0 { throw LoopbackServerError.socketFailed(operation: "socket", errno: errno) }
        configureConnection(fd)
        return fd
    }

    private static func configureConnection(_ fd: Int32) {
        #if canImport(Darwin)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        var yes: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &yes, socklen_t(MemoryLayout<Int32>.size))
        #endif
    }

    private static func loopbackAddress(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        #if canImport(Darwin)
        address.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
        #endif
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr = in_addr(s_addr: UInt32(0x7F00_0001).bigEndian)
        return address
    }
}
