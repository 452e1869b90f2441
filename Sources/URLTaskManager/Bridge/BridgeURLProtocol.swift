import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The `URLProtocol` subclass a manager puts first in its session's `protocolClasses`.
///
/// It holds no logic: `startLoading` hands the request to the ``Pipeline`` of the session that
/// created the task (``OuterTaskFacts/pipeline``) with a ``ProtocolSink`` to answer through,
/// and `stopLoading` cancels that work. Both run on the session's serial work queue, which
/// must never block, so the pipeline does everything on its own threads.
class BridgeURLProtocol: URLProtocol {
    /// The number of the session this class serves (see `NumberedBridgeURLProtocol`): every
    /// manager's session lists a class of its own; `nil` for this base class, which no session
    /// lists.
    class var sessionNumber: Int? { nil }

    private var handle: PipelineTaskHandle?
    private var sink: ProtocolSink?
    private var native: NativeDownload?

    override class func canInit(with request: URLRequest) -> Bool {
        // Only managers' sessions list this class, so every request it is asked about is one
        // of theirs.
        guard let scheme = request.url?.scheme?.lowercased() else { return false }
        return scheme == "http" || scheme == "https"
    }

    override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }

    override func startLoading() {
        guard let client else { return }
        guard let task else {
            client.urlProtocol(self, didFailWithError: URLError(.unsupportedURL))
            return
        }
        let facts = Platform.facts(for: task, request: request, bridge: Self.self)
        let sink = ProtocolSink(urlProtocol: self, client: client, facts: facts)
        self.sink = sink
        if facts.isDownload, let nativeClass = Platform.nativeHTTPProtocol {
            // See `CorelibsPlatform`: only the native protocol can complete a download task.
            let native = NativeDownload(
                native: nativeClass.init(task: task, cachedResponse: cachedResponse, client: client), sink: sink, facts: facts)
            self.native = native
            native.start(request)
            return
        }
        guard let pipeline = facts.pipeline else {
            sink.fail(URLTaskError.managerInvalidated)
            return
        }
        if facts.bodyMissing {
            sink.fail(URLTaskError.uploadBodyUnavailable)
            return
        }
        if facts.bodyFromDelegate {
            // The delegate may answer later, from any thread; a cancel before then wins.
            let deferred = DeferredTaskHandle()
            handle = deferred
            let request = self.request
            Platform.requestBodyStream(for: task, session: facts.session) { stream in
                let body: URLTaskBody = stream.map { .stream($0) } ?? .none
                deferred.start { pipeline.start(request: request, body: body, sink: sink) }
            }
            return
        }
        handle = pipeline.start(request: request, body: facts.body, sink: sink)
    }

    override func stopLoading() {
        if let native {
            native.stop()
            return
        }
        // The session reports the cancellation itself right after this call; from now on the
        // sink drops anything the pipeline still sends.
        sink?.close()
        handle?.cancel()
    }
}
