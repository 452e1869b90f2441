#if canImport(FoundationNetworking)
import Foundation
import FoundationNetworking

extension CorelibsPlatform {
    /// corelibs' `setValue(_:forHTTPHeaderField:)` capitalizes the name through Foundation's
    /// locale-aware `capitalized` on every call (`x-request-id` is stored as `X-Request-Id`).
    static func storedSpelling(ofHeader name: String) -> String {
        name.capitalized
    }

    /// `setValue` capitalizes the name and checks the value character by character on every
    /// call, work an interceptor that sets a header on every request would repeat each time (its
    /// cost: the Performance article, "Single operations on Linux"): here the name was
    /// capitalized once (``HeaderName``), and the value is checked later with every other header
    /// of the task (``HeaderValidation/firstProblem(in:)``).
    static func replaceHeader(_ name: HeaderName, with value: String, in request: inout URLRequest) {
        guard var fields = request.allHTTPHeaderFields, !fields.isEmpty else {
            request.allHTTPHeaderFields = [name.stored: value]
            return
        }
        for existing in fields.keys where existing != name.stored && name.matches(existing) {
            fields[existing] = nil
        }
        fields[name.stored] = value
        request.allHTTPHeaderFields = fields
    }

    /// Each write of a request shared with another holder copies the whole request first: one
    /// write for all of `headers`. A request without headers yet, the common case, gets them
    /// without a search for other spellings.
    static func replaceHeaders(_ headers: [(name: HeaderName, value: String)], in request: inout URLRequest) {
        guard var fields = request.allHTTPHeaderFields, !fields.isEmpty else {
            var fresh = [String: String](minimumCapacity: headers.count)
            for (name, value) in headers { fresh[name.stored] = value }
            request.allHTTPHeaderFields = fresh
            return
        }
        for (name, value) in headers {
            for existing in fields.keys where existing != name.stored && name.matches(existing) {
                fields[existing] = nil
            }
            fields[name.stored] = value
        }
        request.allHTTPHeaderFields = fields
    }

    /// `value(forHTTPHeaderField:)` compares every field name with Foundation's
    /// case-insensitive, locale-aware string comparison (its cost: the Performance article,
    /// "Single operations on Linux"); field names are ASCII tokens, compared here byte by byte.
    static func headerValue(_ name: HeaderName, in request: URLRequest) -> String? {
        guard let fields = request.allHTTPHeaderFields, !fields.isEmpty else { return nil }
        return value(of: name, in: fields)
    }

    /// ``headerValue(_:in:)`` for two names, over one bridged copy of the fields.
    static func headerValues(_ first: HeaderName, _ second: HeaderName, in request: URLRequest) -> (String?, String?) {
        guard let fields = request.allHTTPHeaderFields, !fields.isEmpty else { return (nil, nil) }
        return (value(of: first, in: fields), value(of: second, in: fields))
    }

    /// `name`'s value in `fields` under any spelling: the stored spelling first, then a byte
    /// comparison with every name.
    private static func value(of name: HeaderName, in fields: [String: String]) -> String? {
        if let value = fields[name.stored] { return value }
        for (existing, value) in fields where name.matches(existing) { return value }
        return nil
    }
}
#endif
