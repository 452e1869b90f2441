import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What every text the library makes hides: the one redaction behind ``CURLDescription``, the
/// events' URLs, the errors, their body prefixes, and what `description`, `debugDescription`,
/// `dump` and the debugger show of the library's types.
///
/// A secret reaches a log in many shapes, and a redaction that knows only some of them is a
/// leak waiting for the next one; so there is one, and every surface calls it. It replaces with
/// `REDACTED` (``replacement``):
///
/// - **In a URL**: the user and the password (`https://TOKEN@host`, as git hosts and Stripe
///   use it, is a token), the values of query items and path parameters (`;jsessionid=...`)
///   with secret-like names (``isSecret(name:)``); the fragment is dropped (it is never sent,
///   and an implicit grant puts its token there).
/// - **In headers**: the values of ``defaultHeaders`` (`Authorization`, `Proxy-Authorization`,
///   `Cookie`, `Set-Cookie`, `X-API-Key`) and of any header whose name, without an `X-`
///   prefix, is secret-like (`X-Auth-Token`, `Api-Key`); the scheme of an `Authorization`-like
///   value (`Bearer`, `Basic`) is kept.
/// - **In a body or other text** (``text(_:)``), whatever its declared `Content-Type` (URLSession
///   sends a form without one): `name=value` pairs with a secret-like name, and the values of
///   JSON members with a secret-like name, read to their real end (a token may hold an escaped
///   `\"`), and secret header lines (`Authorization: Bearer ...`) quoted at a line's start.
///
/// A name is secret-like when, compared without case and without `_`, `-`, `.` or spaces (so
/// `access_token`, `accessToken` and `Access-Token` are one name), it is one of
/// ``defaultNames``, ends with one of ``defaultNameSuffixes`` (`github_token`,
/// `X-Amz-Signature`, `db_password`), or is one you add. A bracketed form name
/// (`user[password]`) is judged by its last bracket.
///
/// Events, errors and the descriptions of the library's types use ``standard``; a
/// ``CURLDescription`` uses its options' names (`CURLDescription.Options(redactingQueryItems:)`),
/// and you can run the same redaction over your own log lines:
///
/// ```swift
/// let redaction = Redaction(addingNames: ["x-tenant-secret-id"])
/// log(redaction.url(request.url))  // https://REDACTED@api.example.com/items?api_key=REDACTED&page=2
/// ```
public struct Redaction: Sendable, Hashable {
    /// What replaces a secret.
    public static let replacement = "REDACTED"

    /// The names whose values are secrets wherever they appear, as written in the specifications
    /// and APIs they come from (compared in normalized form, see the type): OAuth 2.0 and OpenID
    /// Connect (RFC 6749, 7521, 7636, 8628, 8693), API keys, passwords, sessions, signatures.
    public static let defaultNames: Set<String> = [
        "access_token", "refresh_token", "id_token", "token", "subject_token", "actor_token", "device_code",
        "client_secret", "secret", "client_assertion", "assertion", "code", "code_verifier",
        "password", "passwd", "pwd", "passphrase", "otp",
        "api_key", "apikey", "api-key", "key", "access_key", "secret_key", "private_key",
        "session", "session_id", "sessionid", "jsessionid", "phpsessid", "sid",
        "auth", "authorization", "signature", "sig", "credential", "credentials",
    ]

    /// Name endings that make a name secret-like whatever comes before (normalized: lower case,
    /// no `_`, `-`, `.` or spaces): `csrf_token`, `stripe_secret`, `x_api_key`,
    /// `X-Amz-Signature`, `X-Amz-Security-Token`.
    public static let defaultNameSuffixes: [String] = [
        "token", "secret", "password", "passwd", "apikey", "accesskey", "secretkey", "privatekey", "signature", "sessionid",
        "credential", "credentials",
    ]

    /// The headers whose values are always secret, besides those with a secret-like name:
    /// `Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie` and `X-API-Key`.
    public static let defaultHeaders: Set<String> = ["Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-API-Key"]

    /// The defaults: what events, errors and descriptions use.
    public static let standard = Redaction()

    /// The secret names (query items, path parameters, form fields, JSON members), normalized.
    private let names: Set<String>
    /// The secret header names, lower-cased.
    private let headers: Set<String>

    /// The defaults, plus the names of your own secrets: `names` for query items, path
    /// parameters, form fields and JSON members (`"tenant_key"`), `headers` for header fields.
    public init(addingNames names: some Sequence<String> = [String](), addingHeaders headers: some Sequence<String> = [String]()) {
        self.init(names: Self.defaultNames.union(names), headers: Self.defaultHeaders.union(headers))
    }

    /// Exactly these names and headers, the defaults not added (the name endings in
    /// ``defaultNameSuffixes`` still count): for a redaction narrower than the defaults, and for
    /// ``CURLDescription/Options``, whose sets already hold the defaults and may have been
    /// changed.
    public init(names: some Sequence<String>, headers: some Sequence<String>) {
        self.names = Set(names.map(Self.normalized))
        self.headers = Set(headers.map { $0.lowercased() })
    }

    // MARK: Names

    /// Whether a query item, path parameter, form field or JSON member called `name` holds a
    /// secret (see the type for the rule). `name` may be percent-encoded, as in a URL or a form.
    public func isSecret(name: some StringProtocol) -> Bool {
        var key = String(name)
        if key.contains("%") || key.contains("+") {
            key = key.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? key
        }
        if key.hasSuffix("]"), let open = key.lastIndex(of: "[") {
            key = String(key[key.index(after: open)..<key.index(before: key.endIndex)])
        }
        let normalized = Self.normalized(key)
        guard !normalized.isEmpty else { return false }
        return names.contains(normalized) || Self.defaultNameSuffixes.contains { normalized.hasSuffix($0) }
    }

    /// Whether a header called `name` carries a secret: one of the headers, or a secret-like
    /// name once an `X-` prefix is dropped.
    public func isSecret(headerName name: some StringProtocol) -> Bool {
        let lower = name.lowercased()
        if headers.contains(lower) { return true }
        return isSecret(name: lower.hasPrefix("x-") ? lower.dropFirst(2) : Substring(lower))
    }

    /// `name` lower-cased without `_`, `-`, `.` or spaces: one spelling for snake, camel and
    /// kebab case.
    static func normalized(_ name: some StringProtocol) -> String {
        String(name.lowercased().unicodeScalars.filter { $0 != "_" && $0 != "-" && $0 != "." && $0 != " " })
    }

    // MARK: Headers

    /// `value` as a header called `name` may show it: unchanged, or `REDACTED` with an
    /// `Authorization`-like scheme kept (`Bearer REDACTED`).
    public func headerValue(_ value: String, name: some StringProtocol) -> String {
        guard isSecret(headerName: name) else { return value }
        let words = value.split(separator: " ", maxSplits: 1)
        if words.count == 2, words[0].allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" }) {
            return "\(words[0]) \(Self.replacement)"
        }
        return Self.replacement
    }

    // MARK: URLs

    /// The URL as text with its user, password, secret query items and path parameters
    /// redacted and no fragment; everything else as it was. A URL that cannot be parsed into
    /// components is shown as `REDACTED` (no part of it can be vouched for).
    public func url(_ url: URL?) -> String {
        guard let url else { return "" }
        guard var parts = URLComponents(url: url.absoluteURL, resolvingAgainstBaseURL: false) else { return Self.replacement }
        parts.fragment = nil
        if parts.percentEncodedUser != nil { parts.percentEncodedUser = Self.replacement }
        if parts.percentEncodedPassword != nil { parts.percentEncodedPassword = Self.replacement }
        redactPathParameters(&parts)
        if let query = parts.percentEncodedQuery {
            parts.percentEncodedQuery = redactedPairs(query, separators: [UInt8(ascii: "&"), UInt8(ascii: ";")], skippingFirst: false)
        }
        return parts.string ?? Self.replacement
    }

    /// Where a request went, for events and errors: the URL without query, fragment or user
    /// info (all of it dropped, not only its secrets: events carry no value a caller chose), and
    /// with secret path parameters redacted.
    func location(of url: URL?) -> URL? {
        guard let url else { return nil }
        // Most URLs carry none of these: they are not parsed into components (about 13,000
        // instructions on corelibs, for every task an events reader sees).
        if url.baseURL == nil, url.query == nil, url.fragment == nil, url.user == nil, url.password == nil,
            !url.relativeString.utf8.contains(UInt8(ascii: ";"))
        {
            return url
        }
        guard var parts = URLComponents(url: url.absoluteURL, resolvingAgainstBaseURL: false) else { return nil }
        parts.query = nil
        parts.fragment = nil
        parts.user = nil
        parts.password = nil
        redactPathParameters(&parts)
        return parts.url
    }

    /// `;name=value` parameters of each path segment with a secret-like name, redacted.
    private func redactPathParameters(_ parts: inout URLComponents) {
        let path = parts.percentEncodedPath
        guard path.utf8.contains(UInt8(ascii: ";")) else { return }
        let segments = path.split(separator: "/", omittingEmptySubsequences: false).map {
            redactedPairs($0, separators: [UInt8(ascii: ";")], skippingFirst: true)
        }
        parts.percentEncodedPath = segments.joined(separator: "/")
    }

    /// `text` split at `separators` into `name=value` pairs, the values of secret-like names
    /// redacted (the first piece left alone when `skippingFirst`: a path segment's name).
    private func redactedPairs(_ text: some StringProtocol, separators: [UInt8], skippingFirst: Bool) -> String {
        let bytes = Array(text.utf8)
        let pieces = bytes.split(omittingEmptySubsequences: false) { separators.contains($0) }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        for (index, piece) in pieces.enumerated() {
            if index > 0 { out.append(bytes[pieces[index - 1].endIndex]) }  // the separator that ended the previous piece
            guard !(skippingFirst && index == 0), let equals = piece.firstIndex(of: UInt8(ascii: "=")),
                isSecret(name: String(decoding: piece[piece.startIndex..<equals], as: UTF8.self))
            else {
                out.append(contentsOf: piece)
                continue
            }
            out.append(contentsOf: piece[piece.startIndex...equals])
            out.append(contentsOf: Self.replacement.utf8)
        }
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: Text

    /// `text` with the values of JSON members with secret-like names (to their real end,
    /// escaped quotes included; a number or literal becomes `"REDACTED"`), of `name=value`
    /// pairs with secret-like names (a form, whatever its declared type; a query or a cookie
    /// quoted in an error page) and of secret header lines (`Authorization: Bearer ...` at the
    /// start of a line) replaced. For a body, an error page, a log line.
    public func text(_ text: String) -> String {
        let bytes = Array(text.utf8)
        guard bytes.contains(UInt8(ascii: "=")) || bytes.contains(UInt8(ascii: ":")) else { return text }
        return String(decoding: redactedPairs(inText: redactedJSONMembers(bytes)), as: UTF8.self)
    }

    private static let quote = UInt8(ascii: "\"")

    /// The index just past the string literal that starts at `start` (a `"`), escapes skipped;
    /// the end of `bytes` when it is not closed (a prefix cut short).
    private static func endOfString(_ bytes: [UInt8], from start: Int) -> (end: Int, closed: Bool) {
        var index = start + 1
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\\"): index += 2
            case quote: return (index + 1, true)
            default: index += 1
            }
        }
        return (bytes.count, false)
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r")
    }

    /// Every `"name": value` member with a secret-like name, its value redacted.
    private func redactedJSONMembers(_ bytes: [UInt8]) -> [UInt8] {
        guard bytes.contains(Self.quote) else { return bytes }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            guard bytes[index] == Self.quote else {
                out.append(bytes[index])
                index += 1
                continue
            }
            let (end, closed) = Self.endOfString(bytes, from: index)
            out.append(contentsOf: bytes[index..<end])
            let name = closed ? String(decoding: bytes[(index + 1)..<(end - 1)], as: UTF8.self) : ""
            index = end
            var next = end
            while next < bytes.count, Self.isSpace(bytes[next]) { next += 1 }
            guard closed, next < bytes.count, bytes[next] == UInt8(ascii: ":"),
                isSecret(name: name.replacingOccurrences(of: "\\", with: ""))
            else { continue }
            next += 1
            while next < bytes.count, Self.isSpace(bytes[next]) { next += 1 }
            out.append(contentsOf: bytes[index..<next])
            index = next
            guard next < bytes.count else { break }
            switch bytes[next] {
            case Self.quote:
                let (valueEnd, valueClosed) = Self.endOfString(bytes, from: next)
                out.append(contentsOf: "\"\(Self.replacement)\(valueClosed ? "\"" : "")".utf8)
                index = valueEnd
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                continue  // a structure: its own members are judged by their names
            default:
                var valueEnd = next
                let ends: [UInt8] = [UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]")]
                while valueEnd < bytes.count, !ends.contains(bytes[valueEnd]), !Self.isSpace(bytes[valueEnd]) { valueEnd += 1 }
                out.append(contentsOf: "\"\(Self.replacement)\"".utf8)
                index = valueEnd
            }
        }
        return out
    }

    /// A byte a form or query name may hold (percent-encoded or bracketed names included).
    private static func isNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        case UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "%"), UInt8(ascii: "["), UInt8(ascii: "]"):
            true
        default: false
        }
    }

    /// A byte after which a `name=value` pair may start in free text.
    private static func isPairStart(_ byte: UInt8) -> Bool {
        isSpace(byte) || "&?;\"'(<>,{/".utf8.contains(byte)
    }

    /// A byte that ends a value in free text. A `;` or `,` does not: a token may hold them, and
    /// hiding a little more is the safe side.
    private static func isValueEnd(_ byte: UInt8) -> Bool {
        isSpace(byte) || "&\"'<>".utf8.contains(byte)
    }

    /// Every `name=value` pair (at the start, or after a separator) with a secret-like name,
    /// its value redacted.
    private func redactedPairs(inText bytes: [UInt8]) -> [UInt8] {
        guard bytes.contains(UInt8(ascii: "=")) || bytes.contains(UInt8(ascii: ":")) else { return bytes }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            guard index == 0 || Self.isPairStart(bytes[index - 1]), Self.isNameByte(bytes[index]) else {
                out.append(bytes[index])
                index += 1
                continue
            }
            let nameStart = index
            var nameEnd = index
            while nameEnd < bytes.count, Self.isNameByte(bytes[nameEnd]) { nameEnd += 1 }
            out.append(contentsOf: bytes[nameStart..<nameEnd])
            index = nameEnd
            let name = String(decoding: bytes[nameStart..<nameEnd], as: UTF8.self)
            // `Authorization: Bearer ...` at the start of a line: a header quoted in an error
            // page or a log; its value runs to the end of the line.
            if nameEnd < bytes.count, bytes[nameEnd] == UInt8(ascii: ":"), nameStart == 0 || bytes[nameStart - 1] == UInt8(ascii: "\n"),
                isSecret(headerName: name)
            {
                var lineEnd = nameEnd + 1
                while lineEnd < bytes.count, bytes[lineEnd] != UInt8(ascii: "\n"), bytes[lineEnd] != UInt8(ascii: "\r") { lineEnd += 1 }
                let value = String(decoding: bytes[(nameEnd + 1)..<lineEnd], as: UTF8.self)
                let leading = value.prefix { $0 == " " || $0 == "\t" }
                out.append(contentsOf: ":\(leading)\(headerValue(String(value.dropFirst(leading.count)), name: name))".utf8)
                index = lineEnd
                continue
            }
            guard nameEnd < bytes.count, bytes[nameEnd] == UInt8(ascii: "="), isSecret(name: name) else { continue }
            // After a `;`, a path parameter: it ends where the URL's grammar ends it.
            let inPath = nameStart > 0 && bytes[nameStart - 1] == UInt8(ascii: ";")
            var valueEnd = nameEnd + 1
            while valueEnd < bytes.count, !Self.isValueEnd(bytes[valueEnd]), !(inPath && "?/;#".utf8.contains(bytes[valueEnd])) {
                valueEnd += 1
            }
            out.append(UInt8(ascii: "="))
            if valueEnd > nameEnd + 1 { out.append(contentsOf: Self.replacement.utf8) }
            index = valueEnd
        }
        return out
    }

    // MARK: Requests and responses

    /// One line for a request: method, redacted URL and headers (sorted, secret values
    /// redacted); for the descriptions and mirrors of the library's types.
    func summary(of request: URLRequest) -> String {
        let headers = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key.lowercased() < $1.key.lowercased() }
            .map { "\($0.key): \(headerValue($0.value, name: $0.key))" }
        return "\(request.httpMethod ?? "GET") \(url(request.url))" + (headers.isEmpty ? "" : " [\(headers.joined(separator: ", "))]")
    }

    /// One line for a response: status, redacted URL and headers.
    func summary(of response: HTTPURLResponse) -> String {
        let headers = response.allHeaderFields.compactMap { key, value -> (String, String)? in
            guard let key = key as? String else { return nil }
            return (key, headerValue("\(value)", name: key))
        }.sorted { $0.0.lowercased() < $1.0.lowercased() }.map { "\($0.0): \($0.1)" }
        return "\(response.statusCode) \(url(response.url))" + (headers.isEmpty ? "" : " [\(headers.joined(separator: ", "))]")
    }
}
