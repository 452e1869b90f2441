import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// What the resilience components (coalescing, circuit breaker, rate limiter, offline hold)
// share. They are built only on the public protocols (`URLTaskInterceptor`, `URLTaskReactor`,
// `InterceptCommand`) and public Foundation API, as an app could build them: nothing here
// reaches into the pipeline.

/// The key hosts are told apart by: scheme, host and port, as URLSession pools connections.
enum ResilienceHost {
    static func key(of url: URL?) -> String {
        guard let url else { return "" }
        let scheme = url.scheme?.lowercased() ?? ""
        let port = url.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : 0)
        return "\(scheme)://\(url.host?.lowercased() ?? ""):\(port)"
    }

    /// `url` without query, fragment or user info, for an event (where a token could hide).
    static func redacted(_ url: URL?) -> URL? {
        guard let url, var parts = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return nil }
        parts.query = nil
        parts.fragment = nil
        parts.user = nil
        parts.password = nil
        return parts.url
    }
}

extension Duration {
    /// The duration in seconds, for the resilience components' arithmetic.
    var resilienceSeconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

/// The subscribers of one component's decisions. A reader that falls behind keeps the newest
/// events; nobody listening costs one lock.
final class DecisionHub<Event: Sendable>: @unchecked Sendable {  // `subscribers` and `nextKey` are guarded by `lock`.
    private let lock = NSLock()
    private var subscribers: [Int: AsyncStream<Event>.Continuation] = [:]
    private var nextKey = 0

    func subscribe(bufferingNewest limit: Int) -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(limit))
        let key: Int = lock.withLock {
            nextKey += 1
            subscribers[nextKey] = continuation
            return nextKey
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            _ = self.lock.withLock { self.subscribers.removeValue(forKey: key) }
        }
        return stream
    }

    func emit(_ event: Event) {
        let current = lock.withLock { Array(subscribers.values) }
        for continuation in current { continuation.yield(event) }
    }

    deinit {
        for continuation in subscribers.values { continuation.finish() }
    }
}
