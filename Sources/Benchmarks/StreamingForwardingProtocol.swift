import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// ``ForwardingProtocol`` with the inner task's events delivered as they come, through the inner
/// session's delegate (the response, each chunk, the end), as the manager streams them, instead
/// of one completion handler with the whole body.
///
/// Not a floor of its own: it answers a completion-handler task chunk by chunk, which corelibs
/// gets wrong for bodies of more than one chunk (the manager buffers those). It exists to show
/// what delivering three delegate events per request, each an operation on the inner session's
/// delegate queue, costs next to one completion (benchmark only, 2-byte bodies).
final class StreamingForwardingProtocol: URLProtocol {
    /// The protocol instance each inner task answers.
    // @unchecked Sendable: `routes` is guarded by `lock`; the rest is immutable.
    final class Router: NSObject, URLSessionDataDelegate, @unchecked Sendable {
        private let lock = NSLock()
        private var routes: [Int: StreamingForwardingProtocol] = [:]

        func add(_ task: URLSessionTask, _ forwarding: StreamingForwardingProtocol) {
            lock.withLock { routes[task.taskIdentifier] = forwarding }
        }

        private func route(_ task: URLSessionTask, remove: Bool = false) -> StreamingForwardingProtocol? {
            lock.withLock { remove ? routes.removeValue(forKey: task.taskIdentifier) : routes[task.taskIdentifier] }
        }

        func urlSession(
            _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
            completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
        ) {
            if let forwarding = route(dataTask) {
                forwarding.client?.urlProtocol(forwarding, didReceive: response, cacheStoragePolicy: .notAllowed)
            }
            completionHandler(.allow)
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            guard let forwarding = route(dataTask) else { return }
            forwarding.client?.urlProtocol(forwarding, didLoad: data)
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            guard let forwarding = route(task, remove: true) else { return }
            if let error {
                forwarding.client?.urlProtocol(forwarding, didFailWithError: error)
            } else {
                forwarding.client?.urlProtocolDidFinishLoading(forwarding)
            }
        }
    }

    static let router = Router()
    static let inner = ForwardingProtocol.innerSession(delegate: router)

    /// A session whose every task goes through this protocol.
    static func makeSession() -> URLSession {
        ForwardingProtocol.session(through: StreamingForwardingProtocol.self)
    }

    override class func canInit(with request: URLRequest) -> Bool { true }
    override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }

    override func startLoading() {
        nonisolated(unsafe) let this = self  // called back on the work queue only, as corelibs calls its protocols
        let request = request
        DispatchQueue.global().async {
            let task = Self.inner.dataTask(with: request)
            Self.router.add(task, this)
            task.resume()
        }
    }

    override func stopLoading() {}
}
