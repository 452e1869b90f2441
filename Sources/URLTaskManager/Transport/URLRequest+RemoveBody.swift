import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension URLRequest {
    /// Clears `httpBody` and `httpBodyStream`, writing each only when it is set: on corelibs the
    /// first write to a request shared with another holder (the bridge's `URLProtocol`, the task's
    /// record) copies the whole request, about 7,000 instructions, and most requests have
    /// neither field set.
    mutating func removeBody() {
        if httpBody != nil { httpBody = nil }
        if httpBodyStream != nil { httpBodyStream = nil }
    }
}
