/// The life of a download task made with the session's own download APIs on Linux, which
/// corelibs can complete only from its own protocol (see `CorelibsPlatform`).
///
/// Before the task is handed to corelibs, the interceptors are asked whether they would leave
/// its request as it is (``NativeDownloadCheck``); meanwhile the caller may cancel it. The check
/// and the cancel race; this machine decides what each of them does.
struct NativeDownloadStateMachine {
    private enum State {
        /// The interceptors are being asked.
        case checking
        /// Handed to corelibs' own protocol.
        case loading
        /// Failed by the check, or stopped by the caller: nothing more happens.
        case finished
    }

    /// What to do once the interceptors answered.
    enum CheckedAction: Equatable {
        /// Start corelibs' protocol: the request goes out as the caller made it.
        case startNative
        /// Fail the task with the check's error.
        case fail
        /// The caller stopped the task meanwhile (corelibs reports the cancellation itself).
        case none
    }

    /// What to do when corelibs stops the task (`stopLoading`).
    enum StopAction: Equatable {
        /// Stop corelibs' protocol, which is loading.
        case stopNative
        case none
    }

    private var state: State = .checking

    /// The interceptors answered: `passed` when none of them would change, hold or fail the request.
    mutating func checked(passed: Bool) -> CheckedAction {
        switch state {
        case .checking:
            state = passed ? .loading : .finished
            return passed ? .startNative : .fail
        case .finished:
            return .none
        case .loading:
            preconditionFailure("a download is checked once")
        }
    }

    mutating func stopLoading() -> StopAction {
        switch state {
        case .checking, .finished:
            state = .finished
            return .none
        case .loading:
            state = .finished
            return .stopNative
        }
    }
}
