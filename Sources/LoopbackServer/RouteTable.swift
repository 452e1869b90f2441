import Foundation

/// The registered handlers, looked up per request: exact paths beat prefixes, longer prefixes beat
/// shorter ones, and a method-specific route beats a method-agnostic one at the same path.
final class RouteTable: @unchecked Sendable {  // unchecked: `routes` is only touched while holding `lock`
    /// A route handler, called on a connection thread.
    typealias Handler = @Sendable (RecordedRequest) -> ServerResponse

    private struct Key: Hashable {
        let method: String?
        let path: String
        let isPrefix: Bool
    }

    private let lock = NSLock()
    private var routes: [Key: Handler] = [:]

    /// Adds or replaces the handler for (`method`, `path`, kind).
    func add(method: String?, path: String, isPrefix: Bool, handler: @escaping Handler) {
        let key = Key(method: method?.uppercased(), path: path, isPrefix: isPrefix)
        lock.lock()
        routes[key] = handler
        lock.unlock()
    }

    /// Removes every route.
    func removeAll() {
        lock.lock()
        routes.removeAll()
        lock.unlock()
    }

    /// The best handler for a request, or nil when nothing matches.
    func handler(method: String, path: String) -> Handler? {
        let method = method.uppercased()
        lock.lock()
        defer { lock.unlock() }
        if let exact = routes[Key(method: method, path: path, isPrefix: false)]
            ?? routes[Key(method: nil, path: path, isPrefix: false)]
        {
            return exact
        }
        var best: (length: Int, specific: Bool, handler: Handler)?
        for (key, handler) in routes where key.isPrefix && path.hasPrefix(key.path) {
            guard key.method == nil || key.method == method else { continue }
            let candidate = (length: key.path.utf8.count, specific: key.method != nil, handler: handler)
            if let current = best,
                current.length > candidate.length || (current.length == candidate.length && current.specific)
            {
                continue
            }
            best = candidate
        }
        return best?.handler
    }
}
