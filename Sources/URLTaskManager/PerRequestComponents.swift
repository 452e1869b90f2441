import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An interceptor of the manager's that acts only for the requests that add it
/// (``URLTaskPolicy/init(skipping:skippingReactors:adding:responseValidation:maximumHoldTime:)``,
/// `adding:` its wrapped type); for every other request it lets the task through untouched.
///
/// This is how an interceptor is attached to one request through any URLSession API: the
/// instance lives in the manager, configured once, and a request opts in by type, in a policy
/// that travels on the `URLRequest`. It is made only of the public protocols.
///
/// ```swift
/// let manager = URLTaskManager(interceptors: [PerRequestInterceptor(HeaderInterceptor(["X-Debug-Trace": "1"]))])
/// var request = URLRequest(url: url)
/// URLTaskPolicy(adding: [HeaderInterceptor.self]).apply(to: &request)  // this request only
/// ```
///
/// It is a ``SynchronousInterceptor`` whatever it wraps, so wrapping costs no Swift task the
/// wrapped interceptor would not: a request that does not add it passes without one, and one that
/// adds it takes the wrapped interceptor's own path (inline when that one is a
/// ``SynchronousInterceptor`` and decides there, the async ``intercept(_:context:)`` otherwise).
public struct PerRequestInterceptor<Wrapped: URLTaskInterceptor>: SynchronousInterceptor {
    private let wrapped: Wrapped

    /// `wrapped`, for the requests that add its type.
    public init(_ wrapped: Wrapped) {
        self.wrapped = wrapped
    }

    /// Lets a request that does not add `Wrapped` through without a Swift task; for one that
    /// does, the wrapped interceptor's answer when it is a ``SynchronousInterceptor`` (its `nil`
    /// included), else `nil`, so the manager calls ``intercept(_:context:)``.
    public func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand? {
        guard task.policy?.adds(Wrapped.self) == true else { return .execute }
        guard let synchronous = wrapped as? any SynchronousInterceptor else { return nil }
        return try synchronous.interceptWithoutSuspending(&task, context: context)
    }

    /// The wrapped interceptor's `intercept` for a request that adds `Wrapped`; `.execute`,
    /// untouched, for every other request.
    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        guard task.policy?.adds(Wrapped.self) == true else { return .execute }
        return try await wrapped.intercept(&task, context: context)
    }

    /// The wrapped interceptor's: when it is `true`, every request through this one takes the
    /// async path behind one serial gate, as with the wrapped interceptor itself.
    public var interceptsOneAtATime: Bool { wrapped.interceptsOneAtATime }

    /// The wrapped interceptor's: it runs where that one would.
    public var interceptorPlacement: URLTaskPlacement { wrapped.interceptorPlacement }
}

/// A reactor of the manager's that sees the outcomes of the requests that add it only
/// (``URLTaskPolicy``, `adding:` its wrapped type): a retry for one POST that is safe to retry,
/// say. Everything else is the wrapped reactor's.
public struct PerRequestReactor<Wrapped: URLTaskReactor>: URLTaskReactor {
    private let wrapped: Wrapped

    /// `wrapped`, for the requests that add its type.
    public init(_ wrapped: Wrapped) {
        self.wrapped = wrapped
    }

    public var configuration: URLTaskReactorConfiguration { wrapped.configuration }

    public func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
        task.policy?.adds(Wrapped.self) == true && wrapped.shouldReact(to: outcome, of: task)
    }

    public func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
        try await wrapped.react(to: outcome, body: body, of: task)
    }

    public func credentialVersion(of task: URLTask) -> Int? { wrapped.credentialVersion(of: task) }

    public func currentCredentialVersion() -> Int? { wrapped.currentCredentialVersion() }

    /// The wrapped reactor's: it is asked where that one would be.
    public var reactorPlacement: URLTaskPlacement { wrapped.reactorPlacement }
}

// MARK: The wrapped part's other roles

/// A wrapped observer (a `CircuitBreaker`, a `RateLimiter`) stays one: it is told the outcomes of
/// the requests that add it, as its interceptor acts on those only. Without this, the wrapper
/// would hide the conformance the manager finds observers by, and a breaker given per request
/// would refuse nothing, ever (issue 37).
extension PerRequestInterceptor: URLTaskOutcomeObserver where Wrapped: URLTaskOutcomeObserver {
    /// The wrapped observer's, for an outcome of a request that adds `Wrapped`.
    public func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
        guard task.policy?.adds(Wrapped.self) == true else { return }
        wrapped.observe(outcome, of: task)
    }

    /// The wrapped observer's.
    public var observesEnds: Bool { wrapped.observesEnds }

    /// The wrapped observer's, for a request that adds `Wrapped`.
    public func observeEnd(of task: URLTask, error: (any Error)?) {
        guard task.policy?.adds(Wrapped.self) == true else { return }
        wrapped.observeEnd(of: task, error: error)
    }

    /// The wrapped observer's, for a request that adds `Wrapped`.
    public func observeJoinedTransfer(of task: URLTask) {
        guard task.policy?.adds(Wrapped.self) == true else { return }
        wrapped.observeJoinedTransfer(of: task)
    }
}

/// A wrapped observer stays one, told the outcomes of the requests that add it, as the reactor
/// sees those only.
extension PerRequestReactor: URLTaskOutcomeObserver where Wrapped: URLTaskOutcomeObserver {
    /// The wrapped observer's, for an outcome of a request that adds `Wrapped`.
    public func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
        guard task.policy?.adds(Wrapped.self) == true else { return }
        wrapped.observe(outcome, of: task)
    }

    /// The wrapped observer's.
    public var observesEnds: Bool { wrapped.observesEnds }

    /// The wrapped observer's, for a request that adds `Wrapped`.
    public func observeEnd(of task: URLTask, error: (any Error)?) {
        guard task.policy?.adds(Wrapped.self) == true else { return }
        wrapped.observeEnd(of: task, error: error)
    }

    /// The wrapped observer's, for a request that adds `Wrapped`.
    public func observeJoinedTransfer(of task: URLTask) {
        guard task.policy?.adds(Wrapped.self) == true else { return }
        wrapped.observeJoinedTransfer(of: task)
    }
}

/// A wrapped sharing interceptor (`CoalescingInterceptor`) still turns sharing on in its manager:
/// it marks the requests that add it, and those share.
extension PerRequestInterceptor: TransferSharingInterceptor where Wrapped: TransferSharingInterceptor {
    /// The wrapped interceptor's rules and events.
    public var transferSharing: TransferSharing { wrapped.transferSharing }
}
