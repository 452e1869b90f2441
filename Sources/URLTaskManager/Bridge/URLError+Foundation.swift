import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension URLError {
    /// A `URLError` as Foundation's URL loading builds one: the description, and the failing
    /// URL under both `NSURLErrorFailingURLErrorKey` and `NSURLErrorFailingURLStringErrorKey`.
    ///
    /// The manager makes its own `URLError` on paths where a plain session would have made one
    /// (a task refused because its session is being cancelled, a wait that outlived the
    /// request's timeout, too many redirects). A caller must not be able to tell the two apart:
    /// code that reads `error.failureURLString` or shows `localizedDescription` gets what a
    /// plain session gives (`ErrorFidelityTests` compares them field by field).
    /// - Parameters:
    ///   - code: The error's code.
    ///   - url: The request's URL, as the caller made it.
    ///   - description: What corelibs says for this code (`"\(code)"` for a cancellation, as
    ///     `URLSessionTask.cancel()` does).
    ///   - underlying: The error corelibs puts under `NSUnderlyingErrorKey`, where it puts one.
    static func foundation(_ code: URLError.Code, url: URL?, description: String, underlying: NSError? = nil) -> URLError {
        var info: [String: Any] = [NSLocalizedDescriptionKey: description]
        if let underlying { info[NSUnderlyingErrorKey] = underlying }
        if let url {
            info[NSURLErrorFailingURLErrorKey] = url
            info[failingURLStringKey] = url.absoluteString
        }
        return URLError(code, userInfo: info)
    }

    /// `NSURLErrorFailingURLStringErrorKey`, which Foundation still sets and callers still read,
    /// spelled out: the constant is deprecated, and the strict build refuses its use.
    static let failingURLStringKey = "NSErrorFailingURLStringKey"

    /// The error a cancelled task completes with, exactly as `URLSessionTask.cancel()` builds it.
    static func cancelled(url: URL?) -> URLError {
        foundation(.cancelled, url: url, description: "\(URLError.Code.cancelled)")
    }

    /// A request that went its `timeoutInterval` without progress while it waited inside the
    /// pipeline (a gate, a slot, a batch, a credential), worded as Apple's URLSession words it:
    /// corelibs' own timeout carries no user info at all, so there is nothing of it to copy.
    static func timedOut(url: URL?) -> URLError {
        foundation(.timedOut, url: url, description: "The request timed out.")
    }

    /// A transfer that ended with neither a response nor an error, worded as corelibs' native
    /// protocol words a transfer that completed without a response.
    static func noResponse(url: URL?) -> URLError {
        foundation(.badServerResponse, url: url, description: "Transfer completed, but there's no response.")
    }

    /// The error of a redirect chain longer than 20, as corelibs' HTTP protocol builds it
    /// (`failWith(error:request:)`): the failing URL is the request that met the last redirect.
    static func tooManyRedirects(url: URL?) -> URLError {
        let description = "too many HTTP redirects"
        let underlying = NSError(
            domain: NSURLErrorDomain, code: URLError.Code.httpTooManyRedirects.rawValue, userInfo: [NSLocalizedDescriptionKey: description])
        return foundation(.httpTooManyRedirects, url: url, description: description, underlying: underlying)
    }
}
