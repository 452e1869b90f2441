import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension URLRequest {
    /// Clears `httpBody` and `httpBodyStream`, writing each only when it is set: on corelibs the
    /// first write to a request shared with another holder (the bridge's `URLProtocol`, the task's
    /// record) copies the whole request, and most requests have neither field set (the copy's
    /// cost: the Performance article, "Single operations on Linux").
    mutating func removeBody() {
        if httpBody != nil { httpBody = nil }
        if httpBodyStream != nil { httpBodyStream = nil }
    }
}
