import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The `URLError`s the pipeline makes itself, carrying what URLSession's own carry: a
/// description and the failing URL, as a `URL` and as a string.
enum PipelineURLError {
    /// The value of `NSURLErrorFailingURLStringErrorKey`: deprecated in Swift (which reads the
    /// URL key), still set by Apple's URLSession and read by code written against it.
    static let failingURLStringKey = "NSErrorFailingURLStringKey"

    /// An error with `code`, `description` and, when there is one, the failing `url`.
    static func make(_ code: URLError.Code, description: String, failing url: URL?) -> URLError {
        var info: [String: Any] = [NSLocalizedDescriptionKey: description]
        if let url {
            info[NSURLErrorFailingURLErrorKey] = url
            info[failingURLStringKey] = url.absoluteString
        }
        return URLError(code, userInfo: info)
    }

    /// A request that went its `timeoutInterval` without progress, worded as Apple's
    /// URLSession words it.
    static func timedOut(_ url: URL?) -> URLError {
        make(.timedOut, description: "The request timed out.", failing: url)
    }
}
