import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The request a followed redirect sends, built the way the pipeline builds every attempt.
///
/// corelibs cannot hand a redirect back to the caller's session from a custom protocol, so
/// the pipeline follows redirects itself: it asks the caller's delegate (as URLSession would),
/// then sends the request it answered through the interceptors, like a resend. The proposed
/// request starts from the request the interceptors last started from, not from what was
/// sent: a header an interceptor added (a token) is added again only if that interceptor
/// wants it for the new URL.
enum Redirect {
    /// What to propose to the caller's delegate for `response`, whose inner session proposed
    /// `newRequest`, when the interceptors started from `base`.
    ///
    /// The URL and the method are the inner session's (a 303, or a 301/302 after a POST, turns
    /// into GET). A redirect that keeps the method (307, 308) sends the body again, as
    /// RFC 9110 and Apple's URLSession do (a plain session on corelibs drops it): the pipeline
    /// replays the body it holds (see `TaskStateMachine`). No credential goes to another origin
    /// (scheme, host or port): see ``dropCredentials(from:)``.
    static func request(following response: HTTPURLResponse, to newRequest: URLRequest, from base: URLRequest) -> URLRequest {
        var request = base
        request.url = newRequest.url
        request.mainDocumentURL = newRequest.mainDocumentURL
        request.httpMethod = newRequest.httpMethod
        request.httpBody = nil
        request.httpBodyStream = nil
        if request.httpMethod != base.httpMethod {
            // The body is dropped with the method: so are the headers that describe it.
            request.setValue(nil, forHTTPHeaderField: "Content-Type")
            request.setValue(nil, forHTTPHeaderField: "Content-Length")
        }
        if let from = response.url, let to = newRequest.url, !sameOrigin(from, to) {
            dropCredentials(from: &request)
        }
        return request
    }

    /// Removes every header that ``Redaction/standard`` calls a secret
    /// (``Redaction/isSecret(headerName:)``): `Authorization`, `Proxy-Authorization`, `Cookie`,
    /// `X-API-Key` and every name secret by its ending or last word (`X-Auth-Token`,
    /// `X-Config-Key`), whoever set it: the caller, or the configuration's
    /// `httpAdditionalHeaders`, which the pipeline puts on the caller's request. (An
    /// interceptor's headers are not on the request a redirect starts from: it adds them again
    /// if it wants them for the new URL, as `HeaderInterceptor` does not for a secret.)
    ///
    /// One list decides what is a credential for the whole library: the names a redaction hides
    /// and a shared transfer keys apart are the names a cross-origin redirect drops, so a header
    /// the library would not print is never handed to another origin. The inner session's cookie
    /// storage still adds the cookies that belong to the new origin itself.
    static func dropCredentials(from request: inout URLRequest) {
        guard let headers = request.allHTTPHeaderFields else { return }
        for name in headers.keys where Redaction.standard.isSecret(headerName: name) {
            request.setValue(nil, forHTTPHeaderField: name)
        }
    }

    /// The error a plain session fails a followed redirect to `target` with when it leaves
    /// HTTP, or `nil` for http and https. corelibs would fetch an `ftp://` or `gopher://` URL
    /// through libcurl and hand an http caller a non-HTTP response; a plain session (after
    /// asking the delegate) refuses: `URLError.unsupportedURL` naming the URL that redirected
    /// for a scheme libcurl knows but URLSession does not redirect to (``libcurlSchemes``), and
    /// `URLError.badURL` naming the target for any other. (A `file:` or `data:` Location never
    /// gets here: corelibs resolves it as a path on the redirecting server.)
    static func refusal(of target: URL?, redirectedFrom response: HTTPURLResponse) -> URLError? {
        let scheme = target?.scheme?.lowercased()
        guard scheme != "http", scheme != "https" else { return nil }
        let known = scheme.map(libcurlSchemes.contains) ?? false
        return URLError.foundation(
            known ? .unsupportedURL : .badURL, url: known ? response.url : target, description: known ? "unsupported URL" : "bad URL")
    }

    /// The schemes besides http and https that libcurl speaks (`curl --version`'s protocols on
    /// Debian 12's libcurl 7.88), which a plain corelibs session refuses to redirect to as
    /// `unsupportedURL` naming the redirecting URL (`RedirectParityTests` compares them).
    static let libcurlSchemes: Set<String> = [
        "dict", "ftp", "ftps", "gopher", "gophers", "imap", "imaps", "ldap", "ldaps", "mqtt", "pop3", "pop3s", "rtmp", "rtsp",
        "scp", "sftp", "smb", "smbs", "smtp", "smtps", "telnet", "tftp",
    ]

    /// Same scheme, host and port (default ports filled in), as ``URLOrigin`` compares
    /// them (and the OAuth2 kit the origins a credential may go to); a URL without a host matches nothing.
    static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        guard let a = URLOrigin(a), let b = URLOrigin(b) else { return false }
        return a == b
    }
}
