import Foundation

/// A one-shot latch a handler can block on and a test opens, so a test can hold a response
/// (keep a request in flight) exactly until it has checked what it needs to.
public final class Gate: @unchecked Sendable {  // unchecked: all mutable state is guarded by `condition`
    private let condition = NSCondition()
    private var opened = false

    /// A closed gate.
    public init() {}

    /// Opens the gate for good, releasing every current and future waiter.
    public func open() {
        condition.lock()
        opened = true
        condition.broadcast()
        condition.unlock()
    }

    /// Whether `open()` has been called.
    public var isOpen: Bool {
        condition.lock()
        defer { condition.unlock() }
        return opened
    }

    /// Blocks the calling thread until the gate opens (true) or `timeout` passes (false). The timeout
    /// keeps a forgotten gate from wedging a handler thread forever.
    @discardableResult
    public func wait(timeout: Duration) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout.seconds)
        condition.lock()
        defer { condition.unlock() }
        while !opened {
            if !condition.wait(until: deadline) { return opened }
        }
        return true
    }
}
