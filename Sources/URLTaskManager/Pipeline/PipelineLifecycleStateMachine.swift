/// The life of one manager's pipeline, from its session's creation to the release of the inner
/// session, without I/O.
///
/// The pipeline lives as long as the session the manager handed out (see
/// ``URLTaskManager/session``): that session owns it, and its invalidation or release ends it.
/// Two facts of swift-corelibs-foundation shape the states:
/// - creating a task on an invalidated session is a `fatalError("Session invalidated")`, so the
///   inner session may be invalidated only once no transfer is being handed to it;
/// - `finishTasksAndInvalidate()` lets every running task finish, so the inner session must
///   stay until the last of the pipeline's tasks has ended.
///
/// ```
///  active(tasks, starting) ──finishRequested──> finishing(tasks)     (tasks > 0)
///                          ──finishRequested──> invalidated          (tasks == 0: finish inner)
///  finishing(1) ──taskEnded──> invalidated                           (finish inner)
///  active / finishing(starting > 0) ──cancelRequested──> cancelling(starting)
///  cancelling(1) ──transferStarted──> invalidated                    (abandon inner)
///  active / finishing(starting == 0) ──cancelRequested──> invalidated (abandon inner)
/// ```
struct PipelineLifecycleStateMachine {
    private enum State {
        /// Tasks are accepted and sent. `starting` counts transfers being handed to the inner
        /// session right now.
        case active(tasks: Int, starting: Int)
        /// The session was told to finish its tasks and invalidate (or was released): running
        /// tasks go on, and so do tasks the session accepted before that; the inner session is
        /// released when the last one ends.
        case finishing(tasks: Int, starting: Int)
        /// The session was invalidated and cancelled: nothing more is sent, and the inner
        /// session is abandoned once no transfer is being handed to it.
        case cancelling(starting: Int)
        /// The inner session is released (or being released); nothing more is sent.
        case invalidated
    }

    /// What to do with the inner session.
    enum InnerSessionAction: Equatable {
        case none
        /// Let its tasks finish, then release it (`finishTasksAndInvalidate()`).
        case finish
        /// Abandon its transfers: release it without cancelling them one by one (they have no
        /// caller left; `finishTasksAndInvalidate()`, which ends it when the last one ends).
        /// Cancelling dozens of transfers at once, some of them ending on their own at that
        /// moment, crashed corelibs (see `Pipeline.perform(_:)`).
        case abandon
    }

    enum TaskStartAction: Equatable {
        /// Run the task.
        case run
        /// The session was invalidated and cancelled: fail it with `URLError.cancelled`, as
        /// the session itself reports it.
        case refuseCancelled
        /// The session was invalidated before this task reached the pipeline.
        case refuseInvalidated
    }

    enum CancelAction: Equatable {
        case none
        /// Fail every task held in a batch with `URLError.cancelled`, then do `inner` to the
        /// inner session.
        case cancelHeldTasks(inner: InnerSessionAction)
    }

    private var state = State.active(tasks: 0, starting: 0)
    private var cancelled = false

    /// Tasks the pipeline runs now (for tests and ``Pipeline``'s diagnostics).
    var tasks: Int {
        switch state {
        case .active(let tasks, _), .finishing(let tasks, _): tasks
        case .cancelling, .invalidated: 0
        }
    }

    /// Whether the session was invalidated and cancelled.
    var isCancelled: Bool { cancelled }

    /// Whether the inner session is released or about to be.
    var isInvalidated: Bool {
        if case .invalidated = state { true } else { false }
    }

    /// A task (an outer task's `startLoading`, or ``URLTaskManager/download(for:)``) arrives.
    mutating func taskStarted() -> TaskStartAction {
        switch state {
        case .active(let tasks, let starting):
            state = .active(tasks: tasks + 1, starting: starting)
            return .run
        case .finishing(let tasks, let starting):
            state = .finishing(tasks: tasks + 1, starting: starting)
            return .run
        case .cancelling, .invalidated:
            return refusal
        }
    }

    /// A task the pipeline accepted has completed.
    mutating func taskEnded() -> InnerSessionAction {
        switch state {
        case .active(let tasks, let starting):
            assert(tasks > 0, "a task ended that never started")
            state = .active(tasks: tasks - 1, starting: starting)
            return .none
        case .finishing(let tasks, let starting):
            assert(tasks > 0, "a task ended that never started")
            guard tasks > 1 || starting > 0 else {
                state = .invalidated
                return .finish
            }
            state = .finishing(tasks: tasks - 1, starting: starting)
            return .none
        case .cancelling, .invalidated:
            // Tasks are no longer counted: the inner session is cancelled regardless.
            return .none
        }
    }

    /// A task is about to create its inner task. Anything but ``TaskStartAction/run`` means
    /// it must not: the inner session is, or is about to be, invalidated.
    mutating func transferStarting() -> TaskStartAction {
        switch state {
        case .active(let tasks, let starting):
            state = .active(tasks: tasks, starting: starting + 1)
            return .run
        case .finishing(let tasks, let starting):
            state = .finishing(tasks: tasks, starting: starting + 1)
            return .run
        case .cancelling, .invalidated:
            return refusal
        }
    }

    /// Why nothing new may start once the inner session is going away: a cancelled session's
    /// tasks end `cancelled`, as the session reports them; otherwise the session was invalidated.
    private var refusal: TaskStartAction {
        cancelled ? .refuseCancelled : .refuseInvalidated
    }

    /// The inner task of a ``transferStarting()`` that returned ``TaskStartAction/run`` exists
    /// and was resumed.
    mutating func transferStarted() -> InnerSessionAction {
        switch state {
        case .active(let tasks, let starting):
            state = .active(tasks: tasks, starting: starting - 1)
            return .none
        case .finishing(let tasks, let starting):
            // The last task may have ended while its transfer was being handed over (a cancel
            // that raced with the send): the inner session goes once that transfer exists.
            guard tasks > 0 || starting > 1 else {
                state = .invalidated
                return .finish
            }
            state = .finishing(tasks: tasks, starting: starting - 1)
            return .none
        case .cancelling(let starting):
            guard starting > 1 else {
                state = .invalidated
                return .abandon
            }
            state = .cancelling(starting: starting - 1)
            return .none
        case .invalidated:
            preconditionFailure("a transfer started after the inner session was invalidated")
        }
    }

    /// The session was told to finish its tasks and invalidate, and every task it had resumed
    /// by then has reached the pipeline; or the session was released.
    mutating func finishRequested() -> InnerSessionAction {
        switch state {
        case .active(let tasks, let starting):
            // A transfer being handed over keeps the inner session even with no task left: a
            // task cancelled while it was being sent has ended, and its transfer is created
            // (then cancelled) a moment later; invalidating before would crash corelibs.
            guard tasks > 0 || starting > 0 else {
                state = .invalidated
                return .finish
            }
            state = .finishing(tasks: tasks, starting: starting)
            return .none
        case .finishing, .cancelling, .invalidated:
            return .none
        }
    }

    /// The session was invalidated and cancelled.
    mutating func cancelRequested() -> CancelAction {
        switch state {
        case .active(_, let starting), .finishing(_, let starting):
            cancelled = true
            guard starting > 0 else {
                state = .invalidated
                return .cancelHeldTasks(inner: .abandon)
            }
            state = .cancelling(starting: starting)
            return .cancelHeldTasks(inner: .none)
        case .cancelling, .invalidated:
            return .none
        }
    }
}
