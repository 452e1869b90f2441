import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The least any `URLProtocol` that forwards to an inner `URLSession` can do, as a floor for
/// the manager's figures: no interceptors, no reactors, no streaming, no cancellation, no
/// lifetime management. `startLoading` leaves the work queue (creating a task `sync`s onto it),
/// starts an inner task with a completion handler, and answers the client with the result.
///
/// On corelibs the inner completion runs on the inner session's delegate queue; like the
/// manager's transport, that queue runs on the inner session's work queue, which every session's
/// work queue shares, so the client may be answered right there. Not for use outside the
/// benchmark: it is what the manager costs above when it does nothing.
final class ForwardingProtocol: URLProtocol {
    static let inner = innerSession(delegate: nil)

    /// An inner session whose delegate callbacks (or completion handlers) run on its work queue.
    static func innerSession(delegate: (any URLSessionDelegate)?) -> URLSession {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        let session = URLSession(configuration: .default, delegate: delegate, delegateQueue: queue)
        #if canImport(FoundationNetworking)
        if let workQueue = Mirror(reflecting: session).children.first(where: { $0.label == "workQueue" })?.value as? DispatchQueue {
            queue.underlyingQueue = workQueue
        }
        #endif
        return session
    }

    /// A session whose every task goes through this protocol.
    static func makeSession() -> URLSession {
        session(through: ForwardingProtocol.self)
    }

    /// A session whose every task goes through `protocolClass`.
    static func session(through protocolClass: URLProtocol.Type) -> URLSession {
        let configuration = URLSessionConfiguration.default
        configuration.protocolClasses = [protocolClass] + (configuration.protocolClasses ?? [])
        return URLSession(configuration: configuration)
    }

    override class func canInit(with request: URLRequest) -> Bool { true }
    override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }

    override func startLoading() {
        let client = client
        nonisolated(unsafe) let this = self  // called back on the work queue only, as corelibs calls its protocols
        let request = request
        DispatchQueue.global().async {
            Self.inner.dataTask(with: request) { data, response, error in
                if let error {
                    client?.urlProtocol(this, didFailWithError: error)
                    return
                }
                if let response { client?.urlProtocol(this, didReceive: response, cacheStoragePolicy: .notAllowed) }
                if let data, !data.isEmpty { client?.urlProtocol(this, didLoad: data) }
                client?.urlProtocolDidFinishLoading(this)
            }.resume()
        }
    }

    override func stopLoading() {}
}
