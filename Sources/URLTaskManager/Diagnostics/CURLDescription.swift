import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A request rendered as a `curl` command line, secrets redacted: to paste into a terminal or a
/// bug report and replay what the app sent.
///
/// It shows the method, the URL, every header of the request (sorted by name) and a small text
/// body, each quoted for a POSIX shell, through the library's one ``Redaction``: by default
/// the values of `Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie`, `X-API-Key`
/// and any header with a secret-like name (the scheme, such as `Bearer`, is kept), the URL's
/// user and password, and the query items, path parameters, form fields (whatever the body's
/// declared `Content-Type`) and JSON members with secret-like names
/// (``Redaction/defaultNames``: `access_token`, `api_key`, `password`, `session`...); add the
/// names of your own secrets to ``Options/redactedQueryItems`` and ``Options/redactedHeaders``.
///
/// ```swift
/// let command = CURLDescription(request, options: .init(redactingQueryItems: ["tenant"]))
/// print(command)  // curl 'https://api.example.com/items?tenant=REDACTED' -H 'Authorization: Bearer REDACTED'
/// ```
///
/// A redacted command sends `Bearer REDACTED`, so it cannot replay an authenticated request. To
/// replay one from a terminal, ask for the secrets by name: ``Options/revealingSecrets`` shows
/// every value as it was sent (it is the only way to turn the redaction off: emptying
/// ``Options/redactedHeaders`` still hides every secret-like name). Such a command holds the
/// credentials themselves; keep it on your machine.
///
/// For the request as a manager last sent it, after the interceptors, use
/// ``URLTask/curlDescription(options:)`` on the task a reactor sees, or put a
/// ``CURLDescriptionInterceptor`` last in the manager's interceptors to find each attempt's
/// command in its task's events. Headers a session adds on its own (the configuration's
/// `httpAdditionalHeaders`, `Content-Length`, cookies from its cookie storage) are not part of
/// the request, so they are not shown.
public struct CURLDescription: Sendable, Hashable, CustomStringConvertible {
    /// The command line, one line unless a shown body spans several.
    public let command: String

    /// What is redacted, and how large a body may be to be shown: the library's redaction plus
    /// names of your own (``init(redactingHeaders:redactingQueryItems:maximumBodySize:)``, the
    /// default), or, asked for by name, every secret shown (``revealingSecrets``).
    public struct Options: Sendable, Hashable {
        /// Header names whose values are replaced by `REDACTED` (compared without case), besides
        /// the headers whose names are secret-like (``Redaction/isSecret(headerName:)``), which
        /// emptying this set does not show; in ``revealingSecrets`` (empty there), these alone.
        /// The scheme of an `Authorization`-like value (`Bearer`, `Basic`) is kept.
        public var redactedHeaders: Set<String>
        /// Names whose values are replaced by `REDACTED` (compared without case, `_`, `-` or
        /// `.`) in the URL's query and path parameters and in a form or JSON body, besides the
        /// names that are secret-like (``Redaction/isSecret(name:)``), which emptying this set
        /// does not show; in ``revealingSecrets`` (empty there), these alone.
        public var redactedQueryItems: Set<String>
        /// The largest body shown, in bytes; a larger one, a binary one (not UTF-8, or holding
        /// control characters a terminal would interpret) or a stream is named but not shown.
        public var maximumBodySize: Int
        /// Whether the command shows secrets: `true` only for ``revealingSecrets`` and options
        /// made from it (no initializer or setter turns it on), so a logger can refuse such
        /// options before a command reaches a log that leaves the machine.
        public private(set) var revealsSecrets: Bool

        /// ``Redaction/defaultHeaders``: `Authorization`, `Proxy-Authorization`, `Cookie`,
        /// `Set-Cookie` and `X-API-Key`.
        public static let defaultRedactedHeaders: Set<String> = Redaction.defaultHeaders
        /// ``Redaction/defaultNames``: the OAuth 2.0 parameters that are secrets wherever they
        /// appear (RFC 6749, RFC 7636, RFC 8693), API keys, passwords, sessions and signatures.
        public static let defaultRedactedQueryItems: Set<String> = Redaction.defaultNames
        /// 4 KiB: enough for a JSON request, small enough for a log line.
        public static let defaultMaximumBodySize = 4096

        /// The defaults, plus the header and query item names of your own secrets.
        public init(
            redactingHeaders: Set<String> = [], redactingQueryItems: Set<String> = [], maximumBodySize: Int = defaultMaximumBodySize
        ) {
            redactedHeaders = Self.defaultRedactedHeaders.union(redactingHeaders)
            redactedQueryItems = Self.defaultRedactedQueryItems.union(redactingQueryItems)
            self.maximumBodySize = maximumBodySize
            revealsSecrets = false
        }

        /// Every secret shown, as it was sent: `Authorization`, cookies, API keys, secret query
        /// items and body fields, a URL's user and password. For replaying a request from a
        /// terminal (a redacted command sends `Bearer REDACTED`), with the system's `curl`;
        /// `CURLDescriptionTests.testARevealingCommandRunByCurlSendsWhatTheManagerSent` runs one
        /// and the server receives the method, target, headers and body the manager sent.
        ///
        /// The command holds the credentials themselves: use it on your own machine, never for
        /// logs, events or bug reports that leave it (``revealsSecrets`` tells such options
        /// apart). The two name sets start empty and, in these options, are all that is
        /// redacted: add a name to hide that one value (`options.redactedHeaders.insert("X-Tenant-Key")`).
        ///
        /// ```swift
        /// let replay = CURLDescription(task, options: .revealingSecrets).command
        /// ```
        public static let revealingSecrets: Options = {
            var options = Options()
            options.redactedHeaders = []
            options.redactedQueryItems = []
            options.revealsSecrets = true
            return options
        }()

        /// The redaction these names make: the library's rules and these names, or, revealing,
        /// these names alone.
        var redaction: Redaction {
            revealsSecrets
                ? Redaction(revealingAllBut: redactedQueryItems, headers: redactedHeaders)
                : Redaction(names: redactedQueryItems, headers: redactedHeaders)
        }
    }

    /// The request as it stands, its `httpBody` as the body (an `httpBodyStream` is named, not read).
    public init(_ request: URLRequest, options: Options = Options()) {
        command = Self.render(request, body: URLTaskBody(request: request), options: options)
    }

    /// The task's current request and body: after the interceptors, what is sent.
    public init(_ task: URLTask, options: Options = Options()) {
        command = Self.render(task.request, body: task.body, options: options)
    }

    /// The command line.
    public var description: String { command }

    private static func render(_ request: URLRequest, body: URLTaskBody, options: Options) -> String {
        let redaction = options.redaction
        var parts = ["curl"]
        let method = request.httpMethod ?? "GET"
        let hasBody: Bool
        if case .none = body { hasBody = false } else { hasBody = true }
        if method == "HEAD" {
            parts.append("--head")
        } else if method != "GET" || hasBody {
            parts.append("-X \(quoted(method))")
        }
        parts.append(quoted(redaction.url(request.url)))
        let headers = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key.lowercased() < $1.key.lowercased() }
        for (name, value) in headers {
            let shown = redaction.headerValue(value, name: name)
            parts.append("-H \(quoted("\(name): \(shown)"))")
        }
        switch body {
        case .none:
            break
        case .file(let url):
            parts.append("--data-binary \(quoted("@" + url.path))")
        case .stream:
            parts.append("# body not shown: a stream")
        case .data(let data):
            if let text = shownText(data, maximum: options.maximumBodySize) {
                // Whatever its declared type: URLSession sends a form without a Content-Type.
                parts.append("--data-binary \(quoted(redaction.text(text)))")
            } else {
                parts.append("# body not shown: \(data.count) bytes")
            }
        }
        return parts.joined(separator: " ")
    }

    /// `text` between single quotes, each `'` in it written as `'\''`: nothing inside single
    /// quotes is special to a POSIX shell, not even `$`, `` ` `` or `\`.
    static func quoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    /// The body as text if it is small, UTF-8, and free of control characters other than tab
    /// and line breaks (an escape sequence printed to a terminal is a command to it).
    private static func shownText(_ data: Data, maximum: Int) -> String? {
        guard data.count <= maximum, let text = String(data: data, encoding: .utf8) else { return nil }
        let allowed: Set<Unicode.Scalar> = ["\t", "\n", "\r"]
        let binary = text.unicodeScalars.contains { scalar in
            (scalar.value < 0x20 && !allowed.contains(scalar)) || scalar.value == 0x7f || (0x80...0x9f).contains(scalar.value)
        }
        return binary ? nil : text
    }
}

extension URLTask {
    /// The task's request and body as a `curl` command line, secrets redacted (see
    /// ``CURLDescription``; shown only with ``CURLDescription/Options/revealingSecrets``). In an
    /// interceptor it is the request as the interceptors before it left it; in a reactor, the
    /// request as it was last sent.
    public func curlDescription(options: CURLDescription.Options = CURLDescription.Options()) -> String {
        CURLDescription(self, options: options).command
    }
}

/// Adds each request's `curl` command line, secrets redacted, to its task's events: a
/// ``URLTaskEvent/Kind/annotated(name:value:)`` event named `curl`, once per send.
///
/// Put it last in the manager's interceptors, so that it sees the request as the others left
/// it. It costs nothing while nobody reads ``URLTaskManager/events(bufferingNewest:)``: the
/// command is only rendered for a task someone observes.
///
/// Unlike the manager's own events, which carry no header value and no body, these show every
/// header that is not redacted and small text bodies: add it where your logs may hold what
/// your requests hold (a debug build), and name your own secrets in `options`. With
/// ``CURLDescription/Options/revealingSecrets`` the events carry every token and key as sent,
/// for a command to replay on your own machine: never let such events reach a shared log.
public struct CURLDescriptionInterceptor: URLTaskInterceptor {
    /// What is redacted, and the largest body shown.
    public let options: CURLDescription.Options

    /// An interceptor that annotates events with `options`' redaction.
    public init(options: CURLDescription.Options = CURLDescription.Options()) {
        self.options = options
    }

    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        let snapshot = task
        let options = options
        // Only a request that goes out is described: one answered locally, failed, intercepted
        // again after a refresh or sharing another's transfer adds no `curl` line.
        task.annotateWhenSent("curl", CURLDescription(snapshot, options: options).command)
        return .execute
    }
}
