import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The configuration's `httpAdditionalHeaders`, applied by the pipeline instead of the inner
/// session.
///
/// corelibs merges a configuration's additional headers into every request it sends, at send
/// time, redirected ones included. The pipeline sends a followed redirect as a new inner task,
/// so an `Authorization` or an `X-Config-Key` from the configuration would go to whatever origin
/// a redirect names. The inner session therefore gets none; the pipeline puts them on the
/// caller's request once, where the caller did not set the header itself (as the session would:
/// the request's own headers win), and from there they follow the rules of the caller's own
/// headers: kept on a same-origin redirect; on a cross-origin one, every header that
/// ``Redaction`` calls a secret is dropped (`Redirect.dropCredentials(from:)`), the others kept.
struct AdditionalHeaders: Sendable {
    /// Name and value, in the configuration's order of iteration, and the name as corelibs'
    /// `setValue(_:forHTTPHeaderField:)` stores it (capitalised), found once.
    private let fields: [(name: String, value: String, stored: String)]

    /// The headers of `configuration` (`nil` when it has none: nothing to do per request), and a
    /// copy of it without them for the inner session.
    static func split(_ configuration: URLSessionConfiguration) -> (AdditionalHeaders?, URLSessionConfiguration) {
        let fields = (configuration.httpAdditionalHeaders ?? [:]).compactMap { key, value -> (String, String, String)? in
            guard let name = key.base as? String else { return nil }
            return (name, (value as? String) ?? String(describing: value), name.capitalized)
        }
        let inner = configuration.copy() as! URLSessionConfiguration  // copy() of a configuration is one
        inner.httpAdditionalHeaders = nil
        return (fields.isEmpty ? nil : AdditionalHeaders(fields: fields), inner)
    }

    /// `request` with every additional header it does not set itself, each named as the
    /// configuration spells it.
    ///
    /// A plain session sends `httpAdditionalHeaders` names as given (`header3`), while corelibs'
    /// `setValue(_:forHTTPHeaderField:)` stores a name capitalised (`Header3`). `setValue` still
    /// does the work (it drops a value it finds invalid, as before); a name it re-spelt is then
    /// renamed back, so the server sees what a plain session would send.
    func applied(to request: URLRequest) -> URLRequest {
        var request = request
        var respelt: [(stored: String, name: String)] = []
        for (name, value, stored) in fields where request.value(forHTTPHeaderField: name) == nil {
            request.setValue(value, forHTTPHeaderField: name)
            if stored != name { respelt.append((stored, name)) }
        }
        guard !respelt.isEmpty, var headers = request.allHTTPHeaderFields else { return request }
        for (stored, name) in respelt {
            // Absent where `setValue` refused the value, or kept the name (Apple platforms).
            guard let value = headers.removeValue(forKey: stored) else { continue }
            headers[name] = value
        }
        request.allHTTPHeaderFields = headers
        return request
    }
}
