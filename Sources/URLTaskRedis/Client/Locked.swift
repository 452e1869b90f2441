import Foundation

/// A value and the `NSLock` that guards it, the one lock box of URLTaskRedis (the library's `LockedState` is internal to
/// URLTaskManager). Sections are short and never resume a continuation: callers take the lock for
/// one transition and act on its result after the lock is released.
final class RedisLocked<State>: @unchecked Sendable {  // `state` is read and written only under `lock`.
    private let lock = NSLock()
    private var state: State

    init(_ state: State) {
        self.state = state
    }

    /// Runs `body` on the state with the lock held.
    func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
    }
}
