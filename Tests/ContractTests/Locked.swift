import Foundation

/// A value a test shares with a server's route (a request count, the status to answer), behind a
/// lock: the one box this target's tests use.
final class Locked<Value: Sendable>: @unchecked Sendable {  // `stored` is guarded by `lock`.
    private let lock = NSLock()
    private var stored: Value

    init(_ value: Value) {
        stored = value
    }

    var value: Value { lock.withLock { stored } }

    func set(_ newValue: Value) { lock.withLock { stored = newValue } }

    /// Changes the value in one locked step and returns what `change` returns.
    @discardableResult
    func update<Result>(_ change: (inout Value) -> Result) -> Result {
        lock.withLock { change(&stored) }
    }
}
