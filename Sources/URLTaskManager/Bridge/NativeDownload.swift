import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A download task made with the session's own download APIs, which corelibs completes only
/// from its own protocol: checked against the interceptors (``NativeDownloadCheck``), then
/// handed to corelibs' protocol unchanged, or failed.
///
/// The check may await (an interceptor waiting for a token), so it runs off the work queue;
/// corelibs' protocol is then started on the task's work queue, where `startLoading` always
/// runs. A cancel during the check wins: the task is never started.
// @unchecked Sendable: `native` (a `URLProtocol`, not Sendable) is only touched on the work queue.
final class NativeDownload: @unchecked Sendable {
    private let machine = LockedState(NativeDownloadStateMachine())
    private let native: URLProtocol
    private let sink: ProtocolSink
    private let pipeline: Pipeline?
    private let workQueue: DispatchQueue?

    init(native: URLProtocol, sink: ProtocolSink, facts: OuterTaskFacts) {
        self.native = native
        self.sink = sink
        self.pipeline = facts.pipeline
        self.workQueue = facts.workQueue
    }

    /// Called from `startLoading`, on the work queue: returns at once.
    func start(_ request: URLRequest) {
        let carriesPolicy = request.value(forHTTPHeaderField: URLTaskPolicy.headerName) != nil
        guard let pipeline, !pipeline.interceptors.isEmpty || carriesPolicy else {
            // Nothing could change the request: no check, no event, no hop.
            _ = machine.withLock { $0.checked(passed: true) }
            return native.startLoading()
        }
        let recorder = pipeline.events.isListening ? TaskEventRecorder(id: .next(), request: request, hub: pipeline.events) : nil
        Task {
            let refusal = await NativeDownloadCheck.run(request, pipeline: pipeline, recorder: recorder)
            recorder?.nativeDownload(sentUnchanged: refusal == nil)
            switch machine.withLock({ $0.checked(passed: refusal == nil) }) {
            case .startNative:
                (workQueue ?? DispatchQueue.global()).async { self.native.startLoading() }
            case .fail:
                let error = refusal ?? .managerInvalidated
                recorder?.completed(error: error)
                sink.fail(error)
            case .none:
                recorder?.completed(error: URLError.cancelled(url: request.url))
            }
        }
    }

    /// Called from `stopLoading`, on the work queue.
    func stop() {
        sink.close()
        if case .stopNative = machine.withLock({ $0.stopLoading() }) { native.stopLoading() }
    }
}
