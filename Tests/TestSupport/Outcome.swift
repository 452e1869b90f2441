import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager

/// Which client a parity scenario runs through.
package enum Side: String, CaseIterable, Sendable {
    /// `URLSession(configuration:)`.
    case plain
    /// `URLTaskManager(configuration:).session`: the session door.
    case manager
    /// The same manager's own methods (`manager.data(for:)` and its family): the methods door.
    /// ``ParityHarness/both(configuration:methods:function:file:line:_:)`` runs a scenario here too when
    /// it used only the async calls these methods mirror.
    case methods

    /// Paths are prefixed with the side (`/side-plain/x`, `/side-manager/x`, `/side-methods/x`)
    /// so that server state (held gates, cookies, request records) is never shared by two runs.
    /// Outcomes replace the prefix with ``placeholder`` so the sides compare equal.
    package var pathPrefix: String { "/side-" + rawValue }

    package static let placeholder = "/{side}"

    /// `text` with this side's path prefix replaced by ``placeholder``.
    package func normalise(_ text: String) -> String {
        text.replacingOccurrences(of: pathPrefix, with: Side.placeholder)
    }
}

/// Everything a caller can observe about one finished task, normalised so that a plain
/// `URLSession` and a manager's session can be compared with `==`.
package struct Outcome: Equatable, Sendable, CustomStringConvertible {
    package var status: Int?
    /// Response headers by lowercased name, without `Date`, with side prefixes normalised.
    package var headers: [String: String] = [:]
    package var bodyLength: Int?
    package var bodySHA256: String?
    package var errorDomain: String?
    package var errorCode: Int?
    /// `response.url`, normalised.
    package var url: String?
    /// The error's `NSURLErrorFailingURLErrorKey`, normalised.
    package var failingURL: String?

    package init(side: Side, data: Data?, response: URLResponse?, error: (any Error)?) {
        if let http = response as? HTTPURLResponse {
            status = http.statusCode
            for (key, value) in http.allHeaderFields {
                let name = String(describing: key).lowercased()
                guard name != "date" else { continue }
                headers[name] = side.normalise(String(describing: value))
            }
        }
        url = response?.url.map { side.normalise($0.absoluteString) }
        if let data {
            bodyLength = data.count
            bodySHA256 = SHA256.hex(data)
        }
        if let error {
            let nsError = error as NSError
            errorDomain = nsError.domain
            errorCode = nsError.code
            failingURL = (nsError.userInfo[NSURLErrorFailingURLErrorKey] as? URL).map { side.normalise($0.absoluteString) }
        }
    }

    /// An outcome whose body was measured elsewhere (streamed to a delegate, hashed there).
    package init(side: Side, response: URLResponse?, bodyLength: Int?, bodySHA256: String?, error: (any Error)?) {
        self.init(side: side, data: nil, response: response, error: error)
        self.bodyLength = bodyLength
        self.bodySHA256 = bodySHA256
    }

    package func header(_ name: String) -> String? { headers[name.lowercased()] }

    package var isCancelled: Bool { errorDomain == NSURLErrorDomain && errorCode == NSURLErrorCancelled }

    package var description: String {
        var parts: [String] = []
        if let status { parts.append("\(status)") }
        if let errorDomain, let errorCode { parts.append("error \(errorDomain) \(errorCode)") }
        if let bodyLength { parts.append("\(bodyLength) B") }
        if let bodySHA256 { parts.append("sha \(bodySHA256.prefix(12))") }
        if let url { parts.append("url \(url)") }
        if let failingURL { parts.append("failing \(failingURL)") }
        let shown = headers.keys.sorted().map { "\($0)=\(headers[$0]!)" }
        if !shown.isEmpty { parts.append("headers [\(shown.joined(separator: "; "))]") }
        return parts.joined(separator: ", ")
    }

    /// A one-line summary for the parity table (no headers).
    package var summary: String {
        var parts: [String] = []
        if let status { parts.append("\(status)") }
        if let errorCode { parts.append("error \(errorCode)") }
        if let bodyLength { parts.append("\(bodyLength) B") }
        if let bodySHA256, (bodyLength ?? 0) > 0 { parts.append("sha \(bodySHA256.prefix(8))") }
        return parts.joined(separator: ", ")
    }
}
