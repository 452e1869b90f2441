import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One probe of a held host: whether `request` got an HTTP answer, through a completion handler
/// rather than the session's async `data(for:)`.
///
/// Cancelling a Swift task that awaits corelibs' `data(for:)` can deadlock on toolchains before
/// 6.4 (swift-corelibs-foundation #5412, fixed by #5417): the cancellation handler holds the
/// task's status lock while `URLSessionTask.cancel()` syncs onto the session's work queue, and
/// that queue, completing the same request, waits for the status lock to resume the caller. A
/// prober is cancelled whenever its host's last held request leaves, so a full test run met it.
/// Here the inner task is cancelled from another thread, after the status lock is released.
enum ProbeRequest {
    static func answered(_ request: URLRequest, session: URLSession) async -> Bool {
        let handle = ProbeHandle()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let task = session.dataTask(with: request) { _, response, _ in
                    continuation.resume(returning: response is HTTPURLResponse)
                }
                handle.start(task)
            }
        } onCancel: {
            // Never `cancel()` here: the status lock is held (see above).
            DispatchQueue.global().async { handle.cancel() }
        }
    }
}

/// The probe's inner task, cancelled once it exists, or as it starts if cancelled before.
private final class ProbeHandle: Sendable {
    private enum State {
        case idle
        case running(URLSessionDataTask)
        case cancelled
    }

    private let state = LockedState(State.idle)

    func start(_ task: URLSessionDataTask) {
        let cancelledFirst = state.withLock { state in
            guard case .idle = state else { return true }
            state = .running(task)
            return false
        }
        if cancelledFirst { task.cancel() }
        task.resume()
    }

    func cancel() {
        let running: URLSessionDataTask? = state.withLock { state in
            defer { state = .cancelled }
            if case .running(let task) = state { return task }
            return nil
        }
        running?.cancel()
    }
}
