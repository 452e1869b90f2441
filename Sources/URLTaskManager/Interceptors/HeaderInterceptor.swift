import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Sets request headers on every task (and again on every resend).
///
/// Values are either fixed or computed per task, which is how a request id, the current
/// locale or a signature is added:
///
/// ```swift
/// let headers = HeaderInterceptor([
///     "User-Agent": .fixed("MyApp/2.1"),
///     "X-Request-ID": .computed { _ in UUID().uuidString },
///     "Accept-Language": .computed { _ in Locale.current.identifier },
/// ])
/// ```
///
/// Every name and value is validated: a value containing CR or LF, or a name that is not an
/// HTTP token, fails the task with ``URLTaskError/Code-swift.struct/invalidHeader`` instead of
/// being sent.
///
/// A header whose name ``Redaction/standard`` calls a secret (`Authorization`, `X-API-Key`,
/// `X-Auth-Token`, ...) is a credential for the API the caller's request is for, and a followed
/// redirect passes the interceptors again: by default (``Origins/secretsStayOnTheCallersOrigin``)
/// such a header is not added when a redirect has taken the request to another origin (scheme,
/// host and port), while the others are. Name the origins a token is for with
/// ``Origins/only(_:)`` to keep every header of the interceptor off every other request, as the
/// OAuth2 kit's `BearerInterceptor` keeps its token to its authenticator's origins:
///
/// ```swift
/// let token = HeaderInterceptor(["Authorization": "Bearer \(key)"], origins: .only([URL(string: "https://api.example.com")!]))
/// ```
public struct HeaderInterceptor: URLTaskInterceptor {
    /// A header value: fixed, or computed for each task.
    public enum Value: Sendable, ExpressibleByStringLiteral {
        /// The same value on every task.
        case fixed(String)
        /// A value computed for each task; returning `nil` leaves the header unset.
        case computed(@Sendable (URLTask) async throws -> String?)

        /// A fixed value from a string literal.
        public init(stringLiteral value: String) {
            self = .fixed(value)
        }
    }

    /// What to do when the request already carries the header.
    public enum Conflict: Sendable {
        /// Replace the existing value (the default: the interceptor is the source of truth).
        case replace
        /// Keep the caller's value.
        case keepExisting
    }

    /// Which requests get the interceptor's headers: where a credential it adds may go.
    ///
    /// A redirect the manager follows is sent through the interceptors again, so an interceptor
    /// that adds a token to every request would hand it to whatever origin a server redirects
    /// to. The manager drops the caller's own credentials on such a redirect; these say where
    /// the interceptor's go. Origins compare as ``URLOrigin`` does: scheme, host and port (the
    /// scheme's default filled in), so `http://api.example.com` and `https://api.example.com:8443`
    /// are not `https://api.example.com`.
    public struct Origins: Sendable, Hashable {
        fileprivate enum Rule: Sendable, Hashable {
            case callersOrigin
            /// The ``URLOrigin`` descriptions (`scheme://host:port`) of the listed origins.
            case listed([String])
            case everyOrigin
        }

        fileprivate let rule: Rule

        /// The default: every header on every request, except that a header whose name
        /// ``Redaction/standard`` calls a secret (``Redaction/isSecret(headerName:)``) is added
        /// only on the origin the request had when the interceptor first saw it: not once a
        /// followed redirect has taken it to another origin (it is added again if a later
        /// redirect brings it back). A retry or an answered challenge on the same origin gets
        /// it, and so does a request an interceptor before this one sent elsewhere before its
        /// first send.
        public static let secretsStayOnTheCallersOrigin = Origins(rule: .callersOrigin)

        /// Every header of the interceptor only on requests for one of `origins` (scheme, host
        /// and port; a path is ignored), a redirect's included; every other request passes
        /// untouched (unless a name is no HTTP token: that mistake fails every task, as without
        /// origins). A URL without a scheme or a host names no origin: with none named, the
        /// interceptor adds nothing.
        public static func only(_ origins: [URL]) -> Origins {
            var keys: [String] = []
            for origin in origins {
                if let key = URLOrigin(origin)?.description, !keys.contains(key) { keys.append(key) }
            }
            return Origins(rule: .listed(keys))
        }

        /// Every header on every request, secrets included, whatever origin a redirect leads
        /// to: what the interceptor did before origins were checked. Ask for it only for a
        /// secret that every origin a redirect may reach is meant to see.
        public static let everyOriginSecretsIncluded = Origins(rule: .everyOrigin)
    }

    private let fields: [(name: HeaderName, value: Value)]
    private let conflict: Conflict
    private let origins: Origins
    /// For each field, in order: whether ``Redaction/standard`` calls its name a secret.
    private let secret: [Bool]
    /// Whether any field is a secret's (the origin check of the default costs nothing otherwise).
    private let hasSecrets: Bool
    /// Every value is fixed: the fields with their name's and value's problems, checked once
    /// here rather than on every task; `nil` when a value is computed (it may suspend).
    private let fixed: [FixedField]?
    /// Every fixed name and value is valid and the conflict rule is `.replace`: every task gets
    /// the same fields, set in one write of the request's headers.
    private let fixedAndValid: [(name: HeaderName, value: String)]?
    /// The same without the fields whose names are secrets': what a request that a redirect
    /// took to another origin gets by default.
    private let fixedAndValidWithoutSecrets: [(name: HeaderName, value: String)]?
    /// Names this interceptor in a task's ``URLTask/taskValues`` (``FirstOrigins``): two
    /// interceptors of one chain may see a request at two origins.
    private let identity = Identity()

    /// A fixed field, validated when the interceptor is made.
    private struct FixedField: Sendable {
        let name: HeaderName
        let value: String
        let secret: Bool
        let nameProblem: URLTaskError?
        let valueProblem: URLTaskError?
    }

    /// Headers to set, in order, on the requests `origins` allows.
    public init(_ fields: KeyValuePairs<String, Value>, conflict: Conflict = .replace, origins: Origins = .secretsStayOnTheCallersOrigin) {
        self.init(fields: fields.map { (HeaderName($0.key), $0.value) }, conflict: conflict, origins: origins)
    }

    /// Fixed headers from a dictionary, on the requests `origins` allows.
    public init(_ headers: [String: String], conflict: Conflict = .replace, origins: Origins = .secretsStayOnTheCallersOrigin) {
        self.init(
            fields: headers.sorted { $0.key < $1.key }.map { (HeaderName($0.key), .fixed($0.value)) }, conflict: conflict, origins: origins)
    }

    private init(fields: [(name: HeaderName, value: Value)], conflict: Conflict, origins: Origins) {
        self.fields = fields
        self.conflict = conflict
        self.origins = origins
        let secret = fields.map { Redaction.standard.isSecret(headerName: $0.name.spelled) }
        self.secret = secret
        self.hasSecrets = secret.contains(true)
        var fixed: [FixedField]? = []
        for (index, (name, value)) in fields.enumerated() {
            guard case .fixed(let string) = value else {
                fixed = nil
                break
            }
            fixed?.append(
                FixedField(
                    name: name, value: string, secret: secret[index], nameProblem: HeaderValidation.problem(name: name.spelled),
                    valueProblem: HeaderValidation.problem(name: name.spelled, value: string)))
        }
        self.fixed = fixed
        if let fixed, conflict == .replace, fixed.allSatisfy({ $0.nameProblem == nil && $0.valueProblem == nil }) {
            self.fixedAndValid = fixed.map { ($0.name, $0.value) }
            self.fixedAndValidWithoutSecrets = fixed.filter { !$0.secret }.map { ($0.name, $0.value) }
        } else {
            self.fixedAndValid = nil
            self.fixedAndValidWithoutSecrets = nil
        }
    }

    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        if let command = try interceptWithoutSuspending(&task, context: context) { return command }
        let scope = scope(of: &task)
        for (index, (name, value)) in fields.enumerated() {
            guard scope.includes(secret: secret[index]) else {
                // Not added here, but a name that is no HTTP token is a mistake on every request.
                if let problem = HeaderValidation.problem(name: name.spelled) { throw problem }
                continue
            }
            switch value {
            case .fixed(let string): try set(name, string, on: &task)
            case .computed(let compute):
                guard try applies(name, to: task) else { continue }
                try set(name, try await compute(task), on: &task)
            }
        }
        return .execute
    }

    /// Whether `name` is a valid header name that this interceptor sets on `task` (thrown
    /// otherwise); `false` when the caller's own value is kept.
    private func applies(_ name: HeaderName, to task: URLTask) throws -> Bool {
        if let problem = HeaderValidation.problem(name: name.spelled) { throw problem }
        return !(conflict == .keepExisting && task.request.value(forHTTPHeaderField: name.spelled) != nil)
    }

    /// Sets `name` to `value` (nothing for `nil`) unless the caller's value is kept; refuses a
    /// value with CR or LF.
    private func set(_ name: HeaderName, _ value: String?, on task: inout URLTask) throws {
        guard try applies(name, to: task), let value else { return }
        if let problem = HeaderValidation.problem(name: name.spelled, value: value) { throw problem }
        task.request.replaceHeader(name, with: value)
    }

    // MARK: Origins

    /// Which of the fields a request gets.
    private enum Scope {
        /// None: the request is for an origin ``Origins/only(_:)`` does not name.
        case none
        /// The fields whose names are not secrets': a redirect took the request to another
        /// origin (``Origins/secretsStayOnTheCallersOrigin``).
        case withoutSecrets
        case all

        func includes(secret: Bool) -> Bool {
            switch self {
            case .none: false
            case .withoutSecrets: !secret
            case .all: true
            }
        }
    }

    /// The origin (``URLOrigin/description(of:)``) each interceptor of the chain saw a task's
    /// request at before its first send, where that was not the caller's request's own (an
    /// interceptor before it changed the URL); kept across attempts in ``URLTask/taskValues``.
    private enum FirstOrigins: URLTaskValueKey {
        typealias Value = [ObjectIdentifier: String]
    }

    /// What names one interceptor (and its copies) in ``FirstOrigins``.
    private final class Identity: Sendable {}

    /// The fields `task`'s request gets, by ``origins``.
    private func scope(of task: inout URLTask) -> Scope {
        switch origins.rule {
        case .everyOrigin:
            return .all
        case .listed(let keys):
            guard let key = URLOrigin.description(of: task.request.url), keys.contains(key) else { return .none }
            return .all
        case .callersOrigin:
            guard hasSecrets else { return .all }
            return isOnFirstOrigin(&task) ? .all : .withoutSecrets
        }
    }

    /// Whether `task`'s request is for the origin it had when this interceptor first saw it.
    ///
    /// Before the first send (attempt 1: no redirect yet, though a stale task may pass the
    /// interceptors twice) it is, by definition; when an interceptor before this one had moved
    /// it from the caller's URL to another origin, that origin is recorded. A later attempt (a
    /// retry, an answered challenge, a followed redirect, each starting again from the request
    /// the interceptors started from) compares its origin with that one, or with the caller's
    /// request's. Most requests are never redirected: attempt 1 and a URL that is still the
    /// caller's cost no parsing.
    private func isOnFirstOrigin(_ task: inout URLTask) -> Bool {
        let url = task.request.url
        let recorded = task.taskValues[FirstOrigins.self]?[ObjectIdentifier(identity)]
        if task.attempt == 1 {
            if recorded == nil, url != task.originalRequest.url, let here = URLOrigin.description(of: url),
                here != URLOrigin.description(of: task.originalRequest.url)
            {
                var first = task.taskValues[FirstOrigins.self] ?? [:]
                first[ObjectIdentifier(identity)] = here
                task.taskValues[FirstOrigins.self] = first
            }
            return true
        }
        if recorded == nil, url == task.originalRequest.url { return true }
        guard let reference = recorded ?? URLOrigin.description(of: task.originalRequest.url), let here = URLOrigin.description(of: url)
        else { return false }
        return here == reference
    }
}

extension HeaderInterceptor: SynchronousInterceptor {
    /// Sets fixed values without a Swift task; `nil` when a value is computed, because
    /// computing it may suspend.
    public func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand? {
        guard let fixed else { return nil }
        let scope = scope(of: &task)
        if let valid = scope == .all ? fixedAndValid : scope == .withoutSecrets ? fixedAndValidWithoutSecrets : nil {
            task.request.replaceHeaders(valid)
            return .execute
        }
        for field in fixed {
            if let problem = field.nameProblem { throw problem }
            guard scope.includes(secret: field.secret) else { continue }
            if conflict == .keepExisting && task.request.value(forHTTPHeaderField: field.name.spelled) != nil { continue }
            if let problem = field.valueProblem { throw problem }
            task.request.replaceHeader(field.name, with: field.value)
        }
        return .execute
    }
}

extension HeaderInterceptor: CustomReflectable {
    /// What `dump(_:)` and the debugger show: each header's name and its value, redacted when
    /// the header carries a secret (``Redaction/isSecret(headerName:)``: an API key set here is
    /// not shown), a computed value as `<computed>`.
    public var customMirror: Mirror {
        let shown = fields.map { field -> (name: String, value: String) in
            switch field.value {
            case .fixed(let value): (field.name.spelled, Redaction.standard.headerValue(value, name: field.name.spelled))
            case .computed: (field.name.spelled, "<computed>")
            }
        }
        return Mirror(self, children: ["fields": shown, "conflict": conflict, "origins": origins], displayStyle: .struct)
    }
}
