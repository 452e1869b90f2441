import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A request body: where it lives when the bridge sees the task, and how the transport sends it.
enum RequestBodySource: @unchecked Sendable {  // an InputStream is read by one owner at a time.
    case none
    case data(Data)
    case file(URL)
    case stream(InputStream)

    /// The body a request carries itself (`httpBody`, else `httpBodyStream`).
    init(request: URLRequest) {
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
