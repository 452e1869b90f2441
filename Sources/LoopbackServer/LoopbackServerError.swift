/// Everything LoopbackServer (and its raw client) can throw, typed so tests can assert on the exact failure.
public enum LoopbackServerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `socket`, `getsockname` or `socketpair` failed; a test machine out of descriptors usually.
    case socketFailed(operation: String, errno: Int32)
    /// Binding 127.0.0.1:0 failed (no loopback interface, sandbox restrictions).
    case bindFailed(errno: Int32)
    /// `listen` failed on the freshly bound socket.
    case listenFailed(errno: Int32)
    /// The raw client could not connect (the server is shut down, or the port is wrong).
    case connectFailed(errno: Int32)
    /// A send or receive failed on an established connection.
    case ioFailed(operation: String, errno: Int32)
    /// `waitForRequests` gave up: `received` of the `expected` requests for `path` (nil = any) had arrived.
    case timeout(path: String?, expected: Int, received: Int)
    /// The raw client's read deadline passed with no data from the server.
    case readTimedOut
    /// The server was shut down while something was still waiting on it.
    case shutDown
    /// The peer closed the connection before a complete message arrived.
    case connectionClosed
    /// The bytes received were not a valid HTTP/1.1 message; the string says what was wrong.
    case malformedMessage(String)

    /// A readable explanation for test failure logs.
    public var description: String {
        switch self {
        case .socketFailed(let operation, let code): return "\(operation) failed (errno \(code))"
        case .bindFailed(let code): return "bind to 127.0.0.1:0 failed (errno \(code))"
        case .listenFailed(let code): return "listen failed (errno \(code))"
        case .connectFailed(let code): return "connect failed (errno \(code))"
        case .ioFailed(let operation, let code): return "\(operation) failed (errno \(code))"
        case .timeout(let path, let expected, let received):
            return "timed out waiting for \(expected) request(s) to \(path ?? "any path"); \(received) arrived"
        case .readTimedOut: return "timed out reading from the server"
        case .shutDown: return "the server was shut down"
        case .connectionClosed: return "the connection closed before a complete message arrived"
        case .malformedMessage(let reason): return "malformed HTTP message: \(reason)"
        }
    }
}
