import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Every way URLTaskManager itself can fail a task, as the caller receives it.
///
/// A task made through ``URLTaskManager/session`` completes exactly once: with a response, with
/// a `URLError`, with `URLError.cancelled` when its caller cancels it, or with a `URLTaskError`.
/// Which one a failure arrives as follows one rule, whatever interceptors and reactors the
/// manager has, so that adding a component to a stack changes no error a caller catches:
///
/// 1. **A `URLError` reaches the caller as itself**, wherever it was produced: the transport
///    (exactly as a plain `URLSession` reports it), an interceptor that throws or fails the task
///    with one, a reactor's work that throws one (a token refresh whose endpoint cannot be
///    reached), an `OfflineHold` that gives up (the original error). When a component produced
///    it, its user info names that component under ``componentUserInfoKey``. So
///    `catch let error as URLError where error.code == .notConnectedToInternet` handles the
///    network being down however the stack is built.
/// 2. **A `URLTaskError` a component throws or fails a task with is delivered as it is**, never
///    wrapped: the pipeline only fills in ``component`` (when it is `nil`) and ``request``. The
///    built-in components make theirs with the code that says what happened, declared in their
///    own module (`circuitOpen` and `rateLimitQueueFull` in URLTaskResilience,
///    `authenticationFailed` in URLTaskOAuth2); a component of your own declares its code the
///    same way (``Code-swift.struct``) and fails the task with
///    ``init(code:component:underlying:headerName:reason:limit:count:request:)``.
/// 3. **Anything else a component throws** is wrapped: ``Code-swift.struct/interceptorFailed``
///    for an interceptor, ``Code-swift.struct/reactorFailed`` for a reactor's work, with what it
///    threw as ``underlying``.
///
/// So a `URLTaskError`'s ``underlying`` is never another `URLTaskError`. The one exception to
/// the rule is ``URLTaskManager/failTasks(with:where:)``: the error an app passes there reaches
/// the caller as the app gave it.
///
/// The error says what happened (``code``), which interceptor or reactor did it (``component``),
/// what that component threw (``underlying``) and to which request (``request``: its URL
/// without query, method and attempt), so that a log line or a bug report needs nothing else.
///
/// It is a struct over a code, not an enum, so that a new way to fail can be added without
/// breaking anyone's `switch`. Match on the code:
///
/// ```swift
/// do {
///     let (data, _) = try await manager.session.data(from: url)
/// } catch let error as URLTaskError where error.code == .authenticationFailed {
///     showLogin(because: error.underlying)
/// } catch let error as URLError where error.code == .notConnectedToInternet {
///     showOffline()
/// }
/// ```
public struct URLTaskError: Error, Sendable {
    /// What went wrong: compare with `==` or match in a `switch` (with a `default`, since codes
    /// may be added).
    ///
    /// A struct of static members, not an enum, so that every module declares the codes of its
    /// own components as the core declares its: URLTaskResilience declares `circuitOpen` and
    /// `rateLimitQueueFull`, URLTaskOAuth2 `authenticationFailed`, and a component of yours
    /// declares its own the same way, which callers then catch like a built-in one:
    ///
    /// ```swift
    /// extension URLTaskError.Code {
    ///     /// The request was not sent: the account's monthly quota is spent.
    ///     public static let quotaExceeded = URLTaskError.Code("MyKit.quotaExceeded")
    /// }
    /// ```
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        /// What happened, in a few words, for ``URLTaskError/description``; `nil` where the
        /// code's module said nothing (the description then names the code).
        let summary: String?

        /// A code named `name`, for a module's static member (see the type's discussion), with
        /// `summary`, what happened in a few words (`"Refused without sending: the quota is
        /// spent"`), which the error's description says followed by the component's name.
        ///
        /// Two codes with one name are one code (`==` and hashing read the name only): the
        /// package's own names are bare (`"reactorFailed"`, `"circuitOpen"`, as 0.3 printed
        /// them), so give yours your module's name in front (`"MyKit.quotaExceeded"`).
        public init(_ name: String, summary: String? = nil) {
            self.name = name
            self.summary = summary
        }

        public static func == (lhs: Code, rhs: Code) -> Bool { lhs.name == rhs.name }

        public func hash(into hasher: inout Hasher) { hasher.combine(name) }

        /// An interceptor threw, or returned ``InterceptCommand/fail(_:)``, with an error that is
        /// neither a `URLError` (delivered as itself) nor a `URLTaskError` (delivered as it is);
        /// ``underlying`` is what it gave.
        public static let interceptorFailed = Code("interceptorFailed")
        /// A header value contained CR or LF, or a header name was not an HTTP token
        /// (``headerName``, ``reason``). Sending it would let one request smuggle another, so the
        /// task fails instead.
        public static let invalidHeader = Code("invalidHeader")
        /// The task was held in a batch longer than ``URLTaskManager/Options/maximumHoldTime``
        /// (``limit``).
        public static let holdTimedOut = Code("holdTimedOut")
        /// A reactor's work threw an error that is neither a `URLError` (delivered as itself) nor
        /// a `URLTaskError` (delivered as it is): every task waiting on that run receives this
        /// same error, with what the work threw as ``underlying``.
        public static let reactorFailed = Code("reactorFailed")
        /// A reactor's work ran longer than its configured timeout (``limit``).
        public static let reactorTimedOut = Code("reactorTimedOut")
        /// The task triggered reactions more times than its reactor allows (``count``: the attempts).
        public static let tooManyAttempts = Code("tooManyAttempts")
        /// A reactor's runs kept producing what the server refused (``count`` runs within
        /// ``limit``, see ``URLTaskReactorConfiguration/LoopGuard``): a refresh that succeeds
        /// but whose token the server keeps rejecting. Runs whose token was accepted before it
        /// was refused (a revocation) are not counted.
        public static let reactionLoop = Code("reactionLoop")
        /// The task must be sent again but its body cannot be (``reason``): a stream body larger
        /// than the replay limit, or a stream that failed while being read.
        public static let bodyNotReplayable = Code("bodyNotReplayable")
        /// An upload task whose body the platform does not expose to a `URLProtocol`. The task
        /// fails rather than send an empty body.
        public static let uploadBodyUnavailable = Code("uploadBodyUnavailable")
        /// The task reached a session that was already invalidated: on Linux, a task created
        /// before `finishTasksAndInvalidate()` but resumed only after every other task had ended,
        /// or a ``URLTaskManager/download(for:)`` started after the session was invalidated. A
        /// plain session would refuse such a task too.
        public static let managerInvalidated = Code("managerInvalidated")
        /// A download task made with the session's own download APIs (`download(from:)`,
        /// `downloadTask(with:)`) whose request an interceptor would change, hold, fail or answer
        /// (``reason``). On Linux such a task cannot pass through the interceptors (corelibs
        /// completes a download only from its own protocol), and sending it without them (no
        /// token, no API key) would fail quietly; so it fails before anything is sent. Use
        /// ``URLTaskManager/download(for:)``, which runs the whole pipeline.
        public static let downloadNeedsPipeline = Code("downloadNeedsPipeline")

        /// The final answer is not one the caller accepts (``ResponseValidation``): ``response``
        /// has its status and headers, ``bodyPrefix`` the start of its body, ``reason`` why.
        public static let responseRejected = Code("responseRejected")

        /// An answer the pipeline holds whole before anyone sees it had a body larger than
        /// ``URLTaskManager/Options/maximumHeldBodySize`` (``byteLimit``: that limit in bytes;
        /// ``response``: its status and headers; ``reason``: what held it): the body of a 401
        /// whose authentication challenge the caller's side answers, or of an answer a reactor
        /// takes and may deliver. Its transfer was stopped: the pipeline never holds a body
        /// without a bound, and never hands over a cut one.
        public static let responseTooLarge = Code("responseTooLarge")

        /// Declared in URLTaskResilience, which makes it (a `CircuitBreaker`'s open circuit).
        @available(*, unavailable, message: "use `import URLTaskResilience`, which declares this code")
        public static var circuitOpen: Code { Code("circuitOpen") }
        /// Declared in URLTaskResilience, which makes it (a `RateLimiter`'s full queue).
        @available(*, unavailable, message: "use `import URLTaskResilience`, which declares this code")
        public static var rateLimitQueueFull: Code { Code("rateLimitQueueFull") }
        /// Declared in URLTaskOAuth2, which makes it (a credential the request could not have).
        @available(*, unavailable, message: "use `import URLTaskOAuth2`, which declares this code")
        public static var authenticationFailed: Code { Code("authenticationFailed") }

        /// A task asked a ``URLTaskManager/bytes(for:)`` body for more while another task's read
        /// of it was under way. A body is one stream of bytes: split between two readers,
        /// neither would have it whole. So the read that came second is refused with this at
        /// once, and changes nothing: the read under way, and the reads of the task that reads
        /// the body, go on as if it had not been asked (the sequence is `Sendable`, so this is
        /// a defined outcome, not a crash). Read a body from one task at a time.
        public static let alreadyBeingRead = Code("alreadyBeingRead")
        /// The reader of a ``URLTaskManager/bytes(for:)`` body fell behind by more than the
        /// temporary file may hold (``byteLimit``:
        /// ``URLTaskManager/Options/maximumSpilledBodySize``). The transfer was stopped there,
        /// so nothing more is read from the network or written to disk; the reader received
        /// every byte that came before the limit, in order, then this error. The body is not
        /// whole: read it faster, raise the limit, or use ``URLTaskManager/download(for:)``.
        public static let spillLimitReached = Code("spillLimitReached")

        /// The code's name (`"reactorFailed"`, `"MyKit.quotaExceeded"`).
        public var description: String { name }
    }

    /// The interceptor or reactor a failure came from.
    public struct Component: Hashable, Sendable, CustomStringConvertible {
        /// Which chain it belongs to.
        public enum Kind: Hashable, Sendable {
            /// One of the manager's interceptors.
            case interceptor
            /// One of the manager's reactors.
            case reactor
        }

        /// Which chain it belongs to.
        public let kind: Kind
        /// Its position in the array given to the manager, which identifies it even when two
        /// components share a type; `nil` when the failure was raised outside the pipeline (an
        /// interceptor of the OAuth2 kit reporting its authenticator's failure).
        public let index: Int?
        /// Its type's name, followed by `#index` when the manager has two of that type: for
        /// display only.
        public let name: String

        /// A component, for tests of code that maps these errors.
        public init(kind: Kind, index: Int?, name: String) {
            self.kind = kind
            self.index = index
            self.name = name
        }

        /// Its name.
        public var description: String { name }
    }

    /// The request a failure happened to, without anything secret: the URL loses its query,
    /// fragment and user info (where a token could be).
    public struct Request: Hashable, Sendable, CustomStringConvertible {
        /// The URL without query, fragment or user info.
        public let url: URL?
        /// The HTTP method.
        public let method: String
        /// Which send of the task it was (1 for the first).
        public let attempt: Int

        /// A request context, for tests of code that maps these errors.
        public init(url: URL?, method: String, attempt: Int) {
            self.url = url
            self.method = method
            self.attempt = attempt
        }

        /// `GET https://host/path (attempt 2)`.
        public var description: String {
            "\(method) \(url?.absoluteString ?? "-")" + (attempt > 1 ? " (attempt \(attempt))" : "")
        }
    }

    /// What went wrong.
    public let code: Code
    /// The interceptor or reactor that failed the task, where one did. The pipeline fills it in
    /// when a component gives an error without it.
    public internal(set) var component: Component?
    /// What the component threw or gave, where it did (a reactor's refresh error, an
    /// interceptor's own error).
    public let underlying: (any Error)?
    /// The offending header's name, for ``Code/invalidHeader`` (never its value).
    public let headerName: String?
    /// Why, in words, for ``Code/invalidHeader``, ``Code/bodyNotReplayable`` and
    /// ``Code/downloadNeedsPipeline``.
    public let reason: String?
    /// The time limit that ran out (``Code/holdTimedOut``, ``Code/reactorTimedOut``) or the
    /// window of ``Code/reactionLoop``.
    public let limit: Duration?
    /// The attempts of ``Code/tooManyAttempts``, the runs of ``Code/reactionLoop``.
    public let count: Int?
    /// The request it happened to, once the pipeline has failed the task with it.
    public internal(set) var request: Request?
    /// The rejected response, for ``Code/responseRejected``: its status and headers.
    public internal(set) var response: HTTPURLResponse?
    /// The start of the rejected response's body (at most 512 bytes, known secret fields
    /// masked), for ``Code/responseRejected``: enough to show the server's error message.
    public internal(set) var bodyPrefix: Data?
    /// The size limit, in bytes, that was reached: for ``Code/spillLimitReached``, the
    /// ``URLTaskManager/Options/maximumSpilledBodySize`` in force, so that a log line says which
    /// setting to change and from what.
    public internal(set) var byteLimit: Int?

    /// An error for a component of yours to fail a task with (throw it, or give it to
    /// ``InterceptCommand/fail(_:)``), and for tests of code that maps these errors. The
    /// caller receives it as it is, not wrapped; the pipeline fills in ``component`` (leave it
    /// `nil`) and ``request``. The built-in components make theirs with this initializer too.
    /// Give a `URLError` as itself rather than as ``underlying``: callers catch it as one.
    public init(
        code: Code, component: Component? = nil, underlying: (any Error)? = nil, headerName: String? = nil, reason: String? = nil,
        limit: Duration? = nil, count: Int? = nil, request: Request? = nil
    ) {
        self.code = code
        self.component = component
        self.underlying = underlying
        self.headerName = headerName
        self.reason = reason
        self.limit = limit
        self.count = count
        self.request = request
    }

    /// The user-info key under which a `URLError` an interceptor or a reactor's work failed a
    /// task with names that component (its ``Component/name``): such an error reaches the caller
    /// as itself, not wrapped, so that code written for `URLSession`
    /// (`catch let error as URLError`) keeps working. A transport error the pipeline delivers
    /// as received has none.
    public static let componentUserInfoKey = "URLTaskManagerComponent"

    // MARK: The errors the manager makes

    /// What the caller receives when `component` fails a task with `error` (an interceptor's
    /// throw or ``InterceptCommand/fail(_:)``, a reactor's work that threw): the type's one rule.
    /// A `URLError` as itself, naming `component` in its user info unless it names one already;
    /// a `URLTaskError` as it is, with `component` filled in if it had none; anything else
    /// wrapped in a `URLTaskError` with `code` (``Code-swift.struct/interceptorFailed`` or
    /// ``Code-swift.struct/reactorFailed``). The only place the pipeline wraps an error.
    ///
    /// Public for a part that fails a task on behalf of another (the OAuth2 kit's interceptor
    /// reports its authenticator's failed refresh as the refresh reactor's): what it throws then
    /// reaches the caller exactly as if that component had failed the task itself.
    public static func delivered(_ error: any Error, from component: Component, code: Code) -> any Error {
        switch error {
        case let urlError as URLError:
            guard urlError.userInfo[componentUserInfoKey] == nil else { return urlError }
            var info = urlError.userInfo
            info[componentUserInfoKey] = component.name
            return URLError(urlError.code, userInfo: info)
        case var taskError as URLTaskError:
            if taskError.component == nil { taskError.component = component }
            return taskError
        default:
            return URLTaskError(code: code, component: component, underlying: error)
        }
    }

    static func invalidHeader(name: String, reason: String) -> URLTaskError {
        URLTaskError(code: .invalidHeader, headerName: name, reason: reason)
    }

    static func holdTimedOut(_ interceptor: Component, after limit: Duration) -> URLTaskError {
        URLTaskError(code: .holdTimedOut, component: interceptor, limit: limit)
    }

    static func reactorTimedOut(_ reactor: Component, after limit: Duration) -> URLTaskError {
        URLTaskError(code: .reactorTimedOut, component: reactor, limit: limit)
    }

    static func tooManyAttempts(_ reactor: Component, attempts: Int) -> URLTaskError {
        URLTaskError(code: .tooManyAttempts, component: reactor, count: attempts)
    }

    static func reactionLoop(_ reactor: Component, runs: Int, window: Duration) -> URLTaskError {
        URLTaskError(code: .reactionLoop, component: reactor, limit: window, count: runs)
    }

    static func bodyNotReplayable(reason: String) -> URLTaskError {
        URLTaskError(code: .bodyNotReplayable, reason: reason)
    }

    static let uploadBodyUnavailable = URLTaskError(code: .uploadBodyUnavailable)

    static let managerInvalidated = URLTaskError(code: .managerInvalidated)

    static func responseRejected(_ response: HTTPURLResponse, body: Data, reason: String) -> URLTaskError {
        var error = URLTaskError(code: .responseRejected, reason: reason)
        error.response = response
        error.bodyPrefix = ResponseValidation.safePrefix(of: body)
        return error
    }

    static func responseTooLarge(_ response: HTTPURLResponse, limit: Int, heldFor reason: String, by component: Component?) -> URLTaskError
    {
        var error = URLTaskError(code: .responseTooLarge, component: component, reason: reason)
        error.response = response
        error.byteLimit = limit
        return error
    }

    static let alreadyBeingRead = URLTaskError(code: .alreadyBeingRead)

    static func spillLimitReached(limit: Int) -> URLTaskError {
        var error = URLTaskError(code: .spillLimitReached)
        error.byteLimit = limit
        return error
    }

    static func downloadNeedsPipeline(_ interceptor: Component, reason: String) -> URLTaskError {
        URLTaskError(code: .downloadNeedsPipeline, component: interceptor, reason: reason)
    }

    /// This error, naming `request` (its URL without query, its method, `attempt`), unless it
    /// already names one.
    func about(_ request: URLRequest, attempt: Int) -> URLTaskError {
        guard self.request == nil else { return self }
        var named = self
        named.request = Request(url: URLTaskEvent.redacted(request.url), method: request.httpMethod ?? "GET", attempt: attempt)
        return named
    }
}

extension URLTaskError: CustomStringConvertible, LocalizedError {
    /// One sentence: what happened, by which component, to which request, and why. It never
    /// holds a header value, a query or a body; ``underlying`` is described as its own type
    /// describes itself (the OAuth2 kit's errors hide their secrets).
    public var description: String {
        var text: String
        let by = component.map { " \($0.name)" } ?? ""
        switch code {
        case .interceptorFailed: text = "Interceptor\(by) failed the task"
        case .invalidHeader: text = "Header \"\(headerName ?? "?")\" refused: \(reason ?? "invalid")"
        case .holdTimedOut: text = "Held by\(by) for longer than \(limit.map { "\($0)" } ?? "its limit")"
        case .reactorFailed: text = "Reactor\(by) failed"
        case .reactorTimedOut: text = "Reactor\(by) did not finish within \(limit.map { "\($0)" } ?? "its timeout")"
        case .tooManyAttempts: text = "Reactor\(by) reacted to this task \(count ?? 0) times; giving up"
        case .reactionLoop:
            text = "Reactor\(by) ran \(count ?? 0) times within \(limit.map { "\($0)" } ?? "its window"); refusing to run again"
        case .bodyNotReplayable: text = "The request body cannot be sent again: \(reason ?? "")"
        case .uploadBodyUnavailable: text = "The upload body is not visible to URLTaskManager on this platform; the task was not sent"
        case .managerInvalidated: text = "The URLTaskManager's session was invalidated before the task was sent"
        case .downloadNeedsPipeline:
            text =
                "Interceptor\(by) would not let this download go out as it is (\(reason ?? "")), and on Linux a download task "
                + "made with URLSession's download APIs cannot pass through the interceptors: use manager.download(for:) instead; "
                + "nothing was sent"
        case .responseRejected: text = "The response was rejected: \(reason ?? "not acceptable")"
        case .responseTooLarge:
            let status = response.map { " \($0.statusCode)" } ?? ""
            text =
                "The\(status) answer held \(reason ?? "whole") had a body of more than \(byteLimit ?? 0) bytes "
                + "(URLTaskManager.Options.maximumHeldBodySize); its transfer was stopped"
        case .alreadyBeingRead: text = "This bytes(for:) body is already being read by another task; a body is read by one task at a time"
        case .spillLimitReached:
            text =
                "The bytes(for:) body's reader fell more than \(byteLimit.map { "\($0) bytes" } ?? "its limit") behind "
                + "(Options.maximumSpilledBodySize): the transfer was stopped, after the bytes that came before"
        default:
            // A code a module declared (the satellites' among them): its own words.
            text = (code.summary ?? "The task failed: \(code)") + (by.isEmpty ? "" : " (\(by.dropFirst()))")
        }
        if let request { text += " [\(request)]" }
        if let underlying { text += ": \(Self.describe(underlying))" }
        return text
    }

    public var errorDescription: String? { description }

    /// An underlying error as a reader wants it: a `URLError` by its code and meaning (its
    /// bridged description is often "(null)"), anything else as it describes itself.
    static func describe(_ error: any Error) -> String {
        error is URLError ? URLTaskEvent.Kind.describe(error) : String(describing: error)
    }
}

extension URLError.Code {
    /// What the code means, in a few words, for error text.
    var meaning: String {
        switch self {
        case .cancelled: "cancelled"
        case .timedOut: "timed out"
        case .cannotConnectToHost: "cannot connect to host"
        case .cannotFindHost: "cannot find host"
        case .networkConnectionLost: "network connection lost"
        case .notConnectedToInternet: "not connected to the internet"
        case .badServerResponse: "bad server response"
        case .unsupportedURL: "unsupported URL"
        case .badURL: "bad URL"
        case .httpTooManyRedirects: "too many redirects"
        case .userAuthenticationRequired: "authentication required"
        case .secureConnectionFailed: "secure connection failed"
        case .serverCertificateUntrusted: "server certificate untrusted"
        case .dnsLookupFailed: "DNS lookup failed"
        case .resourceUnavailable: "resource unavailable"
        case .dataNotAllowed: "data not allowed"
        default: "code \(rawValue)"
        }
    }
}
