import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import URLTaskManager

// 0.2.0's spellings of this library's parts that no longer compile, kept so that the compiler
// says what to write instead (the "Migrating from 0.2" article in URLTaskManager's catalog).

/// In 0.2 the breaker was a reactor too, given to both lists. It is an interceptor and an outcome
/// observer now: `reactors: [breaker, ...]` is refused with this message (without this
/// unavailable conformance, a heterogeneous `reactors:` array made the compiler fail to produce
/// a diagnostic). It marks itself ``URLTaskManager/NoLongerAReactor`` so that the manager does
/// not take the conformance, which a dynamic cast still finds, for a reactor's.
@available(
    *, unavailable,
    message:
        "CircuitBreaker is no longer a reactor (it observes outcomes as an interceptor): remove it from reactors: and pass it in interceptors: only"
)
extension CircuitBreaker: URLTaskReactor {
    /// Unavailable: the breaker counts outcomes in ``observe(_:of:)`` and ``observeEnd(of:error:)``.
    public func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { false }
    /// Unavailable: the breaker never reacts.
    public func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
}

/// In 0.2 the limiter was a reactor too, given to both lists. It is an interceptor and an outcome
/// observer now: `reactors: [limiter, ...]` is refused with this message.
@available(
    *, unavailable,
    message:
        "RateLimiter is no longer a reactor (it reads Retry-After as an outcome observer): remove it from reactors: and pass it in interceptors: only"
)
extension RateLimiter: URLTaskReactor {
    /// Unavailable: the limiter reads `Retry-After` in ``observe(_:of:)``.
    public func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { false }
    /// Unavailable: the limiter never reacts.
    public func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
}

extension CircuitBreaker: NoLongerAReactor {}
extension RateLimiter: NoLongerAReactor {}
