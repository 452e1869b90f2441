import Foundation

/// A value and the one lock that guards it: the lock type of every storage in the package.
///
/// `package`, not public: URLTaskResilience, URLTaskOAuth2 and URLTaskRedis keep their storages
/// in it too (the one lock box of the package), and an app never sees it.
///
/// A storage keeps its state machine (and nothing else that changes) in one `LockedState`, takes
/// the lock for one transition (``withLock(_:)``), and performs the returned action after the
/// lock is released. The closure must not call user code, a continuation or a
/// `URLProtocolClient`, and must not take another storage's lock: every lock section is one
/// event of one machine.
///
/// The lock is an `NSLock` (a pthread mutex) on every platform, not `Synchronization.Mutex`.
/// Apple platforms' `Mutex` needs macOS 15 / iOS 18, and the package supports macOS 13 / iOS 16.
/// On Linux `Mutex` is available, but it waits on a futex inside the standard library, which the
/// thread sanitizer does not instrument: with it, the sanitizer cannot see that the lock orders
/// the sections, and reports them as "Swift access races", in this file and in the machines it
/// guards, every one false (`scripts/tsan.sh`, whose run must stay at 0 warnings; the count:
/// the Performance article, "Figures behind other choices"). A pthread mutex is seen by the
/// sanitizer.
///
/// The state lives in memory of its own rather than in a stored `var`: the lock already makes
/// each section exclusive, and a stored property of a class would add the runtime's dynamic
/// exclusivity check (`swift_beginAccess`/`swift_endAccess`) to every section.
package final class LockedState<State>: @unchecked Sendable {  // `state` is read and written only under `lock`.
    @usableFromInline let lock = NSLock()
    @usableFromInline let state: UnsafeMutablePointer<State>

    package init(_ state: State) {
        self.state = .allocate(capacity: 1)
        self.state.initialize(to: state)
    }

    deinit {
        state.deinitialize(count: 1)
        state.deallocate()
    }

    /// Runs `body` on the state with the lock held, and returns what it returns (an action to
    /// perform once the lock is released).
    ///
    /// `@inlinable`, so that a section in another target of the package is specialized and
    /// inlined there as it is in this one.
    @inlinable @inline(__always)
    package func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state.pointee)
    }
}
