import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One request on its way through a manager: what interceptors rewrite and reactors judge.
///
/// A `URLTask` is created when the caller's task starts and lives until the caller has its
/// answer. It is sent at least once and again each time a reactor requeues it (after a token
/// refresh, a retry); every send runs the interceptors again on ``request``, which starts each
/// time from ``originalRequest`` so a stale header from an earlier attempt never survives.
public struct URLTask: Sendable, Identifiable {
    /// A process-wide unique, stable identifier: the same across every attempt of the task.
    public struct ID: Hashable, Sendable, CustomStringConvertible {
        let rawValue: UInt64
        /// The number alone, ready for a header value or a log line.
        public var description: String { String(rawValue) }

        /// A number no other task of this process has.
        static func next() -> ID {
            ID(rawValue: IDCounter.shared.next())
        }
    }

    /// Stable across attempts; use it to correlate logs or a request id header.
    public let id: ID
    /// The request as the next interceptor should see it. Interceptors change it in place.
    /// Its `httpBody` and `httpBodyStream` are always empty: the body is ``body``.
    public var request: URLRequest
    /// The request body as the next interceptor should see it; what the last one leaves is
    /// sent. See ``URLTaskBody``.
    public var body: URLTaskBody
    /// The request exactly as the caller made it (its body is not included: the manager keeps
    /// the body itself so it can replay it).
    public let originalRequest: URLRequest
    /// 1 on the first send, plus one per requeue. A task whose headers went stale before it
    /// was sent (it waited in a batch, or for a connection, while a token refresh ran) runs
    /// the interceptors again with the same number: nothing was sent yet.
    public internal(set) var attempt: Int
    /// Typed values that belong to this attempt only (for example which credential version an
    /// interceptor applied to these headers): every attempt starts with them empty, as its
    /// interceptors start again from the caller's request.
    ///
    /// An attempt whose headers went stale before it was sent (it waited for a rate limiter's
    /// turn, in a batch or for a connection while a token refresh ran) runs the interceptors
    /// again as the same attempt, and keeps these values: a part that spent something for the
    /// attempt (a rate limiter's turn, a circuit breaker's probe) finds that it did, and does
    /// not spend it again. Nothing was sent yet; the next attempt starts empty.
    public var attemptValues: URLTaskValues
    /// Typed values that live as long as the task, across every attempt (for example a request
    /// id that a retry must send again): an attempt starts with what the last one left.
    public var taskValues: URLTaskValues
    /// What the caller changed for this request alone (``URLTaskPolicy``), if anything: the
    /// manager reads it off the request before the first interceptor runs.
    public internal(set) var policy: URLTaskPolicy?
    /// Annotations to add to the task's events once this attempt is really sent
    /// (``annotateWhenSent(_:_:)``); an attempt that is intercepted again starts without them.
    var annotationsWhenSent: [(name: String, value: String)] = []

    /// Renamed: values that last one attempt are ``attemptValues``; for values that must survive
    /// a retry or a refresh, use ``taskValues``.
    @available(*, deprecated, renamed: "attemptValues", message: "values last one attempt; use taskValues for values kept across attempts")
    public var values: URLTaskValues {
        get { attemptValues }
        set { attemptValues = newValue }
    }

    /// A task as the manager would hand it to the first interceptor: for testing an interceptor
    /// without a server or a session.
    ///
    /// ```swift
    /// var task = URLTask(request: URLRequest(url: URL(string: "https://api.example.com/me")!))
    /// let command = try await interceptor.intercept(&task, context: InterceptContext(currentBatchCount: 0))
    /// ```
    /// - Parameters:
    ///   - request: The caller's request. A body it carries (`httpBody` or `httpBodyStream`)
    ///     becomes ``body`` unless `body` is given.
    ///   - body: The body, as the manager found it for an upload task.
    ///   - attempt: Which send this is (1 for the first).
    public init(request: URLRequest, body: URLTaskBody? = nil, attempt: Int = 1) {
        var bare = request
        bare.httpBody = nil
        bare.httpBodyStream = nil
        self.init(id: .next(), originalRequest: bare, attempt: attempt, request: bare, body: body ?? URLTaskBody(request: request))
    }

    /// `request` is where the interceptors start: the caller's request, or the request a
    /// followed redirect or an answered authentication challenge sends instead; `body` the
    /// body they start from.
    init(id: ID, originalRequest: URLRequest, attempt: Int, request: URLRequest? = nil, body: URLTaskBody = .none) {
        self.id = id
        self.body = body
        self.request = request ?? originalRequest
        self.originalRequest = originalRequest
        self.attempt = attempt
        self.attemptValues = URLTaskValues()
        self.taskValues = URLTaskValues()
    }

    /// The same task as the interceptors see it at the start of another attempt, or of the same
    /// one again when its headers went stale before it was sent (`sameAttempt`): `request` and
    /// `body` to start from, ``taskValues`` kept, ``attemptValues`` empty for another attempt
    /// and kept for the same one (what it spent is not spent twice).
    func startingOver(attempt: Int, request: URLRequest, body: URLTaskBody, sameAttempt: Bool = false) -> URLTask {
        var next = URLTask(id: id, originalRequest: originalRequest, attempt: attempt, request: request, body: body)
        next.taskValues = taskValues
        if sameAttempt { next.attemptValues = attemptValues }
        next.policy = policy
        return next
    }
}

/// A key for a value an interceptor stores on a ``URLTask``; the key's type is the name.
///
/// ```swift
/// enum AppliedTokenVersion: URLTaskValueKey { typealias Value = Int }
/// task.attemptValues[AppliedTokenVersion.self] = 3
/// ```
public protocol URLTaskValueKey {
    /// The type of the stored value.
    associatedtype Value: Sendable
}

/// Typed storage on a ``URLTask``, keyed by ``URLTaskValueKey`` types.
public struct URLTaskValues: Sendable {
    /// Each value in a box of its key's value type: the key's identity guarantees the box's
    /// type, so reading it needs no dynamic cast: an `as?` from `any Sendable` asks the runtime
    /// about the type on every read, and the manager reads the bearer's applied credential
    /// version several times per request (the cast's cost: the Performance article, "Single
    /// operations on Linux").
    private var storage: [ObjectIdentifier: any AnyValueBox] = [:]

    /// Creates empty storage.
    public init() {}

    /// The value stored for `key`, or `nil`.
    public subscript<Key: URLTaskValueKey>(key: Key.Type) -> Key.Value? {
        get {
            guard let box = storage[ObjectIdentifier(key)] else { return nil }
            return unsafeDowncast(box, to: ValueBox<Key.Value>.self).value
        }
        set { storage[ObjectIdentifier(key)] = newValue.map { ValueBox($0) } }
    }
}

/// A stored value of any type (see ``URLTaskValues``).
private protocol AnyValueBox: AnyObject, Sendable {}

/// One value, immutable once stored.
private final class ValueBox<Value: Sendable>: AnyValueBox {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// Hands out task numbers, unique in the process.
private final class IDCounter: Sendable {
    static let shared = IDCounter()
    /// The last number handed out.
    private let last = LockedState<UInt64>(0)

    func next() -> UInt64 {
        last.withLock { last in
            last += 1
            return last
        }
    }
}
