import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension URLTaskManager {
    /// Downloads `request` to a temporary file, through the interceptors and reactors.
    ///
    /// `manager.session.download(for:)` works too, but on Linux a download task cannot pass
    /// through a custom `URLProtocol` (corelibs completes it only from its own protocol): there
    /// it goes out only if no interceptor would change it, and no reactor sees it; otherwise it
    /// fails with ``URLTaskError/Code-swift.struct/downloadNeedsPipeline``. This method runs the
    /// same pipeline as every other task and streams the body to disk as it arrives, so memory
    /// stays flat for large files. The file is yours: move it before the next launch.
    ///
    /// Cancelling the calling task cancels the download with `URLError.cancelled`.
    public func download(for request: URLRequest) async throws -> (URL, URLResponse) {
        let (location, file) = try FileDownloadSink.makeFile()
        let handle = HandleBox(url: request.url)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let sink = FileDownloadSink(location: location, file: file, continuation: continuation)
                handle.set(pipeline.start(request: request, body: URLTaskBody(request: request), sink: sink), sink: sink)
            }
        } onCancel: {
            handle.cancel()
        }
    }
}

/// Lets the cancellation handler reach a download that may not have started yet.
private final class HandleBox: Sendable {
    private struct State {
        var handle: (any PipelineTaskHandle)?
        var sink: FileDownloadSink?
        var cancelled = false
    }

    /// The download's URL, which its cancellation error names.
    private let url: URL?
    private let state = LockedState(State())

    init(url: URL?) {
        self.url = url
    }

    func set(_ handle: any PipelineTaskHandle, sink: FileDownloadSink) {
        let cancelNow: Bool = state.withLock { state in
            state.handle = handle
            state.sink = sink
            return state.cancelled
        }
        if cancelNow { cancel() }
    }

    func cancel() {
        let (handle, sink): ((any PipelineTaskHandle)?, FileDownloadSink?) = state.withLock { state in
            state.cancelled = true
            return (state.handle, state.sink)
        }
        // Unlike the session, nobody else reports the cancellation here.
        sink?.fail(URLError.cancelled(url: url))
        handle?.cancel()
    }
}
