import Foundation

#if canImport(FoundationNetworking)
import Synchronization
#endif

/// A value and the one lock that guards it: the lock type of every storage in the library.
///
/// A storage keeps its state machine (and nothing else that changes) in one `LockedState`, takes
/// the lock for one transition (``withLock(_:)``), and performs the returned action after the
/// lock is released. The closure must not call user code, a continuation or a
/// `URLProtocolClient`, and must not take another storage's lock: every lock section is one
/// event of one machine.
///
/// The lock is `Synchronization.Mutex` where the deployment target allows it (Linux: Swift 6's
/// standard library), and `NSLock` on Apple platforms, whose `Mutex` needs macOS 15 / iOS 18
/// while the package supports macOS 13 / iOS 16. This is the one platform fork outside
/// `Platform/`'s protocol: a generic type cannot be one of its static requirements.
final class LockedState<State>: @unchecked Sendable {  // `state` is read and written only inside `withLock`.
    #if canImport(FoundationNetworking)
    private let mutex = Mutex(())
    #else
    private let lock = NSLock()
    #endif
    private var state: State

    init(_ state: State) {
        self.state = state
    }

    /// Runs `body` on the state with the lock held, and returns what it returns (an action to
    /// perform once the lock is released).
    @inline(__always)
    func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        #if canImport(FoundationNetworking)
        return try mutex.withLock { _ in try body(&state) }
        #else
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
        #endif
    }
}
