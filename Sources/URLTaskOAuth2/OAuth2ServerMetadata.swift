import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An authorization server's metadata (RFC 8414): its endpoints, read from its issuer, so an
/// app configures one URL instead of three.
///
/// ``discover(issuer:timeout:documentSizeLimit:session:)`` reads
/// `/.well-known/oauth-authorization-server` from the issuer's origin (with the issuer's path
/// after it, RFC 8414 §3.1), and checks what it reads before anything is built from it:
///
/// - the document's `issuer` must be the issuer asked for, exactly (§3.3): a document served
///   for another issuer (a misconfigured proxy, a server impersonating another) is refused with
///   ``OAuth2DiscoveryError/issuerMismatch(expected:received:)``;
/// - the issuer and every endpoint used must be `https`, or `http` on a loopback host
///   (`127.0.0.1`, `::1`, `localhost`: a test server, a local development one), else
///   ``OAuth2DiscoveryError/insecureEndpoint(field:url:)``; a token sent in clear could be read
///   on the way;
/// - the answer is bounded in time (`timeout`) and size (`documentSizeLimit`), as the token
///   requests are.
///
/// Discover once, at launch or when the app is configured, and keep the result: the endpoints of
/// a server change rarely, and a sign-in should not wait for a discovery each time.
///
/// ```swift
/// let metadata = try await OAuth2ServerMetadata.discover(issuer: URL(string: "https://auth.example.com")!)
/// let endpoint = metadata.tokenEndpoint(clientID: "app")  // its revocationURL too, if the server has one
/// let flow = try metadata.authorizationCodeFlow(
///     tokenEndpoint: endpoint, redirectURI: URL(string: "com.example.app:/oauth/callback")!)
/// ```
public struct OAuth2ServerMetadata: Sendable, Equatable {
    /// The issuer identifier, as the document and the app both spell it.
    public var issuer: String
    /// `authorization_endpoint`, if the server has one (RFC 8414 makes it optional for servers
    /// without a grant that uses it).
    public var authorizationEndpoint: URL?
    /// `token_endpoint`.
    public var tokenEndpoint: URL
    /// `revocation_endpoint` (RFC 7009), if the server has one.
    public var revocationEndpoint: URL?
    /// `token_endpoint_auth_methods_supported`, such as `client_secret_basic` and
    /// `client_secret_post`; `client_secret_basic` alone when the document leaves it out, as
    /// RFC 8414 §2 says.
    public var tokenEndpointAuthMethods: [String]
    /// `code_challenge_methods_supported` (RFC 7636); empty when the document leaves it out.
    public var codeChallengeMethods: [String]
    /// `authorization_response_iss_parameter_supported` (RFC 9207): every authorization
    /// response carries `iss`, so a flow built from this metadata requires it.
    public var sendsIssuerInAuthorizationResponses: Bool

    /// The most bytes of a metadata document ``discover(issuer:timeout:documentSizeLimit:session:)``
    /// reads unless you pass another: large servers' documents are a few KiB.
    public static let defaultDocumentSizeLimit = 64 * 1024

    /// Reads and checks the metadata of `issuer` (see the type's documentation).
    ///
    /// Throws an ``OAuth2DiscoveryError`` for an issuer that is not one, an answer other than
    /// 200, a document that is not metadata, of another issuer, with an endpoint in clear, or
    /// longer than `documentSizeLimit`; a `URLError` (`timedOut` past `timeout`,
    /// `cannotConnectToHost`...) when there was no answer.
    ///
    /// - Parameters:
    ///   - issuer: The issuer identifier: an `https` URL without query or fragment (`http` on a
    ///     loopback host).
    ///   - timeout: How long the whole answer may take (``OAuth2TokenEndpoint/defaultTimeout``).
    ///   - documentSizeLimit: The most bytes of the document read (``defaultDocumentSizeLimit``).
    ///   - session: The session the request goes through (``OAuth2TokenEndpoint/defaultSession``:
    ///     ephemeral, no cache, no cookies).
    public static func discover(
        issuer: URL, timeout: Duration = OAuth2TokenEndpoint.defaultTimeout, documentSizeLimit: Int = defaultDocumentSizeLimit,
        session: URLSession = OAuth2TokenEndpoint.defaultSession
    ) async throws -> OAuth2ServerMetadata {
        let location = try metadataURL(for: issuer)
        var request = URLRequest(url: location)
        request.httpMethod = "GET"
        request.cachePolicy = .reloadIgnoringLocalCacheData
        // Whole seconds, rounded up: swift-corelibs-foundation reads `timeoutInterval` so (0.5 s
        // would be none at all); `boundedData`'s deadline keeps `timeout` exactly.
        request.timeoutInterval = (timeout.clampedWait / .seconds(1)).rounded(.up)
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.setValue("close", forHTTPHeaderField: "Connection")
        let shown = OAuth2TokenEndpoint.displayed(location)
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await session.boundedData(for: request, deadline: timeout, sizeLimit: documentSizeLimit)
        } catch OAuth2Error.tokenAnswerTooLarge(let limit, _) {
            throw OAuth2DiscoveryError.documentTooLarge(url: shown, limit: limit)
        }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard status == 200 else { throw OAuth2DiscoveryError.metadataUnavailable(url: shown, status: status) }
        return try OAuth2ServerMetadata(issuer: issuer, document: data, from: shown)
    }

    /// Where RFC 8414 §3.1 puts `issuer`'s metadata: `/.well-known/oauth-authorization-server`
    /// on the issuer's origin, followed by the issuer's path without its trailing `/`
    /// (`https://example.com/tenant1` →
    /// `https://example.com/.well-known/oauth-authorization-server/tenant1`).
    ///
    /// Throws ``OAuth2DiscoveryError/invalidIssuer(_:reason:)`` for a URL that is no issuer
    /// identifier.
    public static func metadataURL(for issuer: URL) throws -> URL {
        try checkIssuer(issuer)
        guard var parts = URLComponents(url: issuer, resolvingAgainstBaseURL: false) else {
            throw OAuth2DiscoveryError.invalidIssuer(OAuth2TokenEndpoint.displayed(issuer), reason: "it is not a URL")
        }
        var path = parts.percentEncodedPath
        while path.hasSuffix("/") { path.removeLast() }
        parts.percentEncodedPath = "/.well-known/oauth-authorization-server" + path
        guard let url = parts.url else {
            throw OAuth2DiscoveryError.invalidIssuer(OAuth2TokenEndpoint.displayed(issuer), reason: "it is not a URL")
        }
        return url
    }

    /// Reads and checks a metadata document for `issuer` that you obtained yourself (kept from an
    /// earlier discovery, shipped with the app): the same checks as
    /// ``discover(issuer:timeout:documentSizeLimit:session:)``.
    public init(issuer: URL, document: Data) throws {
        try self.init(issuer: issuer, document: document, from: try Self.metadataURL(for: issuer))
    }

    private init(issuer: URL, document: Data, from location: URL) throws {
        try Self.checkIssuer(issuer)
        func invalid(_ reason: String) -> OAuth2DiscoveryError {
            .invalidMetadata(url: OAuth2TokenEndpoint.displayed(location), reason: reason)
        }
        guard let object = (try? JSONSerialization.jsonObject(with: document)) as? [String: Any] else {
            throw invalid("the document is not a JSON object")
        }
        // RFC 8414 §3.3: identical to the issuer the metadata was asked for.
        let expected = issuer.absoluteString
        let received = object["issuer"] as? String
        guard received == expected else { throw OAuth2DiscoveryError.issuerMismatch(expected: expected, received: received) }
        func endpoint(_ field: String, required: Bool) throws -> URL? {
            guard let value = object[field] else {
                if required { throw invalid("it has no \(field)") }
                return nil
            }
            guard let text = value as? String, let url = URL(string: text), url.host?.isEmpty == false,
                URLComponents(url: url, resolvingAgainstBaseURL: false)?.fragment == nil
            else { throw invalid("its \(field) is not an absolute URL without a fragment") }
            guard Self.isSecure(url) else {
                throw OAuth2DiscoveryError.insecureEndpoint(field: field, url: OAuth2TokenEndpoint.displayed(url))
            }
            return url
        }
        func strings(_ field: String) throws -> [String]? {
            guard let value = object[field] else { return nil }
            guard let list = value as? [String] else { throw invalid("its \(field) is not a list of strings") }
            return list
        }
        self.issuer = expected
        self.tokenEndpoint = try endpoint("token_endpoint", required: true)!
        self.authorizationEndpoint = try endpoint("authorization_endpoint", required: false)
        self.revocationEndpoint = try endpoint("revocation_endpoint", required: false)
        self.tokenEndpointAuthMethods = try strings("token_endpoint_auth_methods_supported") ?? ["client_secret_basic"]
        self.codeChallengeMethods = try strings("code_challenge_methods_supported") ?? []
        self.sendsIssuerInAuthorizationResponses = object["authorization_response_iss_parameter_supported"] as? Bool ?? false
    }

    /// A token endpoint for this server: its ``tokenEndpoint`` and ``revocationEndpoint``, for
    /// the client you describe (the parameters are ``OAuth2TokenEndpoint``'s).
    ///
    /// `clientAuthentication` `nil` picks HTTP Basic unless the server lists only
    /// `client_secret_post` among its ``tokenEndpointAuthMethods``.
    public func tokenEndpoint(
        clientID: String? = nil, clientSecret: String? = nil, clientAuthentication: OAuth2TokenEndpoint.ClientAuthentication? = nil,
        timeout: Duration? = OAuth2TokenEndpoint.defaultTimeout, lateAnswerLimit: Duration = OAuth2TokenEndpoint.defaultLateAnswerLimit,
        answerSizeLimit: Int = OAuth2TokenEndpoint.defaultAnswerSizeLimit, session: URLSession = OAuth2TokenEndpoint.defaultSession
    ) -> OAuth2TokenEndpoint {
        let postOnly = tokenEndpointAuthMethods.contains("client_secret_post") && !tokenEndpointAuthMethods.contains("client_secret_basic")
        return OAuth2TokenEndpoint(
            url: tokenEndpoint, revocationURL: revocationEndpoint, clientID: clientID, clientSecret: clientSecret,
            clientAuthentication: clientAuthentication ?? (postOnly ? .requestBody : .basic), timeout: timeout,
            lateAnswerLimit: lateAnswerLimit, answerSizeLimit: answerSizeLimit, session: session)
    }

    /// The authorization code flow of this server, with its ``issuer`` checked on every callback
    /// (RFC 9207) and required when the server says it always sends it.
    ///
    /// Throws ``OAuth2DiscoveryError/invalidMetadata(url:reason:)`` when the server has no
    /// ``authorizationEndpoint``.
    public func authorizationCodeFlow(
        tokenEndpoint: OAuth2TokenEndpoint, redirectURI: URL, scope: String? = nil
    ) throws -> OAuth2AuthorizationCodeFlow {
        guard let authorizationEndpoint else {
            let location = (URL(string: issuer).flatMap { try? Self.metadataURL(for: $0) }) ?? self.tokenEndpoint
            throw OAuth2DiscoveryError.invalidMetadata(
                url: OAuth2TokenEndpoint.displayed(location), reason: "it has no authorization_endpoint")
        }
        return OAuth2AuthorizationCodeFlow(
            authorizationEndpoint: authorizationEndpoint, tokenEndpoint: tokenEndpoint, redirectURI: redirectURI, scope: scope,
            issuer: issuer, requiresIssuer: sendsIssuerInAuthorizationResponses)
    }

    /// RFC 8414 §2: `https`, no query, no fragment (`http` on a loopback host).
    private static func checkIssuer(_ issuer: URL) throws {
        let shown = OAuth2TokenEndpoint.displayed(issuer)
        guard let parts = URLComponents(url: issuer, resolvingAgainstBaseURL: false), parts.host?.isEmpty == false else {
            throw OAuth2DiscoveryError.invalidIssuer(shown, reason: "it is not an absolute URL")
        }
        guard parts.query == nil, parts.fragment == nil else {
            throw OAuth2DiscoveryError.invalidIssuer(shown, reason: "an issuer has no query or fragment")
        }
        guard isSecure(issuer) else {
            throw OAuth2DiscoveryError.invalidIssuer(shown, reason: "an issuer is https (http only on a loopback host)")
        }
    }

    /// `https`, or `http` on a loopback host.
    static func isSecure(_ url: URL) -> Bool {
        switch url.scheme?.lowercased() {
        case "https": return true
        case "http": return isLoopback(url.host)
        default: return false
        }
    }

    /// `127.0.0.0/8`, `::1` or `localhost`.
    static func isLoopback(_ host: String?) -> Bool {
        guard var host = host?.lowercased() else { return false }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host == "localhost" || host == "::1" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets.first == "127" && octets.allSatisfy { UInt8($0) != nil }
    }
}

/// Why ``OAuth2ServerMetadata/discover(issuer:timeout:documentSizeLimit:session:)`` refused an
/// authorization server's metadata. Every case is a configuration error: the issuer URL is
/// wrong, or the server's metadata is; discovering again will not help until one is fixed. URLs
/// are shown without their query, user, password or fragment; the discovery request carries no
/// secret, so nothing the server answers can echo one.
public enum OAuth2DiscoveryError: Error, Sendable, Equatable {
    /// The issuer given is not an issuer identifier (RFC 8414 §2): not an absolute `https` URL
    /// (`http` only on a loopback host), or with a query or a fragment.
    case invalidIssuer(URL, reason: String)
    /// The metadata URL answered `status`, not 200 (a 404: the server publishes no RFC 8414
    /// metadata there, or the issuer's path is wrong).
    case metadataUnavailable(url: URL, status: Int)
    /// The document at `url` is not authorization server metadata: not a JSON object, no
    /// `token_endpoint`, an endpoint that is not an absolute URL.
    case invalidMetadata(url: URL, reason: String)
    /// The document's `issuer` is not the issuer asked for (RFC 8414 §3.3: identical, compared
    /// as strings); `received` is `nil` when it has none. Its endpoints are not used: they
    /// could be another server's.
    case issuerMismatch(expected: String, received: String?)
    /// An endpoint the document names (`field`) is not `https` (nor `http` on a loopback host).
    case insecureEndpoint(field: String, url: URL)
    /// The document was longer than `limit` bytes; the transfer was cancelled.
    case documentTooLarge(url: URL, limit: Int)
}

extension OAuth2DiscoveryError: CustomStringConvertible, LocalizedError {
    /// What was refused and why, with the URL concerned.
    public var description: String {
        switch self {
        case .invalidIssuer(let issuer, let reason):
            "\(issuer.absoluteString) is not an authorization server's issuer identifier: \(reason)"
        case .metadataUnavailable(let url, let status):
            "The authorization server metadata at \(url.absoluteString) answered \(status), not 200 (check the issuer URL)"
        case .invalidMetadata(let url, let reason):
            "The document at \(url.absoluteString) is not authorization server metadata: \(reason)"
        case .issuerMismatch(let expected, let received):
            received.map {
                "The authorization server metadata is for the issuer \($0.prefix(200)), not \(expected): refused (RFC 8414 §3.3)"
            }
                ?? "The authorization server metadata names no issuer (expected \(expected)): refused (RFC 8414 §3.3)"
        case .insecureEndpoint(let field, let url):
            "The authorization server metadata's \(field), \(url.absoluteString), is not https: refused"
        case .documentTooLarge(let url, let limit):
            "The authorization server metadata at \(url.absoluteString) was longer than \(limit) bytes; the transfer was cancelled"
        }
    }

    /// The same text as ``description``.
    public var errorDescription: String? { description }
}
