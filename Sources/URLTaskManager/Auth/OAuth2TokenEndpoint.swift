/// An OAuth 2.0 token endpoint, and the requests the kit sends to it.
///
/// ``refresh(_:)`` is the refresh-token grant of RFC 6749 §6: a form `POST` of
/// `grant_type=refresh_token&refresh_token=...` (plus `client_id` and `client_secret` when
/// given, in the body as §2.3.1 allows), answered by a JSON token response. The same request
/// with other parameters signs in (``requestToken(_:previous:)``), for example a token
/// exchange where one service's token buys another's.
///
/// **Why a plain session.** The token request must not go through a manager that applies the
/// token it renews: the ``BearerInterceptor`` would attach the expiring token to it (or wait
/// for the very refresh it is part of), the refresh reactor's gate would hold it behind its own
/// refresh, and a 401 from it would start another refresh. It must not be cached or leave
/// cookies either. So by default it goes through ``defaultSession``, an ephemeral session with no
/// cache and no cookies; pass your own `URLSession` for pinning or a proxy. (If you pass the
/// manager's session anyway, ``OAuth2RefreshReactor`` exempts the token endpoint and
/// ``BearerInterceptor`` skips it, so it still works, but there is no reason to.)
public struct OAuth2TokenEndpoint: Sendable {
    /// The token endpoint URL.
    public var url: URL
    /// Sent as `client_id`, if set.
    public var clientID: String?
    /// Sent as `client_secret`, if set (confidential clients only: an app binary keeps no secret).
    public var clientSecret: String?
    /// The session the requests go through.
    public var session: URLSession

    /// The session used unless you pass one: ephemeral, no cache, no cookies, a 30-second
    /// request timeout so a hung token endpoint cannot hold requests for long. One per
    /// process, shared, so endpoints do not each leak a session.
    public static let defaultSession: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        configuration.timeoutIntervalForRequest = 30
        return URLSession(configuration: configuration)
    }()

    /// Describes a token endpoint.
    public init(url: URL, clientID: String? = nil, clientSecret: String? = nil, session: URLSession = OAuth2TokenEndpoint.defaultSession) {
        self.url = url
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.session = session
    }

    /// Renews `credential` with its refresh token.
    ///
    /// When the answer carries a new `refresh_token` (rotation), the returned credential holds
    /// it and the old one must be considered dead; when it carries none, the old one is kept, as
    /// RFC 6749 §6 says. The same goes for `scope`.
    public func refresh(_ credential: OAuth2Credential) async throws -> OAuth2Credential {
        guard let refreshToken = credential.refreshToken else { throw OAuth2Error.noRefreshToken }
        return try await requestToken(["grant_type": "refresh_token", "refresh_token": refreshToken], previous: credential)
    }

    /// Signs in with a username and password: the resource owner password credentials grant
    /// (RFC 6749 §4.3).
    ///
    /// Use it only with a first-party server that offers it (OAuth 2.1 drops this grant; a
    /// browser-based flow is preferred where there is one). Pass the result to
    /// ``OAuth2Authenticator/signIn(_:)``. The password is sent in the form body only, never
    /// in the URL, and is not kept.
    public func signIn(username: String, password: String, scope: String? = nil) async throws -> OAuth2Credential {
        var fields = ["grant_type": "password", "username": username, "password": password]
        if let scope { fields["scope"] = scope }
        return try await requestToken(fields)
    }

    /// Obtains this service's token in exchange for another service's access token: the
    /// token exchange grant (RFC 8693), for a login chain where one token buys the next (see
    /// ``OAuth2Authenticator/signIn(_:using:then:using:)``).
    public func exchange(_ subject: OAuth2Credential, scope: String? = nil) async throws -> OAuth2Credential {
        var fields = [
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "subject_token": subject.accessToken,
            "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
        ]
        if let scope { fields["scope"] = scope }
        return try await requestToken(fields)
    }

    /// Posts `parameters` (plus the client's id and secret) as a form and reads the token
    /// response. Fields the response leaves out (`refresh_token`, `scope`) are taken from
    /// `previous`.
    public func requestToken(_ parameters: [String: String], previous: OAuth2Credential? = nil) async throws -> OAuth2Credential {
        var fields = parameters
        if let clientID { fields["client_id"] = clientID }
        if let clientSecret { fields["client_secret"] = clientSecret }
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.cachePolicy = .reloadIgnoringLocalCacheData
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.httpBody = Data(Self.formEncoded(fields).utf8)
        // `expires_in` counts from when the server answered; counting from before the request
        // left errs on the side of renewing early.
        let issuedAt = Date()
        let (data, response) = try await session.data(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        guard (200..<300).contains(status) else {
            throw OAuth2Error.tokenRequestRejected(
                status: status, error: object?["error"] as? String, description: object?["error_description"] as? String)
        }
        guard let object else { throw OAuth2Error.invalidTokenResponse(reason: "the body is not a JSON object") }
        return try Self.credential(from: object, issuedAt: issuedAt, previous: previous)
    }

    /// Whether `request` is addressed to this endpoint (same origin and path).
    public func matches(_ request: URLRequest) -> Bool {
        guard let target = request.url, let origin = OAuth2Origin(target) else { return false }
        return origin == OAuth2Origin(url) && target.path == url.path
    }

    /// Reads a token response (RFC 6749 §5.1).
    static func credential(from object: [String: Any], issuedAt: Date, previous: OAuth2Credential?) throws -> OAuth2Credential {
        guard let accessToken = object["access_token"] as? String, !accessToken.isEmpty else {
            throw OAuth2Error.invalidTokenResponse(reason: "no access_token")
        }
        if let type = object["token_type"] as? String, type.lowercased() != "bearer" {
            throw OAuth2Error.invalidTokenResponse(reason: "token_type is \(type), not Bearer")
        }
        // Some servers send `expires_in` as a string.
        let lifetime = (object["expires_in"] as? NSNumber)?.doubleValue ?? (object["expires_in"] as? String).flatMap(Double.init)
        return OAuth2Credential(
            accessToken: accessToken,
            refreshToken: (object["refresh_token"] as? String) ?? previous?.refreshToken,
            expiresAt: lifetime.map { issuedAt.addingTimeInterval($0) } ?? .distantFuture,
            scope: (object["scope"] as? String) ?? previous?.scope
        )
    }

    /// `application/x-www-form-urlencoded`, every byte but the unreserved ones escaped (a
    /// refresh token may contain `+`, `/`, `=` and `&`). Sorted, so the body is stable.
    static func formEncoded(_ fields: [String: String]) -> String {
        let unreserved = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
        func escape(_ string: String) -> String {
            string.addingPercentEncoding(withAllowedCharacters: unreserved) ?? string
        }
        return fields.sorted { $0.key < $1.key }.map { "\(escape($0.key))=\(escape($0.value))" }.joined(separator: "&")
    }
}
