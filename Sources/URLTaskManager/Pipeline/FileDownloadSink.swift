import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Streams a task's body into a temporary file for ``URLTaskManager/download(for:)``.
///
/// Created inside the caller's continuation, so the continuation exists before any event can
/// arrive; it is resumed exactly once, outside the lock.
final class FileDownloadSink: TaskSink, @unchecked Sendable {  // all state is guarded by `lock`.
    private let lock = NSLock()
    private var continuation: CheckedContinuation<(URL, URLResponse), any Error>?
    private var response: URLResponse?
    private var writeError: (any Error)?
    private let file: FileHandle
    private let location: URL

    init(location: URL, file: FileHandle, continuation: CheckedContinuation<(URL, URLResponse), any Error>) {
        self.location = location
        self.file = file
        self.continuation = continuation
    }

    /// Creates an empty temporary file to download into.
    static func makeFile() throws -> (URL, FileHandle) {
        let location = FileManager.default.temporaryDirectory.appendingPathComponent("URLTaskManager-\(UUID().uuidString).tmp")
        guard FileManager.default.createFile(atPath: location.path, contents: nil) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: location.path])
        }
        return (location, try FileHandle(forWritingTo: location))
    }

    func receive(response: URLResponse) {
        lock.withLock { self.response = response }
    }

    func receive(data: Data) {
        lock.withLock {
            guard continuation != nil, writeError == nil else { return }
            do { try file.write(contentsOf: data) } catch { writeError = error }
        }
    }

    func finish() {
        let (error, response) = lock.withLock { (writeError, self.response) }
        if let error { return complete(.failure(error)) }
        guard let response else { return complete(.failure(URLError(.badServerResponse))) }
        complete(.success((location, response)))
    }

    func fail(_ error: any Error) {
        complete(.failure(error))
    }

    private func complete(_ result: Result<(URL, URLResponse), any Error>) {
        let waiting: CheckedContinuation<(URL, URLResponse), any Error>? = lock.withLock {
            defer { continuation = nil }
            if continuation != nil { try? file.close() }
            return continuation
        }
        guard let waiting else { return }
        if case .failure = result { try? FileManager.default.removeItem(at: location) }
        waiting.resume(with: result)
    }
}
