import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Streams a task's body into a temporary file for ``URLTaskManager/download(for:)``.
///
/// Created inside the caller's continuation, so the continuation exists before any event can
/// arrive; it is resumed exactly once, outside the lock. The file is written and closed on a
/// serial queue of its own (each chunk waits for its write, so the transfer keeps the disk's
/// pace), never under the lock: the lock guards only the continuation and what was learnt.
final class FileDownloadSink: TaskSink, Sendable {
    /// The caller's continuation until it is resumed, and what was learnt.
    private struct State {
        var continuation: CheckedContinuation<(URL, URLResponse), any Error>?
        var response: URLResponse?
        var writeError: (any Error)?
    }

    private let state: LockedState<State>
    /// Only touched on `io`.
    private let file: FileHandle
    private let location: URL
    private let io = DispatchQueue(label: "URLTaskManager.FileDownloadSink")

    init(location: URL, file: FileHandle, continuation: CheckedContinuation<(URL, URLResponse), any Error>) {
        self.location = location
        self.file = file
        self.state = LockedState(State(continuation: continuation))
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
        state.withLock { $0.response = response }
    }

    func receive(data: Data) {
        guard state.withLock({ $0.continuation != nil && $0.writeError == nil }) else { return }
        let failure: (any Error)? = io.sync {
            do {
                try file.write(contentsOf: data)
                return nil
            } catch {
                return error
            }
        }
        if let failure { state.withLock { $0.writeError = $0.writeError ?? failure } }
    }

    func finish() {
        let (error, response) = state.withLock { ($0.writeError, $0.response) }
        if let error { return complete(.failure(error)) }
        guard let response else { return complete(.failure(URLError(.badServerResponse))) }
        complete(.success((location, response)))
    }

    func fail(_ error: any Error) {
        complete(.failure(error))
    }

    private func complete(_ result: Result<(URL, URLResponse), any Error>) {
        let waiting: CheckedContinuation<(URL, URLResponse), any Error>? = state.withLock { state in
            defer { state.continuation = nil }
            return state.continuation
        }
        guard let waiting else { return }
        // After every write queued before it: the file holds the whole body when it is handed over.
        io.sync { try? file.close() }
        if case .failure = result { try? FileManager.default.removeItem(at: location) }
        waiting.resume(with: result)
    }
}
