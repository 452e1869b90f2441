import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Streams a task's body into a temporary file for ``URLTaskManager/download(for:)``, and ends
/// its ``Call`` with the file.
///
/// The file is written and closed on a serial queue of its own (each chunk waits for its
/// write, so the transfer keeps the disk's pace), never under a lock.
final class FileDownloadSink: CallSink, Sendable {
    /// The temporary file and its handle. Every write and the close run on `io`, so a close
    /// (the end, or a cancel) comes after every write queued before it.
    final class File: Sendable {
        let location: URL
        /// Whether the file was closed; read and written on `io` only (the lock makes it `Sendable`).
        private let closed = LockedState(false)
        private let handle: FileHandle
        private let io = DispatchQueue(label: "URLTaskManager.FileDownloadSink")

        /// Creates an empty temporary file to download into.
        init() throws {
            location = FileManager.default.temporaryDirectory.appendingPathComponent("URLTaskManager-\(UUID().uuidString).tmp")
            guard FileManager.default.createFile(atPath: location.path, contents: nil) else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: location.path])
            }
            handle = try FileHandle(forWritingTo: location)
        }

        /// Appends `data`; nothing once the file was closed.
        func write(_ data: Data) throws {
            try io.sync {
                guard !closed.withLock({ $0 }) else { return }
                try handle.write(contentsOf: data)
            }
        }

        /// Closes the file, after every write before this call; `true` the first time.
        @discardableResult
        func close() -> Bool {
            io.sync {
                guard
                    !closed.withLock({ closed in
                        defer { closed = true }; return closed
                    })
                else { return false }
                try? handle.close()
                return true
            }
        }

        /// Closes and removes the file: the caller will never see it.
        func discard() {
            if close() { try? FileManager.default.removeItem(at: location) }
        }
    }

    /// What was learnt of the task.
    private struct State {
        var response: URLResponse?
        var writeError: (any Error)?
    }

    private let state = LockedState(State())
    private let file: File
    private let call: Call<(URL, URLResponse)>

    init(file: File, call: Call<(URL, URLResponse)>) {
        self.file = file
        self.call = call
    }

    func receive(response: URLResponse) {
        state.withLock { $0.response = response }
    }

    func receive(data: Data) {
        guard state.withLock({ $0.writeError == nil }) else { return }
        do {
            try file.write(data)
        } catch {
            state.withLock { $0.writeError = $0.writeError ?? error }
        }
    }

    func finish() {
        let (error, response) = state.withLock { ($0.writeError, $0.response) }
        if let error { return fail(error) }
        guard let response else { return fail(URLError(.badServerResponse)) }
        // The file holds the whole body when it is handed over; a cancel that closed it first
        // answered the caller already.
        guard file.close() else { return }
        call.end(.success((file.location, response)))
    }

    /// The call removes the file once it answered `cancelled`.
    func cancelCall() {
        call.cancel()
    }

    func fail(_ error: any Error) {
        file.discard()
        call.end(.failure(error))
    }

    /// Chunk by chunk, each written to the file as it arrives.
    var delivery: TransferDelivery { .streamed }
}
