/// The life of one call of the manager's own methods (``URLTaskManager/data(for:)`` and its
/// family): a Swift task waiting on a continuation for a pipeline task that has no outer
/// `URLSessionTask`.
///
/// Three parties meet here, each on a thread of its own: the calling task, which hands over its
/// continuation and may be cancelled at any moment (even before it did); the pipeline, which
/// returns the task's handle and, later or even before that, ends the task; and the caller's
/// cancellation, which must answer at once (`URLError.cancelled`, as URLSession's async methods
/// do) and stop the pipeline task, which may not exist yet. The continuation is resumed exactly
/// once, by whichever of the end and the cancellation comes first; the other finds nothing to do.
///
/// `Continuation` is a `CheckedContinuation` in the library and a plain value in the tests.
struct CallStateMachine<Continuation> {
    private enum State {
        /// Made; the calling task has not handed over its continuation yet.
        case idle
        /// Cancelled before the continuation was handed over: the call answers as soon as it is.
        case cancelledIdle
        /// The continuation is here and the pipeline is starting the task: no handle yet.
        case starting(Continuation)
        /// The pipeline task runs.
        case running(Continuation, any PipelineTaskHandle)
        /// The caller was answered (cancelled) while the pipeline was still starting the task:
        /// its handle is cancelled as soon as it arrives.
        case cancelling
        /// The caller was answered; nothing is left to do.
        case ended
    }

    private var state = State.idle

    enum AttachAction {
        /// Start the pipeline task.
        case start
        /// The caller cancelled before: answer `cancelled` now, and start nothing.
        case answerCancelled(Continuation)
    }

    /// The calling task handed over its continuation.
    mutating func attach(_ continuation: Continuation) -> AttachAction {
        switch state {
        case .idle:
            state = .starting(continuation)
            return .start
        case .cancelledIdle:
            state = .ended
            return .answerCancelled(continuation)
        case .starting, .running, .cancelling, .ended:
            preconditionFailure("a call's continuation is handed over once")
        }
    }

    enum StartedAction {
        case none
        /// The caller cancelled while the task was starting: stop it.
        case cancel(any PipelineTaskHandle)
    }

    /// The pipeline returned the task's handle (the task may already have ended).
    mutating func started(_ handle: any PipelineTaskHandle) -> StartedAction {
        switch state {
        case .starting(let continuation):
            state = .running(continuation, handle)
            return .none
        case .cancelling:
            state = .ended
            return .cancel(handle)
        case .ended:
            // Ended while starting (an interceptor answered or failed it at once).
            return .none
        case .idle, .cancelledIdle, .running:
            preconditionFailure("a handle arrives once, after the continuation")
        }
    }

    enum CancelAction {
        case none
        /// Answer `cancelled`, and stop the pipeline task if there is one yet.
        case answerCancelled(Continuation, stop: (any PipelineTaskHandle)?)
    }

    /// The calling task was cancelled.
    mutating func cancelled() -> CancelAction {
        switch state {
        case .idle:
            state = .cancelledIdle
            return .none
        case .starting(let continuation):
            state = .cancelling
            return .answerCancelled(continuation, stop: nil)
        case .running(let continuation, let handle):
            state = .ended
            return .answerCancelled(continuation, stop: handle)
        case .cancelledIdle, .cancelling, .ended:
            return .none
        }
    }

    enum EndAction {
        case none
        /// Give the caller the task's outcome.
        case answer(Continuation)
    }

    /// The pipeline ended the task (or, for ``URLTaskManager/bytes(for:)``, delivered its
    /// response head, which is the end of the call).
    mutating func ended() -> EndAction {
        switch state {
        case .starting(let continuation), .running(let continuation, _):
            state = .ended
            return .answer(continuation)
        case .cancelling, .ended:
            // The caller was already told it was cancelled.
            return .none
        case .idle, .cancelledIdle:
            preconditionFailure("a task ended before it was started")
        }
    }
}
