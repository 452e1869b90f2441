import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Holds matching tasks and releases them together: when `size` are waiting, or `window`
/// after the first one started waiting, whichever comes first.
///
/// Useful to coalesce chatty traffic (analytics, prefetches) into bursts so a radio wakes once,
/// or to line requests up behind a gate. Tasks that do not match pass straight through.
///
/// ```swift
/// // Send analytics in groups of 10, or every 2 seconds.
/// let batch = BatchInterceptor(size: 10, window: .seconds(2)) { $0.url?.path.hasPrefix("/events") == true }
/// ```
///
/// A held task never waits forever: besides `window`, the manager's
/// ``URLTaskManager/Options/maximumHoldTime`` bounds every hold, and ``URLTaskManager/flush()``
/// releases batches on demand. A held task whose caller cancels it leaves the batch at once.
public struct BatchInterceptor: URLTaskInterceptor {
    /// Release when this many tasks (including the newest) are waiting; `nil` for no count.
    public let size: Int?
    /// Release at the latest this long after the first task began waiting; `nil` for no window.
    public let window: Duration?
    private let matches: @Sendable (URLRequest) -> Bool

    /// - Parameters:
    ///   - size: Batch size that triggers a release (2 or more), or `nil`. Below 1 counts as 1
    ///     (every task goes at once), rather than trapping on a computed size.
    ///   - window: Longest wait of the first held task, or `nil`. Negative counts as zero; one too
    ///     long for the clock is no window (``URLTaskManager/Options/maximumHoldTime`` still
    ///     bounds the hold).
    ///   - matches: Which requests are batched; others pass through. Defaults to all.
    public init(size: Int? = nil, window: Duration? = nil, matches: @escaping @Sendable (URLRequest) -> Bool = { _ in true }) {
        self.size = size.map { max(1, $0) }
        self.window = window
        self.matches = matches
    }

    /// Always `true`: the count decision needs every earlier hold to be visible.
    public var interceptsOneAtATime: Bool { true }

    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        guard matches(task.request) else { return .execute }
        if let size, context.currentBatchCount + 1 >= size { return .release }
        return .hold(for: window)
    }
}
