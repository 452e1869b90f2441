import Foundation

/// A pipeline task that starts only once its body is known.
///
/// `uploadTask(withStreamedRequest:)` gets its body from the session delegate, which may answer
/// later and from any thread; `stopLoading` may come first. Whichever happens first wins: a
/// cancel before the start means the task is never started, a cancel during or after it
/// cancels the started task.
final class DeferredTaskHandle: PipelineTaskHandle, Sendable {
    private enum State {
        case waiting
        case starting
        case started(any PipelineTaskHandle)
        case cancelled
    }

    private let state = LockedState(State.waiting)

    /// Starts the task with `make` (called without the lock held), unless it was cancelled or
    /// already started.
    func start(_ make: () -> any PipelineTaskHandle) {
        let proceed: Bool = state.withLock { state in
            guard case .waiting = state else { return false }
            state = .starting
            return true
        }
        guard proceed else { return }
        let handle = make()
        let cancelledMeanwhile: Bool = state.withLock { state in
            if case .cancelled = state { return true }
            state = .started(handle)
            return false
        }
        if cancelledMeanwhile { handle.cancel() }
    }

    func cancel() {
        let started: (any PipelineTaskHandle)? = state.withLock { state in
            defer { state = .cancelled }
            if case .started(let handle) = state { return handle }
            return nil
        }
        started?.cancel()
    }
}
