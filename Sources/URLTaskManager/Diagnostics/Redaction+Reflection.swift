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
        return Mirror(self, children: children, displayStyle: .struct)
    }
}
