import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension URLSession {
    /// `data(for:)`, except that cancelling the calling task never blocks the thread that
    /// cancels it.
    ///
    /// On swift-corelibs-foundation (6.3.1) `data(for:)`'s cancellation handler calls
    /// `URLSessionTask.cancel()` synchronously, which waits for the session's work queue, while
    /// the Swift runtime holds the cancelled task's status lock. If the work queue is at that
    /// moment completing the same request, it resumes the task's continuation, which needs that
    /// lock: both wait forever (caught twice in the test suite, with `gdb`, when a refresh's
    /// deadline cancelled its token request). Here the cancel is handed to another thread.
    func dataCancellingSafely(for request: URLRequest) async throws -> (Data, URLResponse) {
        let handle = CancellableTask()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let task = dataTask(with: request) { data, response, error in
                    if let error {
                        continuation.resume(throwing: error)
                    } else if let data, let response {
                        continuation.resume(returning: (data, response))
                    } else {
                        continuation.resume(throwing: URLError(.badServerResponse))
                    }
                }
                handle.start(task)
            }
        } onCancel: {
            handle.cancel()
        }
    }
}

/// A task that may be cancelled before it was created, and whose cancel never runs on the
/// cancelling thread.
private final class CancellableTask: @unchecked Sendable {  // `task` and `cancelled` are guarded by `lock`.
    private let lock = NSLock()
    private var task: URLSessionTask?
    private var cancelled = false

    func start(_ task: URLSessionTask) {
        let cancelledMeanwhile = lock.withLock {
            self.task = task
            return cancelled
        }
        task.resume()
        if cancelledMeanwhile { Self.cancel(task) }
    }

    func cancel() {
        let task: URLSessionTask? = lock.withLock {
            cancelled = true
            return self.task
        }
        if let task { Self.cancel(task) }
    }

    private static func cancel(_ task: URLSessionTask) {
        DispatchQueue.global().async { task.cancel() }
    }
}
