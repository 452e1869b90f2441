/// A step every task passes before it is sent, and again before each resend.
///
/// Interceptors run in the order given to the manager (a part whose place matters says so with
/// ``interceptorPlacement``, and the manager checks it). Each one may rewrite
/// ``URLTask/request`` in place (add a header, sign it) and then says what happens next with an
/// ``InterceptCommand``. Interceptors are `async`: one may await a token, a clock or an actor.
///
/// ```swift
/// struct RequestID: URLTaskInterceptor {
///     func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
///         task.request.setValue(UUID().uuidString, forHTTPHeaderField: "X-Request-ID")
///         return .execute
///     }
/// }
/// ```
///
/// Throwing fails only this task, as ``InterceptCommand/fail(_:)`` does; other tasks are
/// unaffected.
public protocol URLTaskInterceptor: Sendable {
    /// Inspects and rewrites one task, and decides its fate.
    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand

    /// Whether the manager runs this interceptor on one task at a time. Interceptors that
    /// decide from ``InterceptContext/currentBatchCount`` need it: two tasks intercepted at the
    /// same moment would otherwise both see the same count, and a batch of 10 could end up
    /// holding 10 tasks without any of them releasing it. Defaults to `false` (concurrent).
    var interceptsOneAtATime: Bool { get }

    /// Where this interceptor belongs among the others, when the order decides whether it works
    /// (`CircuitBreaker` is ``URLTaskPlacement/first``, so that it refuses a request before
    /// another interceptor spends work on it). The manager checks the order it is given against
    /// every interceptor's placement and stops at init when it is wrong. Defaults to
    /// ``URLTaskPlacement/anywhere``: not checked, it runs wherever you put it.
    var interceptorPlacement: URLTaskPlacement { get }
}

extension URLTaskInterceptor {
    public var interceptsOneAtATime: Bool { false }
    public var interceptorPlacement: URLTaskPlacement { .anywhere }
}

/// What an interceptor knows besides the task itself.
public struct InterceptContext: Sendable {
    /// How many tasks this interceptor holds right now, not counting the one being intercepted.
    /// A batching interceptor compares it with its batch size.
    public let currentBatchCount: Int

    /// Creates a context; the manager makes these, tests of interceptors may too.
    public init(currentBatchCount: Int) {
        self.currentBatchCount = currentBatchCount
    }
}
