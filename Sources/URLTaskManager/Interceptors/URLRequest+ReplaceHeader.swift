import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension URLRequest {
    /// Sets `value` under `name`, replacing the field under any spelling: what
    /// `setValue(_:forHTTPHeaderField:)` does, for the library's interceptors that set a header
    /// on every request, and for yours.
    ///
    /// On corelibs `setValue` capitalizes the name with Foundation's locale-aware `capitalized`
    /// and checks the value character by character on every call, about 12,000 instructions,
    /// more than the rest of a bearer interceptor. Here the name was capitalized once
    /// (``HeaderName``), and the value is not checked: every header of a task is checked byte
    /// by byte before it is sent (``HeaderValidation/firstProblem(in:)``), which fails the task
    /// with ``URLTaskError/Code-swift.struct/invalidHeader`` where corelibs' `setValue` would
    /// have dropped the header without a word.
    public mutating func replaceHeader(_ name: HeaderName, with value: String) {
        #if canImport(FoundationNetworking)
        var fields = allHTTPHeaderFields ?? [:]
        for existing in fields.keys where existing != name.stored && name.matches(existing) {
            fields[existing] = nil
        }
        fields[name.stored] = value
        allHTTPHeaderFields = fields
        #else
        setValue(value, forHTTPHeaderField: name.spelled)
        #endif
    }
}
