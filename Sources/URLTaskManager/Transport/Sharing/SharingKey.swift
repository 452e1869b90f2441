import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What two requests must have in common to share one transfer: everything a server could tell
/// apart. The method, the URL (its user and password included), every header as it will be sent
/// on the wire (names without case, the `Cookie` the inner session adds from its storage
/// included) except the ones the configuration says never identify a caller, the request's own
/// policy, and the request settings the inner session acts on in what it sends or answers with
/// (cache policy, cookie handling). Not the timeout: it says when a caller stops waiting, not
/// what is sent, so each listener keeps its own (``SharedTransfers``).
struct SharingKey: Hashable, Sendable {
    let method: String
    let url: String
    let headers: [String: String]
    let policy: URLTaskPolicy?
    let cachePolicy: UInt
    let handlesCookies: Bool

    /// The key of `request` (as it will be sent), or `nil` when it is never shared: a method the
    /// rules do not share, no URL, or headers whose wire form cannot be known (``WireHeaders``).
    init?(_ request: URLRequest, wire: WireHeaders, policy: URLTaskPolicy?, rules: SharingRules) {
        let method = (request.httpMethod ?? "GET").uppercased()
        guard rules.methods.contains(method), let url = request.url else { return nil }
        self.method = method
        self.url = url.absoluteString
        self.headers = wire.fields.filter { !rules.ignoresHeader($0.key) }
        self.policy = policy
        self.cachePolicy = request.cachePolicy.rawValue
        self.handlesCookies = request.httpShouldHandleCookies
    }

    // URLTaskPolicy is Equatable only: it is compared, not hashed.
    func hash(into hasher: inout Hasher) {
        hasher.combine(method)
        hasher.combine(url)
        hasher.combine(headers)
        hasher.combine(policy == nil)
        hasher.combine(cachePolicy)
        hasher.combine(handlesCookies)
    }
}

/// A request's headers as they go on the wire, by lower-cased name: its own, and the `Cookie`
/// the inner session puts on it from the configuration's cookie storage as the task is made.
///
/// What sharing judges a request by: its key (``SharingKey``), and whether an answer may be handed
/// to it (``SharedTransfers/mayShare(_:sentHeaders:with:)``). A request the wire form of which
/// cannot be known has none, and is never shared: two header names that differ only in case
/// (`X-Tenant` and `x-tenant`: the wire carries one of the two, and which is the platform's
/// choice), or a `Cookie` of its own that the platform merges with stored cookies in a way it
/// does not document (Apple platforms).
struct WireHeaders: Sendable, Equatable {
    /// Value by lower-cased name.
    let fields: [String: String]

    /// The wire headers of `request` in a session whose cookies are `cookies`, or `nil`.
    init?(_ request: URLRequest, cookies: CookieJar) {
        var fields: [String: String] = [:]
        for (name, value) in request.allHTTPHeaderFields ?? [:] {
            guard fields.updateValue(value, forKey: name.lowercased()) == nil else { return nil }
        }
        let stored = request.url.flatMap { cookies.storedCookieHeader(for: $0) }
        switch Platform.cookieHeaderOnTheWire(own: fields["cookie"], stored: stored, request: request) {
        case .known(let cookie): fields["cookie"] = cookie
        case .unknown: return nil
        }
        self.fields = fields
    }

    /// Whether `lowercasedName` names a credential: a value that says who the caller is
    /// (`Authorization`, `Proxy-Authorization`, `Cookie`, and every header whose name the
    /// standard ``Redaction`` calls secret, such as `X-API-Key` or `X-Auth-Token`). Such a header
    /// always tells requests apart, and an answer is never handed across different values of it.
    static func isCredential(_ lowercasedName: String) -> Bool {
        lowercasedName == "authorization" || lowercasedName == "proxy-authorization" || lowercasedName == "cookie"
            || Redaction.standard.isSecret(headerName: lowercasedName)
    }
}

/// The inner session's cookie handling, read once from its configuration: the `Cookie` header
/// the session will put on a request, as far as it can be known before the task is made.
struct CookieJar: Sendable {
    /// Whether the session adds stored cookies to its requests (`httpShouldSetCookies`).
    let setsCookies: Bool
    /// Where it finds them.
    let storage: HTTPCookieStorage?

    init(_ configuration: URLSessionConfiguration) {
        setsCookies = configuration.httpShouldSetCookies
        storage = configuration.httpCookieStorage
    }

    /// The `Cookie` header value the storage holds for `url` now, or `nil` when it adds none.
    func storedCookieHeader(for url: URL) -> String? {
        guard setsCookies, let storage, let cookies = storage.cookies(for: url), !cookies.isEmpty else { return nil }
        let value = HTTPCookie.requestHeaderFields(with: cookies)["Cookie"]
        return value?.isEmpty == false ? value : nil
    }
}

/// The `Cookie` header an inner task was made with, where the platform shows it.
enum SentCookie: Equatable {
    /// This header, or none (`nil`).
    case sent(String?)
    /// The platform adds cookies later, out of sight: the prediction stands.
    case notVisible
}

/// The `Cookie` header a request carries on the wire, as ``PlatformSupport`` predicts it.
enum WireCookie: Equatable {
    /// This header, or none (`nil`).
    case known(String?)
    /// The platform combines the request's own cookies with stored ones in a way it does not
    /// document: the request is never shared.
    case unknown
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
    /// credential (``WireHeaders/isCredential(_:)``), a `Range` or an `If-*` header, whatever the
    /// configuration lists.
    func ignoresHeader(_ lowercasedName: String) -> Bool {
        guard ignoredNames.contains(lowercasedName) || ignoredPrefixes.contains(where: { lowercasedName.hasPrefix($0) }) else {
            return false
        }
        return !(lowercasedName == "range" || lowercasedName.hasPrefix("if-") || WireHeaders.isCredential(lowercasedName))
    }
}

/// A task's request to share its transfer, made by its ``TaskRun`` as it is about to send.
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
    /// Its headers as they go on the wire: what an answer's `Vary` and credentials are judged by.
    let wire: WireHeaders
    let announce: @Sendable (Role) -> Void
}
