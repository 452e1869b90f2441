import Foundation

/// A scriptable HTTP/1.1 server on 127.0.0.1 for tests, in the spirit of OkHttp's MockWebServer:
/// register handlers per route, point a client at `baseURL`, then assert on the recorded requests.
/// It listens on an OS-chosen port, serves each connection on its own thread with blocking sockets,
/// and needs nothing but the C library.
///
/// Handlers must not capture the server strongly (that creates a cycle and the server would only
/// stop on `shutdown()`); call `shutdown()` in `tearDown` anyway to release the port promptly.
public final class LoopbackServer: Sendable {
    /// The signature of a route handler: runs on a server thread, may block (for example on a `Gate`).
    public typealias Handler = @Sendable (RecordedRequest) -> ServerResponse

    private let core: ServerCore

    /// Starts a server with the default `Configuration`.
    public convenience init() throws {
        try self.init(configuration: Configuration())
    }

    /// Binds 127.0.0.1:0, listens, and starts accepting connections on a background thread.
    public init(configuration: Configuration) throws {
        core = try ServerCore(configuration: configuration)
    }

    deinit { core.shutdown() }

    /// The TCP port the OS assigned.
    public var port: Int { core.port }

    /// The settings this server was started with.
    public var configuration: Configuration { core.configuration }

    /// `http://127.0.0.1:PORT`, the root clients should talk to.
    public var baseURL: URL { URL(string: "http://127.0.0.1:\(core.port)")! }

    /// `baseURL` plus a path and optional query, e.g. `url("/a?b=1")`.
    public func url(_ pathAndQuery: String) -> URL {
        let suffix = pathAndQuery.hasPrefix("/") ? pathAndQuery : "/" + pathAndQuery
        return URL(string: "http://127.0.0.1:\(core.port)\(suffix)")!
    }

    /// Registers `handler` for requests whose path (without query, not percent-decoded) equals `path`.
    /// `method` nil matches any method (compared case-insensitively). A later registration for the same
    /// method and path replaces the earlier one; a method-specific route beats a method-agnostic one.
    public func route(_ method: String? = nil, _ path: String, _ handler: @escaping Handler) {
        core.routes.add(method: method, path: path, isPrefix: false, handler: handler)
    }

    /// Registers `handler` for `path` and any method; lets `route("/a") { ... }` read naturally, since
    /// Swift cannot skip the defaulted `method` of the three-argument form.
    public func route(_ path: String, _ handler: @escaping Handler) {
        route(nil, path, handler)
    }

    /// Registers `handler` for every path starting with `prefix`. Exact routes win, then the longest prefix.
    public func route(_ method: String? = nil, prefix: String, _ handler: @escaping Handler) {
        core.routes.add(method: method, path: prefix, isPrefix: true, handler: handler)
    }

    /// Removes every route, so all requests get 404 until new ones are registered.
    public func removeAllRoutes() {
        core.routes.removeAll()
    }

    /// Every recorded request, in arrival order.
    public var requests: [RecordedRequest] { core.log.all }

    /// The recorded requests whose path is `path`, in arrival order.
    public func requests(path: String) -> [RecordedRequest] {
        core.log.matching(path: path)
    }

    /// How many requests for `path` have arrived.
    public func requestCount(path: String) -> Int {
        core.log.matching(path: path).count
    }

    /// Suspends until at least `count` requests for `path` (nil = any path) have been fully read, and
    /// returns the first `count` of them. Requests are recorded before their handler runs, so this also
    /// sees requests whose responses are held on a `Gate`. Throws `LoopbackServerError.timeout` after
    /// `timeout`, `.shutDown` if the server stops first, and `CancellationError` if the task is cancelled.
    public func waitForRequests(
        path: String? = nil, count: Int, timeout: Duration = .seconds(10)
    ) async throws -> [RecordedRequest] {
        try await core.log.wait(path: path, count: count, timeout: timeout)
    }

    /// Forgets all recorded requests (sequence numbers keep increasing).
    public func resetRecords() {
        core.log.reset()
    }

    /// How many TCP connections have been accepted so far (to assert connection reuse).
    public var acceptedConnectionCount: Int { core.registry.acceptedCount }

    /// How many TCP connections are open right now.
    public var openConnectionCount: Int { core.registry.openCount }

    /// Closes the listener and every live connection and fails pending `waitForRequests` calls.
    /// Idempotent and never hangs: threads blocked in handlers are not waited for (their sockets are
    /// already closed, so they exit as soon as the handler returns). Also called from `deinit`.
    public func shutdown() {
        core.shutdown()
    }
}
