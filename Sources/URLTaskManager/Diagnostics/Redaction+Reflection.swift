import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// What `"\(value)"`, `String(reflecting:)`, `dump(_:)`, `Mirror(reflecting:)` and the debugger
// show of the core's types that hold a request or a response: the same as the other surfaces,
// through `Redaction.standard`. A synthesized mirror would show every stored property, the
// request's `Authorization` header and the URL's password among them.

extension URLTask: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// `URLTask 7 (attempt 2): GET https://api.example.com/items?token=REDACTED`: the task's
    /// number, attempt, method and URL, secrets redacted (see ``Redaction``), so a task can be
    /// interpolated into a log line.
    public var description: String {
        "URLTask \(id) (attempt \(attempt)): \(request.httpMethod ?? "GET") \(Redaction.standard.url(request.url))"
    }

    /// The same as ``description``: `String(reflecting:)` shows no secret either.
    public var debugDescription: String { description }

    /// What `dump(_:)` and the debugger show: the request and the original request as one line
    /// each (method, URL and headers, secrets redacted), the body by its kind and size, the
    /// attempt and the policy; never a header value or a query that is a secret.
    public var customMirror: Mirror {
        var children: [(label: String?, value: Any)] = [
            ("id", id), ("attempt", attempt), ("request", Redaction.standard.summary(of: request)), ("body", body),
            ("originalRequest", Redaction.standard.summary(of: originalRequest)),
        ]
        if let policy { children.append(("policy", policy)) }
        return Mirror(self, children: children, displayStyle: .struct)
    }
}

extension URLTaskError: CustomReflectable {
    /// What `dump(_:)` and the debugger show: the fields that are set, the response as one line
    /// (status, URL and headers, secrets redacted: its URL may carry the password and query the
    /// request had), the body prefix as its masked text, and an underlying `URLError` as
    /// ``description`` shows it (its user info holds the full failing URL).
    public var customMirror: Mirror {
        var children: [(label: String?, value: Any)] = [("code", code)]
        if let component { children.append(("component", component)) }
        if let underlying { children.append(("underlying", underlying is URLError ? Self.describe(underlying) : underlying)) }
        if let headerName { children.append(("headerName", headerName)) }
        if let reason { children.append(("reason", reason)) }
        if let limit { children.append(("limit", limit)) }
        if let count { children.append(("count", count)) }
        if let request { children.append(("request", request)) }
        if let response { children.append(("response", Redaction.standard.summary(of: response))) }
        if let bodyPrefix { children.append(("bodyPrefix", String(decoding: bodyPrefix, as: UTF8.self))) }
        if let byteLimit { children.append(("byteLimit", byteLimit)) }
        return Mirror(self, children: children, displayStyle: .struct)
    }
}

extension URLTaskOutcome: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The one text every surface of an outcome is made of: which case, and one line for what
    /// it carries. Every observer and reactor is handed an outcome, and a synthesized
    /// description or mirror would print the response's URL (its user, password and query, as
    /// the request had them) and its headers (`Set-Cookie`), or a `URLError` whose user info
    /// holds the failing URL; so the response is the status, URL and headers with their secrets
    /// redacted (``Redaction/standard``), and a failure is described as ``URLTaskError``
    /// describes an underlying error (a `URLError` by its code, meaning and URL without query
    /// or user info), then through ``Redaction/text(_:)``.
    private var redactedRendering: (label: String, text: String) {
        switch self {
        case .response(let response): ("response", Redaction.standard.summary(of: response))
        case .failure(let error): ("failure", Redaction.standard.text(URLTaskError.describe(error)))
        }
    }

    /// `response(201 https://REDACTED:REDACTED@api.example.com/items?api_key=REDACTED&page=2 [Set-Cookie: REDACTED])`
    /// or `failure(URLError -1005 (network connection lost) at https://api.example.com/items)`:
    /// the outcome with its secrets redacted (see ``Redaction``), so that an observer or a
    /// reactor can put an outcome in a log line as it is.
    public var description: String {
        let rendering = redactedRendering
        return "\(rendering.label)(\(rendering.text))"
    }

    /// The same as ``description``: `String(reflecting:)` shows no secret either.
    public var debugDescription: String { description }

    /// What `dump(_:)` and the debugger show: the case, with the same redacted line as
    /// ``description`` as its one child, never the response or the error themselves (their own
    /// mirrors hold the URL and the headers as they were).
    public var customMirror: Mirror {
        let rendering = redactedRendering
        return Mirror(self, children: [(label: rendering.label, value: rendering.text)], displayStyle: .enum)
    }
}
