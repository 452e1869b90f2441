import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Where a task's outcome goes: the outer `URLProtocolClient` for tasks made through the
/// manager's session (``ProtocolSink``), or a file for ``URLTaskManager/download(for:)``.
///
/// The pipeline calls it in order: at most one response, data chunks, then exactly one of
/// `finish` or `fail`. Implementations must return quickly and never call back into the
/// pipeline.
protocol TaskSink: Sendable {
    func receive(response: URLResponse)
    func receive(data: Data)
    func finish()
    func fail(_ error: any Error)
}

extension ProtocolSink: TaskSink {}
