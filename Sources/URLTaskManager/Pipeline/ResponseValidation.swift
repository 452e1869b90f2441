import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Which answers a caller accepts: status codes and content types.
///
/// URLSession hands a 500 or an HTML error page to the caller as a success; most apps then
/// check `statusCode` at every call site, or decode an error page as JSON and fail with a
/// confusing decoding error. Give the manager the answers you accept
/// (``URLTaskManager/Options/responseValidation``, or for one request through a
/// ``URLTaskPolicy``) and any other answer ends in a ``URLTaskError`` with code
/// ``URLTaskError/Code-swift.struct/responseRejected``, carrying the response (status and
/// headers) and a bounded prefix of its body with known secrets masked.
///
/// Validation judges the final answer only: a 401 that a refresh reactor takes is refreshed
/// and sent again first, a redirect is followed first; what the caller would have received is
/// what is judged. A local answer (``InterceptCommand/respond(_:body:)``) is not judged.
public struct ResponseValidation: Sendable, Equatable, Codable {
    /// Status codes accepted; anything else is rejected.
    public var acceptableStatusCodes: Set<Int>
    /// Media types accepted (`application/json`, `image/*`, `*/*`), compared without
    /// parameters and case-insensitively; `nil` accepts any. A response without
    /// `Content-Type` is accepted only if it announces an empty body.
    public var acceptableContentTypes: [String]?

    /// Accepts `acceptableStatusCodes` (2xx by default) and `acceptableContentTypes` (any by default).
    public init(acceptableStatusCodes: some Sequence<Int> = 200..<300, acceptableContentTypes: [String]? = nil) {
        self.acceptableStatusCodes = Set(acceptableStatusCodes)
        self.acceptableContentTypes = acceptableContentTypes
    }

    /// Any 2xx status, any content type: the check most apps repeat at every call site.
    public static var successfulStatusCodes: ResponseValidation { ResponseValidation() }

    /// Why `response` is not accepted, or `nil` when it is.
    public func rejection(of response: HTTPURLResponse) -> String? {
        guard acceptableStatusCodes.contains(response.statusCode) else { return "status \(response.statusCode) is not acceptable" }
        guard let acceptable = acceptableContentTypes else { return nil }
        guard let header = response.value(forHTTPHeaderField: "Content-Type") else {
            return response.expectedContentLength == 0 ? nil : "the response has no Content-Type"
        }
        let type = header.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        let accepted = acceptable.contains { pattern in
            let pattern = pattern.lowercased()
            if pattern == "*/*" || pattern == type { return true }
            guard pattern.hasSuffix("/*") else { return false }
            return type.hasPrefix(pattern.dropLast())
        }
        return accepted ? nil : "content type \(type) is not acceptable"
    }

    /// The most of a rejected body an error keeps.
    static let bodyPrefixLimit = 512

    /// `body` cut to ``bodyPrefixLimit`` with the values of secret fields masked by
    /// ``Redaction/standard`` (JSON members, to their real end, and `name=value` pairs with
    /// secret-like names): a server that echoes a token in its error page must not put it in
    /// an app's logs.
    static func safePrefix(of body: Data) -> Data {
        let prefix = body.prefix(bodyPrefixLimit)
        guard let text = String(data: prefix, encoding: .utf8) else { return Data() }
        return Data(Redaction.standard.text(text).utf8)
    }
}
