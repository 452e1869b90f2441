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

    private let fields: [(name: HeaderName, value: Value)]
    private let conflict: Conflict
    /// Every value is fixed: the fields with their name's and value's problems, checked once
    /// here rather than on every task; `nil` when a value is computed (it may suspend).
    private let fixed: [FixedField]?
    /// Every fixed name and value is valid and the conflict rule is `.replace`: every task gets
    /// the same fields, set in one write of the request's headers.
    private let fixedAndValid: [(name: HeaderName, value: String)]?

    /// A fixed field, validated when the interceptor is made.
    private struct FixedField: Sendable {
        let name: HeaderName
        let value: String
        let nameProblem: URLTaskError?
        let valueProblem: URLTaskError?
    }

    /// Headers to set, in order.
    public init(_ fields: KeyValuePairs<String, Value>, conflict: Conflict = .replace) {
        self.init(fields: fields.map { (HeaderName($0.key), $0.value) }, conflict: conflict)
    }

    /// Fixed headers from a dictionary.
    public init(_ headers: [String: String], conflict: Conflict = .replace) {
        self.init(fields: headers.sorted { $0.key < $1.key }.map { (HeaderName($0.key), .fixed($0.value)) }, conflict: conflict)
    }

    private init(fields: [(name: HeaderName, value: Value)], conflict: Conflict) {
        self.fields = fields
        self.conflict = conflict
        var fixed: [FixedField]? = []
        for (name, value) in fields {
            guard case .fixed(let string) = value else {
                fixed = nil
                break
            }
            fixed?.append(
                FixedField(
                    name: name, value: string, nameProblem: HeaderValidation.problem(name: name.spelled),
                    valueProblem: HeaderValidation.problem(name: name.spelled, value: string)))
        }
        self.fixed = fixed
        if let fixed, conflict == .replace, fixed.allSatisfy({ $0.nameProblem == nil && $0.valueProblem == nil }) {
            self.fixedAndValid = fixed.map { ($0.name, $0.value) }
        } else {
            self.fixedAndValid = nil
        }
    }

    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        if let command = try interceptWithoutSuspending(&task, context: context) { return command }
        for (name, value) in fields {
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
}

extension HeaderInterceptor: SynchronousInterceptor {
    /// Sets fixed values without a Swift task; `nil` when a value is computed, because
    /// computing it may suspend.
    public func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand? {
        if let fixedAndValid {
            task.request.replaceHeaders(fixedAndValid)
            return .execute
        }
        guard let fixed else { return nil }
        for field in fixed {
            if let problem = field.nameProblem { throw problem }
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
        return Mirror(self, children: ["fields": shown, "conflict": conflict], displayStyle: .struct)
    }
}
