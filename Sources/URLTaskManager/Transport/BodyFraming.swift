import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Makes a request's `Content-Length` agree with the body that is actually sent.
///
/// corelibs sends a caller's `Content-Length` as it is with an `httpBody` of another length:
/// the server reads that many bytes and takes the rest as the next request on the connection
/// (a body whose tail spells `GET /smuggled` makes the server answer a request nobody made,
/// and the next task on that connection receives that answer). The manager also holds bodies
/// the caller did not frame itself: a stream buffered for replay, a body an interceptor
/// replaced. So the body the pipeline sends decides the framing, whatever the header says.
enum BodyFraming {
    private static let contentLength = HeaderName("Content-Length")
    /// ``URLTaskPolicy/headerName``, kept here for the one read of the fields at send.
    private static let policy = HeaderName(URLTaskPolicy.headerName)

    /// `request` as it goes on the wire: without the policy's header (``URLTaskPolicy``),
    /// whatever put it there (a redirect delegate, an interceptor), for it is the manager's own
    /// and never leaves; and with a `Content-Length` that frames exactly `body`'s bytes: the
    /// length of a `.data` body or of a `.file`; none for a stream (sent chunked, where a
    /// `Content-Length` beside `Transfer-Encoding` is what request smuggling is made of) and none
    /// but `0` without a body. A request without the header is left to the session. Both are
    /// found in one read of the fields.
    static func framed(_ request: URLRequest, body: URLTaskBody) -> URLRequest {
        let (declared, policy) = request.headerValues(contentLength, policy)
        guard policy != nil else { return framed(request, body: body, declared: declared) }
        var bare = request
        bare.setValue(nil, forHTTPHeaderField: URLTaskPolicy.headerName)
        return framed(bare, body: body, declared: declared)
    }

    private static func framed(_ request: URLRequest, body: URLTaskBody, declared: String?) -> URLRequest {
        guard let declared else { return request }
        let actual: Int?
        switch body {
        case .none: actual = declared == "0" ? 0 : nil
        case .data(let data): actual = data.count
        case .stream: actual = nil
        case .file(let url): actual = (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.intValue
        }
        guard declared != actual.map(String.init) else { return request }
        var framed = request
        framed.setValue(actual.map(String.init), forHTTPHeaderField: "Content-Length")
        return framed
    }
}
