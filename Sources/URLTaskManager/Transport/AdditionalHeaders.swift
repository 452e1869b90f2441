import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The configuration's `httpAdditionalHeaders`, applied by the pipeline instead of the inner
/// session.
///
/// corelibs merges a configuration's additional headers into every request it sends, at send
/// time, redirected ones included. The pipeline sends a followed redirect as a new inner task,
/// so an `Authorization` from the configuration would go to whatever origin a redirect names.
/// The inner session therefore gets none; the pipeline puts them on the caller's request once,
/// where the caller did not set the header itself (as the session would: the request's own
/// headers win), and from there they follow the rules of the caller's own headers: kept on a
/// same-origin redirect, `Authorization` and `Cookie` dropped on a cross-origin one.
struct AdditionalHeaders: Sendable {
    /// Name and value, in the configuration's order of iteration.
    private let fields: [(name: String, value: String)]

    /// The headers of `configuration`, and a copy of it without them for the inner session.
    static func split(_ configuration: URLSessionConfiguration) -> (AdditionalHeaders, URLSessionConfiguration) {
        let fields = (configuration.httpAdditionalHeaders ?? [:]).compactMap { key, value -> (String, String)? in
            guard let name = key.base as? String else { return nil }
            return (name, (value as? String) ?? String(describing: value))
        }
        let inner = configuration.copy() as! URLSessionConfiguration  // copy() of a configuration is one
        inner.httpAdditionalHeaders = nil
        return (AdditionalHeaders(fields: fields), inner)
    }

    /// `request` with every additional header it does not set itself.
    func applied(to request: URLRequest) -> URLRequest {
        var request = request
        for (name, value) in fields where request.value(forHTTPHeaderField: name) == nil {
            request.setValue(value, forHTTPHeaderField: name)
        }
        return request
    }
}
