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
    /// Cancelling the calling task cancels the download with `URLError.cancelled`, and removes
    /// what was written.
    public func download(for request: URLRequest) async throws -> (URL, URLResponse) {
        let file = try FileDownloadSink.File()
        let call = Call<(URL, URLResponse)>(url: request.url) { file.discard() }
        return try await pipeline.call(request, body: URLTaskBody(request: request), call) { FileDownloadSink(file: file, call: $0) }
    }
}
