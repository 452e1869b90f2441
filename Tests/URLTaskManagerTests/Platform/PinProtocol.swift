import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
@testable import URLTaskManager
import TestSupport

#if canImport(FoundationNetworking)
/// A deliberately naive `URLProtocol`, NOT the library's bridge: it records what corelibs
/// shows a custom protocol, then answers locally (on the session's work queue, inside
/// `startLoading`, as the native protocol does) with a 200 and the chunks its URL asks for:
/// `?chunks=a,b` sends `didLoad("a")` then `didLoad("b")`.
///
/// Every request carries `?id=<uuid>`; observations are filed under that id.
final class PinProtocol: URLProtocol {
    /// What the protocol saw of one request.
    struct Observation: Sendable {
        var canInitSawMarkerHeader: Bool?
        var canInitSawProperty: Bool?
        var startSawHTTPBody: Bool?
        var startSawBodyStream: Bool?
        var startSawMarkerHeader: Bool?
        var startSawProperty: Bool?
        var startSawRequestHeader: Bool?
        /// `Platform.facts(for:request:)` as seen from `startLoading`.
        var delivery: BodyDelivery?
        var workQueueFound = false
        /// Whether `startLoading` ran on the queue `Platform` reported as the work queue.
        var ranOnWorkQueue = false
        var body: String?
        var bodyMissing: Bool?
        var bodyFromDelegate: Bool?
        var isDownload: Bool?
    }

    static let markerHeader = "X-Pin-Marker"
    static let requestHeader = "X-Pin-Request"
    static let propertyKey = "URLTaskManagerTests.pin"

    private static let observations = LockedBox<[String: Observation]>([:])
    private static let queueKey = DispatchSpecificKey<String>()

    static func observation(_ id: String) -> Observation? {
        observations.snapshot[id]
    }

    static func url(_ id: String, chunks: [String] = ["ok"]) -> URL {
        URL(string: "http://127.0.0.1:9/pin?id=\(id)&chunks=\(chunks.joined(separator: ","))")!
    }

    private static func parameter(_ name: String, of request: URLRequest) -> String? {
        request.url.flatMap { URLComponents(url: $0, resolvingAgainstBaseURL: false) }?
            .queryItems?.first { $0.name == name }?.value
    }

    private static func update(_ request: URLRequest, _ change: (inout Observation) -> Void) {
        guard let id = parameter("id", of: request) else { return }
        observations.withLock { change(&$0[id, default: Observation()]) }
    }

    override class func canInit(with request: URLRequest) -> Bool {
        guard request.url?.path == "/pin" else { return false }
        update(request) {
            $0.canInitSawMarkerHeader = request.value(forHTTPHeaderField: markerHeader) != nil
            $0.canInitSawProperty = URLProtocol.property(forKey: propertyKey, in: request) != nil
        }
        return true
    }

    override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }

    /// corelibs' internal `URLSessionTask.session`.
    private static let taskSession = StoredField(named: "session", in: URLSessionTask.self)

    override func startLoading() {
        let request = self.request
        var facts: OuterTaskFacts?
        if let task {
            // The library never reads a task's session (a manager's session has a protocol
            // class of its own); this protocol, on plain sessions, reads it to pin the rest.
            let session = Self.taskSession.map { Reflection.unwrapOptional($0.read(from: task)) as? URLSession } ?? nil
            facts = Platform.facts(for: task, request: request, plainSession: session)
        }
        let token = UUID().uuidString
        facts?.workQueue?.setSpecific(key: Self.queueKey, value: token)
        let onWorkQueue = DispatchQueue.getSpecific(key: Self.queueKey) == token
        Self.update(request) {
            $0.startSawHTTPBody = request.httpBody != nil
            $0.startSawBodyStream = request.httpBodyStream != nil
            $0.startSawMarkerHeader = request.value(forHTTPHeaderField: Self.markerHeader) != nil
            $0.startSawRequestHeader = request.value(forHTTPHeaderField: Self.requestHeader) != nil
            $0.startSawProperty = URLProtocol.property(forKey: Self.propertyKey, in: request) != nil
            $0.delivery = facts?.delivery
            $0.workQueueFound = facts?.workQueue != nil
            $0.ranOnWorkQueue = onWorkQueue
            $0.body = facts.map { Self.describe($0.body) }
            $0.bodyMissing = facts?.bodyMissing
            $0.bodyFromDelegate = facts?.bodyFromDelegate
            $0.isDownload = facts?.isDownload
        }
        facts?.workQueue?.setSpecific(key: Self.queueKey, value: nil)

        guard let client, let url = request.url else { return }
        let chunks = (Self.parameter("chunks", of: request) ?? "").split(separator: ",").map { Data($0.utf8) }
        let response = HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: ["Content-Type": "text/plain"])!
        client.urlProtocol(self, didReceive: response, cacheStoragePolicy: .notAllowed)
        for chunk in chunks { client.urlProtocol(self, didLoad: chunk) }
        client.urlProtocolDidFinishLoading(self)
    }

    override func stopLoading() {}

    private static func describe(_ body: URLTaskBody) -> String {
        switch body {
        case .none: "none"
        case .data(let data): "data(\(data.count) bytes, sha \(SHA256Hex.of(data)))"
        case .file(let url): "file(\(url.lastPathComponent))"
        case .stream: "stream"
        }
    }
}

/// SHA-256 shorthand for pins.
enum SHA256Hex {
    static func of(_ data: Data) -> String { String(SHA256.hex(data).prefix(16)) }
}
#endif
