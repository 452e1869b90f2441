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
///   `\"`), and secret header lines (`Authorization: Bearer ...`) quoted at a line's start;
///   JSON escaped inside a JSON string (`{"payload":"{\"access_token\":\"...\"}"}`), read
///   as the JSON it holds; the second element of a `[name, value]` array whose first is a
///   secret-like name (`[["password","..."]]`, `[["Authorization","Bearer ..."]]`); in a
///   markup tag, the `value` and `content` of an element whose `name` or `id` is secret-like
///   (`<input type="hidden" name="csrf_token" value="...">`, either attribute order, and
///   `<meta name="csrf-token" content="...">`), the `value` of a `type="password"` input, and
///   any attribute with a secret-like name (`data-token="..."`); and the text of an element
///   with a secret-like name (`<password>...</password>`, `<wsse:Password>`, CDATA included;
///   an HTML `<code>` loses its text too, `code` being OAuth's secret) or of a `<textarea>`
///   whose `name` is secret-like.
///   Each shape is read in one pass, without regular expressions: time linear in the text.
///
/// A name is secret-like when, compared without case and without `_`, `-`, `.` or spaces (so
/// `access_token`, `accessToken` and `Access-Token` are one name), it is one of
/// ``defaultNames``, ends with one of ``defaultNameSuffixes`` (`github_token`,
/// `X-Amz-Signature`, `db_password`), or is one you add; or when its **last word** is one of
/// ``defaultLastWords`` (`key`, `secret`, `token`, `password`, `auth`, `credential`,
/// `session`, `signature`, `cookie` and their kin), words being split at `_`, `-`, `.`, spaces
/// and camelCase humps (`X-Auth-Key`, `Ocp-Apim-Subscription-Key`, `x-functions-key`,
/// `stripeSecretKey`). The last word decides because it names what the value is: a
/// `token_type`, a `key_id`, a `session_timeout`, a `signature_method` or a `password_policy`
/// is not a secret, and a word merely containing one (`Keep-Alive`, `monkey`, `author`,
/// `WWW-Authenticate`) is not that word. A key that is an identifier by its standard is not a
/// secret either: `Idempotency-Key` (a request id), `Sec-WebSocket-Key` (a public nonce,
/// RFC 6455) and a public key. Other keys named by what they unlock (`Content-Key`,
/// `X-Master-Key`) are redacted: a key is assumed secret unless known not to be, the safe
/// side. A bracketed form name (`user[password]`) is judged by its last bracket.
///
/// Events, errors and the descriptions of the library's types use ``standard``; a
/// ``CURLDescription`` uses its options' names (`CURLDescription.Options(redactingQueryItems:)`,
/// or ``CURLDescription/Options/revealingSecrets``, whose ``init(revealingAllBut:headers:)``
/// applies no rule, for a command that replays); a cross-origin redirect drops every header
/// ``standard`` calls a secret, so a header the library would not print never reaches another
/// origin either. You can run the same redaction over your own log lines:
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
        "auth", "authorization", "signature", "sig", "credential", "credentials", "csrf", "xsrf",
    ]

    /// Name endings that make a name secret-like whatever comes before (normalized: lower case,
    /// no `_`, `-`, `.` or spaces): `csrf_token`, `stripe_secret`, `x_api_key`,
    /// `X-Amz-Signature`, `X-Amz-Security-Token`.
    public static let defaultNameSuffixes: [String] = [
        "token", "secret", "password", "passwd", "apikey", "accesskey", "secretkey", "privatekey", "signature", "sessionid",
        "credential", "credentials", "authkey", "subscriptionkey", "functionkey", "functionskey",
    ]

    /// Last words that make a name secret-like (`X-Auth-Key`, `Ocp-Apim-Subscription-Key`,
    /// `x-functions-key`, `X-Upstream-Authorization`, `X-Forwarded-Cookie`): the name's last
    /// word, split at `_`, `-`, `.`, spaces and camelCase humps and lower-cased, is one of these
    /// (see the type for why the last word, and for the keys that are not secrets).
    public static let defaultLastWords: Set<String> = [
        "key", "keys", "secret", "secrets", "token", "tokens", "password", "passwords", "passwd", "passphrase",
        "auth", "authorization", "credential", "credentials", "session", "sessions", "signature", "signatures",
        "cookie", "cookies",
    ]

    /// Names (normalized) ending in `key` that name an identifier by their standard, not a
    /// secret: excluded from the last-word rule only (a name in ``defaultNames`` or added still
    /// counts).
    private static let identifierKeys = ["idempotencykey", "secwebsocketkey", "publickey"]

    /// The headers whose values are always secret, besides those with a secret-like name:
    /// `Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie` and `X-API-Key`.
    public static let defaultHeaders: Set<String> = ["Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-API-Key"]

    /// The defaults: what events, errors and descriptions use.
    public static let standard = Redaction()

    /// The secret names (query items, path parameters, form fields, JSON members), normalized.
    private let names: Set<String>
    /// The secret header names, lower-cased.
    private let headers: Set<String>
    /// Whether the rules beyond the listed names apply: the endings, the last words, a URL's
    /// user and password, a `type="password"` input. `false` only for
    /// ``init(revealingAllBut:headers:)``.
    private let followsNameRules: Bool

    /// The defaults, plus the names of your own secrets: `names` for query items, path
    /// parameters, form fields and JSON members (`"tenant_key"`), `headers` for header fields.
    public init(addingNames names: some Sequence<String> = [String](), addingHeaders headers: some Sequence<String> = [String]()) {
        self.init(names: Self.defaultNames.union(names), headers: Self.defaultHeaders.union(headers))
    }

    /// Exactly these names and headers, the defaults not added (the name endings in
    /// ``defaultNameSuffixes`` and the last words in ``defaultLastWords`` still count): for a
    /// redaction narrower than the defaults, and for ``CURLDescription/Options``, whose sets
    /// already hold the defaults and may have been changed.
    public init(names: some Sequence<String>, headers: some Sequence<String>) {
        self.init(names: names, headers: headers, followsNameRules: true)
    }

    /// Every secret shown but the values of these names and headers: no name rule applies (no
    /// ending, no last word, no `type="password"` input), a URL's user and password are shown.
    ///
    /// For text meant to be replayed rather than read, such as the `curl` command of
    /// ``CURLDescription/Options/revealingSecrets``: a command that sends `Bearer REDACTED`
    /// replays nothing. Empty sets show everything; a name you list is still hidden, compared as
    /// the other initializers compare it (query items, form fields and JSON members normalized,
    /// headers without case, a header also by its name without an `X-` prefix). What it makes
    /// holds the secrets themselves: never use it for a log that leaves the machine.
    public init(revealingAllBut names: some Sequence<String>, headers: some Sequence<String>) {
        self.init(names: names, headers: headers, followsNameRules: false)
    }

    private init(names: some Sequence<String>, headers: some Sequence<String>, followsNameRules: Bool) {
        self.names = Set(names.map(Self.normalized))
        self.headers = Set(headers.map { $0.lowercased() })
        self.followsNameRules = followsNameRules
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
        if names.contains(normalized) { return true }
        guard followsNameRules else { return false }
        if Self.defaultNameSuffixes.contains(where: { normalized.hasSuffix($0) }) { return true }
        return Self.defaultLastWords.contains(Self.lastWord(of: key)) && !Self.identifierKeys.contains { normalized.hasSuffix($0) }
    }

    /// The last word of `name`, lower-cased: words end at `_`, `-`, `.` and spaces, and where a
    /// lower-case letter or a digit meets an upper-case one (`subscriptionKey`) or an upper-case
    /// run meets a capitalized word (`APIKey`: `API`, `Key`).
    static func lastWord(of name: String) -> String {
        let scalars = Array(name.unicodeScalars)
        let isSeparator: (Unicode.Scalar) -> Bool = { $0 == "_" || $0 == "-" || $0 == "." || $0 == " " }
        var end = scalars.count
        while end > 0, isSeparator(scalars[end - 1]) { end -= 1 }
        var start = end
        while start > 0, !isSeparator(scalars[start - 1]) {
            let index = start - 1
            start = index
            guard index > 0, scalars[index].properties.isUppercase else { continue }
            let previous = scalars[index - 1]
            if previous.properties.isLowercase || previous.properties.numericType != nil { break }
            if previous.properties.isUppercase, index + 1 < end, scalars[index + 1].properties.isLowercase { break }
        }
        var word = String.UnicodeScalarView()
        word.append(contentsOf: scalars[start..<end])
        return String(word).lowercased()
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
        if followsNameRules, parts.percentEncodedUser != nil { parts.percentEncodedUser = Self.replacement }
        if followsNameRules, parts.percentEncodedPassword != nil { parts.percentEncodedPassword = Self.replacement }
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
        // Most URLs carry none of these: they are not parsed into components, a parse that
        // would be repeated for every task an events reader sees (its cost: the Performance
        // article, "Single operations on Linux").
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
    /// escaped quotes included; a number or literal becomes `"REDACTED"`), of `[name, value]`
    /// arrays and of JSON escaped in JSON strings, of markup attributes and elements (see the
    /// type), of `name=value` pairs with secret-like names (a form, whatever its declared type; a
    /// query or a cookie quoted in an error page) and of secret header lines (`Authorization:
    /// Bearer ...` at the start of a line) replaced. For a body, an error page, a log line.
    public func text(_ text: String) -> String {
        let bytes = Array(text.utf8)
        guard bytes.contains(where: { "=:<[".utf8.contains($0) }) else { return text }
        return String(decoding: redactedBytes(bytes, depth: 0), as: UTF8.self)
    }

    /// How many levels of JSON escaped in JSON strings are read (level `n` spells a quote with
    /// `2^n - 1` backslashes, so no real body nests deeper); a deeper level is left to the
    /// `name=value` pass.
    private static let maximumEscapeDepth = 8

    /// Every pass over `bytes`, JSON escaped in its strings read at `depth + 1`.
    private func redactedBytes(_ bytes: [UInt8], depth: Int) -> [UInt8] {
        redactedPairs(inText: redactedMarkup(redactedJSONMembers(bytes, depth: depth)))
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

    /// Every `"name": value` member with a secret-like name, its value redacted; every
    /// `["name", value]` array with a secret-like name, its value redacted; every other string
    /// that holds escaped JSON (`\"`), read as the text it holds.
    private func redactedJSONMembers(_ bytes: [UInt8], depth: Int) -> [UInt8] {
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
            let start = index
            let (end, closed) = Self.endOfString(bytes, from: start)
            let name = closed ? String(decoding: bytes[(start + 1)..<(end - 1)], as: UTF8.self) : ""
            index = end
            var next = end
            while next < bytes.count, Self.isSpace(bytes[next]) { next += 1 }
            if closed, next < bytes.count, bytes[next] == UInt8(ascii: ":") {
                out.append(contentsOf: bytes[start..<end])
                guard isSecret(name: name.replacingOccurrences(of: "\\", with: "")) else { continue }
                next += 1
                while next < bytes.count, Self.isSpace(bytes[next]) { next += 1 }
                out.append(contentsOf: bytes[index..<next])
                index = redactedValue(bytes, at: next, into: &out, keepingSchemeOf: nil) ?? next
            } else if closed, next < bytes.count, bytes[next] == UInt8(ascii: ","), Self.opensArray(bytes, before: start),
                isSecret(headerName: name.replacingOccurrences(of: "\\", with: ""))
            {
                // `["password", "..."]`, `["Authorization", "Bearer ..."]`: a name and its value.
                out.append(contentsOf: bytes[start..<end])
                next += 1
                while next < bytes.count, Self.isSpace(bytes[next]) { next += 1 }
                out.append(contentsOf: bytes[index..<next])
                let unescaped = name.replacingOccurrences(of: "\\", with: "")
                index = redactedValue(bytes, at: next, into: &out, keepingSchemeOf: unescaped) ?? next
            } else {
                out.append(contentsOf: redactedStringLiteral(bytes[start..<end], closed: closed, depth: depth))
            }
        }
        return out
    }

    /// Whether the last byte before `index` that is not a space is a `[`: a string there is an
    /// array's first element. Reads back over spaces only, each of which precedes one string.
    private static func opensArray(_ bytes: [UInt8], before index: Int) -> Bool {
        var previous = index - 1
        while previous >= 0, isSpace(bytes[previous]) { previous -= 1 }
        return previous >= 0 && bytes[previous] == UInt8(ascii: "[")
    }

    /// Appends the redaction of the JSON value at `start` to `out` and returns the index past
    /// the value: a string becomes `"REDACTED"` (`"Bearer REDACTED"` when `keepingSchemeOf` is
    /// an `Authorization`-like header name), a number or literal `"REDACTED"`. `nil` for a
    /// structure (its own members are judged by their names) or the end of `bytes`.
    private func redactedValue(_ bytes: [UInt8], at start: Int, into out: inout [UInt8], keepingSchemeOf header: String?) -> Int? {
        guard start < bytes.count else { return nil }
        switch bytes[start] {
        case Self.quote:
            let (valueEnd, valueClosed) = Self.endOfString(bytes, from: start)
            var shown = Self.replacement
            if let header, Self.normalized(header).hasSuffix("authorization") {
                let contentEnd = valueClosed ? valueEnd - 1 : valueEnd
                shown = headerValue(String(decoding: bytes[(start + 1)..<contentEnd], as: UTF8.self), name: header)
            }
            out.append(contentsOf: "\"\(shown)\(valueClosed ? "\"" : "")".utf8)
            return valueEnd
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            return nil
        default:
            var valueEnd = start
            let ends: [UInt8] = [UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]")]
            while valueEnd < bytes.count, !ends.contains(bytes[valueEnd]), !Self.isSpace(bytes[valueEnd]) { valueEnd += 1 }
            out.append(contentsOf: "\"\(Self.replacement)\"".utf8)
            return valueEnd
        }
    }

    /// A string literal (its quotes included; the closing one missing when not `closed`) as it
    /// may be shown: when it holds escaped JSON (`\"`), its content is unescaped, redacted as
    /// text one level deeper, and escaped again; unchanged, byte for byte, when nothing in it
    /// was a secret.
    private func redactedStringLiteral(_ literal: ArraySlice<UInt8>, closed: Bool, depth: Int) -> [UInt8] {
        let content = literal.dropFirst().dropLast(closed ? 1 : 0)
        guard depth < Self.maximumEscapeDepth, Self.holdsEscapedQuote(content) else { return Array(literal) }
        let inner = Self.unescapedJSON(content)
        let redacted = redactedBytes(inner, depth: depth + 1)
        guard redacted != inner else { return Array(literal) }
        return [Self.quote] + Self.escapedJSON(redacted) + (closed ? [Self.quote] : [])
    }

    /// Whether `content` holds `\"`: a quote escaped in it, the mark of JSON inside a string.
    private static func holdsEscapedQuote(_ content: ArraySlice<UInt8>) -> Bool {
        var index = content.startIndex
        while index < content.endIndex {
            if content[index] == UInt8(ascii: "\\") {
                if index + 1 < content.endIndex, content[index + 1] == quote { return true }
                index += 2
            } else {
                index += 1
            }
        }
        return false
    }

    /// The content of a JSON string literal unescaped, as UTF-8: `\"`, `\\`, `\/`, `\b`, `\f`,
    /// `\n`, `\r`, `\t` and `\uXXXX` (surrogate pairs joined; a lone surrogate becomes U+FFFD);
    /// an unknown escape or a backslash at the end (a prefix cut short) is kept as it is.
    private static func unescapedJSON(_ content: ArraySlice<UInt8>) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(content.count)
        var index = content.startIndex
        func hex(at position: Int) -> UInt32? {
            guard position + 4 <= content.endIndex else { return nil }
            var value: UInt32 = 0
            for byte in content[position..<(position + 4)] {
                guard let digit = Character(Unicode.Scalar(byte)).hexDigitValue else { return nil }
                value = value << 4 | UInt32(digit)
            }
            return value
        }
        while index < content.endIndex {
            guard content[index] == UInt8(ascii: "\\"), index + 1 < content.endIndex else {
                out.append(content[index])
                index += 1
                continue
            }
            let escaped = content[index + 1]
            index += 2
            switch escaped {
            case quote, UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escaped)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(UInt8(ascii: "\n"))
            case UInt8(ascii: "r"): out.append(UInt8(ascii: "\r"))
            case UInt8(ascii: "t"): out.append(UInt8(ascii: "\t"))
            case UInt8(ascii: "u"):
                guard var scalar = hex(at: index) else {
                    out.append(contentsOf: [UInt8(ascii: "\\"), escaped])
                    continue
                }
                index += 4
                if (0xD800..<0xDC00).contains(scalar), index + 6 <= content.endIndex, content[index] == UInt8(ascii: "\\"),
                    content[index + 1] == UInt8(ascii: "u"), let low = hex(at: index + 2), (0xDC00..<0xE000).contains(low)
                {
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    index += 6
                }
                out.append(contentsOf: String(Character(Unicode.Scalar(scalar) ?? "\u{FFFD}")).utf8)
            default: out.append(contentsOf: [UInt8(ascii: "\\"), escaped])
            }
        }
        return out
    }

    /// UTF-8 text as the content of a JSON string literal: `"` and `\` escaped, control
    /// characters as `\n`, `\r`, `\t` or `\u00XX`.
    private static func escapedJSON(_ text: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(text.count + text.count / 8)
        let digits = Array("0123456789abcdef".utf8)
        for byte in text {
            switch byte {
            case quote, UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), byte])
            case UInt8(ascii: "\n"): out.append(contentsOf: "\\n".utf8)
            case UInt8(ascii: "\r"): out.append(contentsOf: "\\r".utf8)
            case UInt8(ascii: "\t"): out.append(contentsOf: "\\t".utf8)
            case 0..<0x20: out.append(contentsOf: "\\u00".utf8 + [digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
            default: out.append(byte)
            }
        }
        return out
    }

    // MARK: Markup

    /// A byte of a tag or attribute name (`wsse:Password`, `data-token`, `xml:lang`).
    private static func isMarkupNameByte(_ byte: UInt8) -> Bool {
        isNameByte(byte) && byte != UInt8(ascii: "%") && byte != UInt8(ascii: "[") && byte != UInt8(ascii: "]")
            || byte == UInt8(ascii: ":")
    }

    private static func isLetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
    }

    /// One attribute of a start tag: its name, and where its value lies in the text (`nil`
    /// when it has none).
    private struct Attribute {
        let name: String
        let value: Range<Int>?
    }

    /// A start tag read from the text: its name, attributes, where it ends (past its `>`, or
    /// the end of a prefix cut inside it) and whether it closes itself or is closed at all.
    private struct StartTag {
        let name: String
        let attributes: [Attribute]
        let end: Int
        let closed: Bool
        let selfClosing: Bool
    }

    /// The start tag at `start` (a `<` followed by a letter), read up to its `>` (one inside a
    /// quoted value does not end it), or to the end of `bytes`.
    private static func startTag(_ bytes: [UInt8], at start: Int) -> StartTag {
        var index = start + 1
        while index < bytes.count, isMarkupNameByte(bytes[index]) { index += 1 }
        let name = String(decoding: bytes[(start + 1)..<index], as: UTF8.self)
        var attributes: [Attribute] = []
        var selfClosing = false
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: ">") {
                return StartTag(name: name, attributes: attributes, end: index + 1, closed: true, selfClosing: selfClosing)
            }
            selfClosing = byte == UInt8(ascii: "/")
            guard isMarkupNameByte(byte) else {
                index += 1
                continue
            }
            let nameStart = index
            while index < bytes.count, isMarkupNameByte(bytes[index]) { index += 1 }
            let attributeName = String(decoding: bytes[nameStart..<index], as: UTF8.self).lowercased()
            var after = index
            while after < bytes.count, isSpace(bytes[after]) { after += 1 }
            guard after < bytes.count, bytes[after] == UInt8(ascii: "=") else {
                attributes.append(Attribute(name: attributeName, value: nil))
                continue
            }
            after += 1
            while after < bytes.count, isSpace(bytes[after]) { after += 1 }
            if after < bytes.count, bytes[after] == quote || bytes[after] == UInt8(ascii: "'") {
                let delimiter = bytes[after]
                var valueEnd = after + 1
                while valueEnd < bytes.count, bytes[valueEnd] != delimiter { valueEnd += 1 }
                attributes.append(Attribute(name: attributeName, value: (after + 1)..<valueEnd))
                index = min(valueEnd + 1, bytes.count)
            } else {
                var valueEnd = after
                while valueEnd < bytes.count, !isSpace(bytes[valueEnd]), bytes[valueEnd] != UInt8(ascii: ">"),
                    !(bytes[valueEnd] == UInt8(ascii: "/") && valueEnd + 1 < bytes.count && bytes[valueEnd + 1] == UInt8(ascii: ">"))
                {
                    valueEnd += 1
                }
                attributes.append(Attribute(name: attributeName, value: after..<valueEnd))
                index = valueEnd
            }
        }
        return StartTag(name: name, attributes: attributes, end: bytes.count, closed: false, selfClosing: false)
    }

    /// The attribute values of `tag` that are secrets: those of `value` and `content` when the
    /// tag's `name` or `id` is secret-like (a hidden input, a CSRF meta tag), that of `value`
    /// in a `type="password"` input, and those of attributes with secret-like names.
    private func secretValues(of tag: StartTag, in bytes: [UInt8]) -> [Range<Int>] {
        func value(_ name: String) -> String? {
            tag.attributes.first { $0.name == name }?.value.map { String(decoding: bytes[$0], as: UTF8.self) }
        }
        let namesASecret = [value("name"), value("id")].contains { $0.map { isSecret(name: $0) } ?? false }
        let isPassword = followsNameRules && value("type")?.lowercased() == "password"
        return tag.attributes.compactMap { attribute in
            guard let range = attribute.value, !range.isEmpty else { return nil }
            switch attribute.name {
            case "value": return namesASecret || isPassword ? range : nil
            case "content": return namesASecret ? range : nil
            case "name", "id", "type": return nil
            default: return isSecret(name: attribute.name) ? range : nil
            }
        }
    }

    /// Every start tag's secret attribute values (``secretValues(of:in:)``) and the text of
    /// every element with a secret-like name (its local name, after any `prefix:`), a CDATA
    /// section included, redacted; also a `<textarea>` whose `name` is secret-like. Each byte
    /// is read once: a tag to its `>`, an element's text to the next `<`.
    private func redactedMarkup(_ bytes: [UInt8]) -> [UInt8] {
        guard bytes.contains(UInt8(ascii: "<")) else { return bytes }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            guard bytes[index] == UInt8(ascii: "<"), index + 1 < bytes.count, Self.isLetter(bytes[index + 1]) else {
                out.append(bytes[index])
                index += 1
                continue
            }
            let tag = Self.startTag(bytes, at: index)
            var copied = index
            for range in secretValues(of: tag, in: bytes) {
                out.append(contentsOf: bytes[copied..<range.lowerBound])
                out.append(contentsOf: Self.replacement.utf8)
                copied = range.upperBound
            }
            out.append(contentsOf: bytes[copied..<tag.end])
            index = tag.end
            let localName = tag.name.split(separator: ":").last.map(String.init) ?? tag.name
            let holdsSecretText =
                isSecret(name: localName)
                || (localName.lowercased() == "textarea"
                    && tag.attributes.contains {
                        $0.name == "name" && $0.value.map { isSecret(name: String(decoding: bytes[$0], as: UTF8.self)) } ?? false
                    })
            guard tag.closed, !tag.selfClosing, holdsSecretText else { continue }
            index = redactedElementText(bytes, from: index, into: &out)
        }
        return out
    }

    /// Appends the text of an element that starts at `start` to `out`, redacted (whitespace
    /// alone is kept), and returns where it ends: at the next `<`, or past a CDATA section that
    /// opens it (after any whitespace).
    private func redactedElementText(_ bytes: [UInt8], from start: Int, into out: inout [UInt8]) -> Int {
        var end = start
        while end < bytes.count, bytes[end] != UInt8(ascii: "<") { end += 1 }
        guard bytes[start..<end].allSatisfy(Self.isSpace) else {
            out.append(contentsOf: Self.replacement.utf8)
            return end
        }
        out.append(contentsOf: bytes[start..<end])
        let cdata = Array("<![CDATA[".utf8)
        guard bytes.count - end >= cdata.count, bytes[end..<(end + cdata.count)].elementsEqual(cdata) else { return end }
        let contentStart = end + cdata.count
        end = contentStart
        while end < bytes.count,
            !(bytes[end] == UInt8(ascii: ">") && end - 2 >= contentStart && bytes[end - 1] == UInt8(ascii: "]")
                && bytes[end - 2] == UInt8(ascii: "]"))
        {
            end += 1
        }
        out.append(contentsOf: Self.replacement.utf8)
        return min(end + 1, bytes.count)
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
