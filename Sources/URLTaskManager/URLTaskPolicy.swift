import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What changes for one request: interceptors or reactors it skips, the answers it accepts, how
/// long a batch may hold it.
///
/// A policy travels on the `URLRequest` itself, so it works with every URLSession API and with
/// code you do not own (a generated client, an image loader): ``apply(to:)`` puts it in a
/// header of the manager's own, which the manager reads and removes before the interceptors
/// see the request: it never reaches the wire. (`URLProtocol.setProperty` would be the natural
/// carrier, but its values are lost on Linux when the request is bridged.) A download task made
/// with the session's own download APIs cannot pass through the pipeline on Linux, so one
/// carrying a policy fails instead of sending it
/// (``URLTaskError/Code-swift.struct/downloadNeedsPipeline``).
///
/// ```swift
/// var request = URLRequest(url: publicURL)
/// URLTaskPolicy(skipping: [BearerInterceptor.self], skippingReactors: [RetryReactor.self]).apply(to: &request)
/// let (data, _) = try await manager.session.data(for: request)
/// ```
public struct URLTaskPolicy: Sendable, Equatable, Codable {
    /// Type names of the interceptors this request skips.
    public var skippedInterceptors: Set<String>
    /// Type names of the reactors this request skips: they never see its outcome.
    public var skippedReactors: Set<String>
    /// The answers this request accepts, instead of ``URLTaskManager/Options/responseValidation``.
    public var responseValidation: ResponseValidation?
    /// The longest a batch may hold this request, instead of
    /// ``URLTaskManager/Options/maximumHoldTime``, in seconds.
    public var maximumHoldSeconds: Double?

    /// A policy; every part defaults to "as the manager does".
    /// - Parameters:
    ///   - interceptors: Interceptor types this request skips (every interceptor of such a type).
    ///   - reactors: Reactor types that never see this request's outcome.
    ///   - responseValidation: The answers it accepts.
    ///   - maximumHoldTime: The longest a batch may hold it.
    public init(
        skipping interceptors: [any URLTaskInterceptor.Type] = [], skippingReactors reactors: [any URLTaskReactor.Type] = [],
        responseValidation: ResponseValidation? = nil, maximumHoldTime: Duration? = nil
    ) {
        self.skippedInterceptors = Set(interceptors.map { String(describing: $0) })
        self.skippedReactors = Set(reactors.map { String(describing: $0) })
        self.responseValidation = responseValidation
        self.maximumHoldSeconds = maximumHoldTime?.seconds
    }

    /// Carries this policy on `request` (replacing one it carried).
    public func apply(to request: inout URLRequest) {
        let encoded = (try? JSONEncoder().encode(self)).map { $0.base64EncodedString() }
        request.setValue(encoded, forHTTPHeaderField: Self.headerName)
    }

    /// The policy `request` carries, if any.
    public init?(of request: URLRequest) {
        guard let value = request.value(forHTTPHeaderField: Self.headerName), let data = Data(base64Encoded: value),
            let policy = try? JSONDecoder().decode(URLTaskPolicy.self, from: data)
        else { return nil }
        self = policy
    }

    /// The header a policy travels in between the caller and the manager; never sent.
    static let headerName = "X-URLTaskManager-Policy"

    /// `request` without its policy, and the policy.
    static func take(from request: URLRequest) -> (URLRequest, URLTaskPolicy?) {
        guard request.value(forHTTPHeaderField: headerName) != nil else { return (request, nil) }
        var bare = request
        bare.setValue(nil, forHTTPHeaderField: headerName)
        return (bare, URLTaskPolicy(of: request))
    }

    /// Whether this policy skips `component` (matched by its type's name).
    func skips(_ component: URLTaskError.Component, typeName: String) -> Bool {
        switch component.kind {
        case .interceptor: skippedInterceptors.contains(typeName)
        case .reactor: skippedReactors.contains(typeName)
        }
    }
}
