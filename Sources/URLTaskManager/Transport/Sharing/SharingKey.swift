import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What two requests must have in common to share one transfer: everything a server could tell
/// apart. The method, the URL, every header as it will be sent (names without case) except the
/// ones the configuration says never identify a caller, the request's own policy, and the
/// request settings the inner session acts on (timeout, cache policy, cookie handling).
struct SharingKey: Hashable, Sendable {
    let method: String
    let url: String
    let headers: [String: String]
    let policy: URLTaskPolicy?
    let timeout: TimeInterval
    let cachePolicy: UInt
    let handlesCookies: Bool

    /// The key of `request` (as it will be sent), or `nil` when it is never shared: a method the
    /// rules do not share, or no URL.
    init?(_ request: URLRequest, policy: URLTaskPolicy?, rules: SharingRules) {
        let method = (request.httpMethod ?? "GET").uppercased()
        guard rules.methods.contains(method), let url = request.url else { return nil }
        var headers: [String: String] = [:]
        for (name, value) in request.allHTTPHeaderFields ?? [:] {
            let lower = name.lowercased()
            if rules.ignoresHeader(lower) { continue }
            headers[lower] = value
        }
        self.method = method
        self.url = url.absoluteString
        self.headers = headers
        self.policy = policy
        self.timeout = request.timeoutInterval
        self.cachePolicy = request.cachePolicy.rawValue
        self.handlesCookies = request.httpShouldHandleCookies
    }

    // URLTaskPolicy is Equatable only: it is compared, not hashed.
    func hash(into hasher: inout Hasher) {
        hasher.combine(method)
        hasher.combine(url)
        hasher.combine(headers)
        hasher.combine(policy == nil)
        hasher.combine(timeout)
        hasher.combine(cachePolicy)
        hasher.combine(handlesCookies)
    }
}

/// A `CoalescingInterceptor.Configuration` as the key asks it, worked out once per manager
/// (its header patterns lower-cased and split) rather than for every header of every request.
struct SharingRules: Sendable {
    /// The methods whose requests are shared (upper case).
    let methods: Set<String>
    private let ignoredNames: Set<String>
    private let ignoredPrefixes: [String]

    init(_ configuration: TransferSharing.Configuration) {
        methods = configuration.methods
        let patterns = configuration.headersThatNeverIdentifyACaller.map { $0.lowercased() }
        ignoredNames = Set(patterns.filter { !$0.hasSuffix("*") })
        ignoredPrefixes = patterns.filter { $0.hasSuffix("*") }.map { String($0.dropLast()) }
    }

    /// Whether `lowercasedName` may differ between requests that share a transfer: never a
    /// credential, a `Range` or an `If-*` header, whatever the configuration lists.
    func ignoresHeader(_ lowercasedName: String) -> Bool {
        if Self.alwaysIdentifying(lowercasedName) { return false }
        return ignoredNames.contains(lowercasedName) || ignoredPrefixes.contains { lowercasedName.hasPrefix($0) }
    }

    private static func alwaysIdentifying(_ name: String) -> Bool {
        name == "authorization" || name == "cookie" || name == "proxy-authorization" || name == "range" || name.hasPrefix("if-")
    }
}

/// A task's request to share its transfer, made by its ``TaskStorage`` as it is about to send.
struct TransferShare: Sendable {
    /// The task's part in the transfer, announced in its events before any of the transfer's
    /// events reach it.
    enum Role: Sendable {
        /// It sends the request (first of its key).
        case sends
        /// It listens to the transfer `leader`'s request started.
        case joins(leader: URLTask.ID)
        /// It had joined, but the answer may not be shared with it (its `Vary`): its own request
        /// is sent now.
        case sendsAlone
    }

    let key: SharingKey
    let task: URLTask.ID
    /// The request exactly as the task would send it.
    let request: URLRequest
    let announce: @Sendable (Role) -> Void
}
