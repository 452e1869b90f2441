import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What changes for one request: interceptors or reactors it skips, the answers it accepts, how
/// long a batch may hold it.
///
/// A policy names interceptors and reactors by their types' identity (``ComponentType``), never
/// by name: `Billing.Retry` and `Search.Retry` are two parts, though `String(describing:)` calls
/// both "Retry". An identity is valid in the process that made it only, so a policy is not
/// `Codable`: keep what it is made of, not the policy.
///
/// A policy travels on the `URLRequest` itself, so it works with every URLSession API and with
/// code you do not own (a generated client, an image loader): ``apply(to:)`` puts it in a header
/// of the manager's own, which the manager reads and removes before the interceptors see the
/// request. It never reaches the wire: the manager also removes that header from every request
/// it sends (a redirect delegate answering with the task's `originalRequest`, an interceptor
/// copying headers), and from the configuration's `httpAdditionalHeaders`, where it is no policy.
/// A followed redirect keeps the caller's policy. A download task made with the session's own
/// download APIs cannot pass through the pipeline on Linux, so one carrying a policy fails
/// instead of sending it (``URLTaskError/Code-swift.struct/downloadNeedsPipeline``).
///
/// `URLProtocol.setProperty(_:forKey:in:)` is not the carrier because on Linux (Swift 6.3.1)
/// its value never reaches the session: corelibs drops a request's protocol properties whenever
/// an `NSMutableURLRequest` becomes a `URLRequest` (measured: `data(for:)`,
/// `dataTask(with:completionHandler:)`, a delegate's data task, `upload(for:from:)` and
/// `download(for:)` all started loading without it).
///
/// ```swift
/// var request = URLRequest(url: publicURL)
/// URLTaskPolicy(skipping: [BearerInterceptor.self], skippingReactors: [RetryReactor.self]).apply(to: &request)
/// let (data, _) = try await manager.session.data(for: request)
/// ```
public struct URLTaskPolicy: Sendable, Equatable {
    /// An interceptor or reactor type as a policy names it: by identity, so that two types with
    /// one name in different modules or scopes are never confused.
    public struct ComponentType: Sendable, Hashable, CustomStringConvertible {
        /// The type's metadata address (`ObjectIdentifier`), unique while the process lives.
        let identity: UInt
        /// The type's qualified name (`String(reflecting:)`), for messages only.
        public let name: String

        /// `type`, for a policy to skip or add.
        public init(_ type: Any.Type) {
            self.identity = UInt(bitPattern: ObjectIdentifier(type))
            self.name = String(reflecting: type)
        }

        /// A type read back from a policy's header.
        fileprivate init(identity: UInt, name: String) {
            self.identity = identity
            self.name = name
        }

        /// The same type: the name plays no part.
        public static func == (lhs: ComponentType, rhs: ComponentType) -> Bool { lhs.identity == rhs.identity }

        /// By identity only, as ``==(_:_:)`` compares.
        public func hash(into hasher: inout Hasher) { hasher.combine(identity) }

        /// The type's qualified name.
        public var description: String { name }
    }

    /// The interceptor types this request skips (every interceptor of such a type).
    public var skippedInterceptors: Set<ComponentType>
    /// The reactor types this request skips: they never see its outcome.
    public var skippedReactors: Set<ComponentType>
    /// The interceptor and reactor types this request adds: those the manager holds wrapped in
    /// ``PerRequestInterceptor`` or ``PerRequestReactor``, which act only for requests that add
    /// them.
    public var added: Set<ComponentType>
    /// The answers this request accepts, instead of ``URLTaskManager/Options/responseValidation``.
    public var responseValidation: ResponseValidation?
    /// The longest a batch may hold this request, instead of
    /// ``URLTaskManager/Options/maximumHoldTime``, in seconds. Any value is safe: negative and NaN
    /// count as zero (the task fails with ``URLTaskError/Code-swift.struct/holdTimedOut`` at
    /// once), and anything beyond 100 years (infinity included) as 100 years.
    public var maximumHoldSeconds: Double?

    /// A policy; every part defaults to "as the manager does".
    /// - Parameters:
    ///   - interceptors: Interceptor types this request skips (every interceptor of such a type).
    ///   - reactors: Reactor types that never see this request's outcome.
    ///   - responseValidation: The answers it accepts.
    ///   - maximumHoldTime: The longest a batch may hold it; clamped as ``maximumHoldSeconds`` says.
    ///   - added: Interceptor and reactor types this request adds: the manager's
    ///     ``PerRequestInterceptor`` or ``PerRequestReactor`` wrapping that type acts for it.
    public init(
        skipping interceptors: [any URLTaskInterceptor.Type] = [], skippingReactors reactors: [any URLTaskReactor.Type] = [],
        adding added: [Any.Type] = [], responseValidation: ResponseValidation? = nil, maximumHoldTime: Duration? = nil
    ) {
        self.skippedInterceptors = Set(interceptors.map { ComponentType($0) })
        self.skippedReactors = Set(reactors.map { ComponentType($0) })
        self.added = Set(added.map { ComponentType($0) })
        self.responseValidation = responseValidation
        self.maximumHoldSeconds = maximumHoldTime?.seconds
    }

    /// Whether this request skips the interceptors of type `type`.
    public func skipsInterceptor(_ type: any URLTaskInterceptor.Type) -> Bool { skippedInterceptors.contains(ComponentType(type)) }

    /// Whether the reactors of type `type` never see this request's outcome.
    public func skipsReactor(_ type: any URLTaskReactor.Type) -> Bool { skippedReactors.contains(ComponentType(type)) }

    /// Whether this request adds `type`: what ``PerRequestInterceptor`` and ``PerRequestReactor``
    /// ask of their wrapped type.
    public func adds(_ type: Any.Type) -> Bool { added.contains(ComponentType(type)) }

    /// Carries this policy on `request` (replacing one it carried).
    public func apply(to request: inout URLRequest) {
        let encoded = (try? JSONEncoder().encode(Carried(self))).map { $0.base64EncodedString() }
        request.setValue(encoded, forHTTPHeaderField: Self.headerName)
    }

    /// The policy `request` carries, if any (one applied in another process is none: type
    /// identities do not outlive their process).
    public init?(of request: URLRequest) {
        guard let value = request.value(forHTTPHeaderField: Self.headerName), let data = Data(base64Encoded: value),
            let carried = try? JSONDecoder().decode(Carried.self, from: data), let policy = carried.policy
        else { return nil }
        self = policy
    }

    /// The header a policy travels in between the caller and the manager; never sent.
    static let headerName = "X-URLTaskManager-Policy"
    /// ``headerName``, looked up without corelibs' locale-aware comparison (see `headerValue`).
    private static let header = HeaderName(headerName)

    /// `request` without its policy, and the policy.
    static func take(from request: URLRequest) -> (URLRequest, URLTaskPolicy?) {
        guard request.headerValue(header) != nil else { return (request, nil) }
        return (removed(from: request), URLTaskPolicy(of: request))
    }

    /// `request` without the policy's header: what may be sent.
    static func removed(from request: URLRequest) -> URLRequest {
        guard request.headerValue(header) != nil else { return request }
        var bare = request
        bare.setValue(nil, forHTTPHeaderField: headerName)
        return bare
    }

    /// Removes the policy's header from `configuration`'s `httpAdditionalHeaders`, where a
    /// session would send it with every request and no request would carry it as its own.
    static func remove(from configuration: URLSessionConfiguration) {
        guard let headers = configuration.httpAdditionalHeaders else { return }
        let kept = headers.filter { key, _ in (key.base as? String)?.caseInsensitiveCompare(headerName) != .orderedSame }
        if kept.count != headers.count { configuration.httpAdditionalHeaders = kept }
    }

    /// Whether this policy skips `component`, an interceptor or reactor of type `type`.
    func skips(_ component: URLTaskError.Component, type: ComponentType) -> Bool {
        switch component.kind {
        case .interceptor: skippedInterceptors.contains(type)
        case .reactor: skippedReactors.contains(type)
        }
    }

    /// A policy as its header carries it: the types by identity (with their names), marked with
    /// the process that wrote them.
    private struct Carried: Codable {
        /// Names this process, whose type identities the policy holds.
        static let thisProcess = UUID().uuidString

        struct Part: Codable {
            /// ``ComponentType/identity``, in hexadecimal.
            var id: String
            var name: String
        }

        var process: String
        var skippedInterceptors: [Part]
        var skippedReactors: [Part]
        var added: [Part]
        var responseValidation: ResponseValidation?
        var maximumHoldSeconds: Double?

        init(_ policy: URLTaskPolicy) {
            let parts = { (types: Set<ComponentType>) in types.map { Part(id: String($0.identity, radix: 16), name: $0.name) } }
            self.process = Self.thisProcess
            self.skippedInterceptors = parts(policy.skippedInterceptors)
            self.skippedReactors = parts(policy.skippedReactors)
            self.added = parts(policy.added)
            self.responseValidation = policy.responseValidation
            // Clamped here too: JSON has no NaN or infinity, and 0.2.0 dropped such a policy
            // whole (the encoder threw) instead of holding as it says.
            self.maximumHoldSeconds = policy.maximumHoldSeconds.map { Duration(clampingSeconds: $0).seconds }
        }

        /// The policy, if this process wrote it and every identity reads.
        var policy: URLTaskPolicy? {
            guard process == Self.thisProcess else { return nil }
            func types(_ parts: [Part]) -> Set<ComponentType>? {
                var types = Set<ComponentType>()
                for part in parts {
                    guard let identity = UInt(part.id, radix: 16) else { return nil }
                    types.insert(ComponentType(identity: identity, name: part.name))
                }
                return types
            }
            guard let interceptors = types(skippedInterceptors), let reactors = types(skippedReactors), let added = types(added)
            else { return nil }
            var policy = URLTaskPolicy(responseValidation: responseValidation)
            policy.skippedInterceptors = interceptors
            policy.skippedReactors = reactors
            policy.added = added
            policy.maximumHoldSeconds = maximumHoldSeconds
            return policy
        }
    }
}
