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

    private let fields: [(name: String, value: Value)]
    private let conflict: Conflict
    /// No value is computed: the interceptor decides without suspending.
    private let fixedOnly: Bool

    /// Headers to set, in order.
    public init(_ fields: KeyValuePairs<String, Value>, conflict: Conflict = .replace) {
        self.fields = fields.map { ($0.key, $0.value) }
        self.conflict = conflict
        self.fixedOnly = self.fields.allSatisfy { if case .fixed = $0.value { true } else { false } }
    }

    /// Fixed headers from a dictionary.
    public init(_ headers: [String: String], conflict: Conflict = .replace) {
        self.fields = headers.sorted { $0.key < $1.key }.map { ($0.key, .fixed($0.value)) }
        self.conflict = conflict
        self.fixedOnly = true
    }

    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        if let command = try interceptWithoutSuspending(&task, context: context) { return command }
        for (name, value) in fields {
            if let problem = HeaderValidation.problem(name: name) { throw problem }
            if conflict == .keepExisting, task.request.value(forHTTPHeaderField: name) != nil { continue }
            let resolved: String?
            switch value {
            case .fixed(let string): resolved = string
            case .computed(let compute): resolved = try await compute(task)
            }
            guard let resolved else { continue }
            if let problem = HeaderValidation.problem(name: name, value: resolved) { throw problem }
            task.request.setValue(resolved, forHTTPHeaderField: name)
        }
        return .execute
    }
}

extension HeaderInterceptor: SynchronousInterception {
    /// Fixed values only: a computed one may suspend.
    func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand? {
        guard fixedOnly else { return nil }
        for (name, value) in fields {
            guard case .fixed(let resolved) = value else { continue }
            if let problem = HeaderValidation.problem(name: name) { throw problem }
            if conflict == .keepExisting, task.request.value(forHTTPHeaderField: name) != nil { continue }
            if let problem = HeaderValidation.problem(name: name, value: resolved) { throw problem }
            task.request.setValue(resolved, forHTTPHeaderField: name)
        }
        return .execute
    }
}
