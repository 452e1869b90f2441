import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The body of a task's request, as the manager holds it: interceptors read it and may replace
/// it, and what they leave is what is sent.
///
/// An interceptor that signs a body (an HMAC, a SigV4-style signature) reads ``URLTask/body``;
/// one that compresses it replaces it with the compressed bytes and sets `Content-Encoding`.
/// Each attempt's interceptors start from the caller's body (as they start from the caller's
/// request), so a resend signs or compresses the original again, never its own output; a
/// reactor that requeues without intercepting again sends the body the interceptors left.
///
/// The manager finds the body wherever the caller put it: `httpBody`, `httpBodyStream`, an
/// upload task's data or file. A stream is read once: where a reactor may send the task again,
/// the manager first copies it into memory (up to
/// ``URLTaskManager/Options/maximumReplayableBodySize``); an interceptor that reads a stream
/// must replace it with what it read.
public enum URLTaskBody: @unchecked Sendable {  // an InputStream has one reader at a time: the pipeline hands it on, never shares it.
    /// No body.
    case none
    /// Bytes in memory.
    case data(Data)
    /// The contents of a file, streamed from disk when sent.
    case file(URL)
    /// A stream, read once when the request is sent.
    case stream(InputStream)

    /// The body a request carries itself (`httpBody`, else `httpBodyStream`): for code that
    /// handles a request outside a task the same way (a description, a signature) as the manager
    /// does a task's.
    public init(request: URLRequest) {
        if let data = request.httpBody {
            self = .data(data)
        } else if let stream = request.httpBodyStream {
            self = .stream(stream)
        } else {
            self = .none
        }
    }

    /// Whether there is no body at all.
    var isNone: Bool {
        if case .none = self { return true }
        return false
    }
}
