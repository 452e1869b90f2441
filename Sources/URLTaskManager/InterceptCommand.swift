import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What an interceptor wants done with the task it just saw.
///
/// When interceptors disagree, the first decision that stops the chain wins, in chain order:
/// - ``execute`` passes the task to the next interceptor; after the last, it is sent.
/// - ``fail(_:)`` and ``respond(_:body:)`` end the task at once; later interceptors never see it.
/// - ``hold(for:)`` parks the task in this interceptor's batch. When the batch is released the
///   task continues with the interceptor AFTER this one, not from the start, so a later
///   interceptor can still fail or answer a task that was held and released.
/// - ``release`` continues this task and every task this interceptor holds, together.
public enum InterceptCommand: Sendable {
    /// Continue: the next interceptor, then the network.
    case execute
    /// Park the task in this interceptor's batch until the batch is released: by a later
    /// ``release``, by the manager's `flush`, or at the latest after `maximumWait` (if given)
    /// measured from now. The manager's ``URLTaskManager/Options/maximumHoldTime`` fails a
    /// task held longer than that with ``URLTaskError/Code-swift.struct/holdTimedOut``.
    case hold(for: Duration? = nil)
    /// Continue with this task and everything this interceptor holds, in one burst.
    case release
    /// Fail the task. The caller receives a `URLError` as itself (its user info names this
    /// interceptor under ``URLTaskError/componentUserInfoKey``), a ``URLTaskError`` as it is
    /// (give one with the code that says what happened), anything else wrapped in
    /// ``URLTaskError/Code-swift.struct/interceptorFailed`` naming this interceptor.
    case fail(any Error)
    /// Answer the task locally without touching the network (a cache hit, a mock, an
    /// offline answer). The caller sees this response and body as if they came from the server.
    case respond(HTTPURLResponse, body: Data)
}
