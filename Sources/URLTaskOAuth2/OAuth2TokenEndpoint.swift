import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An OAuth 2.0 token endpoint, and the requests the kit sends to it.
///
/// ``refresh(_:)`` is the refresh-token grant of RFC 6749 §6: a form `POST` of
/// `grant_type=refresh_token&refresh_token=...`, answered by a JSON token response. The same
/// request with other parameters signs in (``requestToken(_:previous:)``), for example a token
/// exchange where one service's token buys another's.
///
/// **Client authentication** (RFC 6749 §2.3.1). A confidential client (one with a
/// ``clientSecret``) authenticates with HTTP Basic by default, the method every server must
/// support; ``ClientAuthentication/requestBody`` puts `client_id` and `client_secret` in the form
/// instead, for servers that only take that. A public client (no secret) sends `client_id` in
/// the form (§3.2.1).
///
/// **Timeouts and dead connections.** Every request the kit holds waits for a refresh, so a
/// token request that hangs holds the whole app. Token requests therefore carry their own
/// ``timeout`` (10 seconds unless you say otherwise: a token endpoint answers in well under a
/// second, and a failed refresh is tried again after the authenticator's back-off) and ask for
/// `Connection: close`: refreshes are minutes apart, and a keep-alive connection left idle that
/// long is the one a NAT or a load balancer has silently dropped, which the next refresh would
/// only find out about when its timeout fires. Against a connection that stopped answering, a
/// refresh on a pooled connection waits until the connection is found dead, where one with
/// `Connection: close` opens a fresh connection and is answered at once (measured on Linux:
/// URLTaskManager's Performance article, "Figures behind other choices"). (Apple's URLSession
/// may ignore a `Connection` header it manages itself; the timeout still bounds the wait there.)
///
/// **A 401 with `WWW-Authenticate`.** A token endpoint that refuses the client's credentials
/// answers 401 with `WWW-Authenticate: Basic` (RFC 6749 §5.2). URLSession takes that as a
/// challenge; without a delegate, swift-corelibs-foundation then never completes the `POST`,
/// not even at its timeout. ``defaultSession`` therefore refuses such challenges (the kit has
/// no other credentials to offer), and the refusal becomes
/// ``OAuth2Error/tokenRequestRejected(status:error:description:url:)`` with the 401 (on Linux
/// without the body's `error` code, which URLSession drops; a 401 counts as a
/// configuration error either way). A session of your own needs a delegate that does the same.
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
    public var url: URL {
        didSet { address = (URLOrigin.description(of: url), url.path) }
    }
    /// The origin (``URLOrigin/description``) and path of ``url``, which ``matches(_:)`` compares
    /// every request with (twice per request a manager sends): worked out once rather than parsed
    /// from the URL each time.
    private var address: (origin: String?, path: String)
    /// The revocation endpoint (RFC 7009), if the server has one: ``OAuth2Authenticator/signOut()``
    /// then revokes the refresh token and the access token it signs out of (see
    /// ``revoke(_:)``), with this endpoint's client authentication, ``timeout`` and
    /// ``answerSizeLimit``. `nil` (the default) signs out locally only. The server's metadata
    /// names it `revocation_endpoint` (see ``OAuth2ServerMetadata``).
    public var revocationURL: URL?
    /// Sent as `client_id`, if set.
    public var clientID: String?
    /// The client's secret, if it has one (confidential clients only: an app binary keeps no
    /// secret). Sent as ``clientAuthentication`` says.
    public var clientSecret: String?
    /// How a confidential client proves who it is; ignored without a ``clientSecret``.
    public var clientAuthentication: ClientAuthentication
    /// How long a token request may take, from sending it to the end of the answer, before it
    /// fails with `URLError.timedOut` (it is also each request's `timeoutInterval`, rounded up to
    /// whole seconds as swift-corelibs-foundation reads it, except for
    /// an ``OAuth2Authenticator``'s refresh, whose connection lives ``lateAnswerLimit`` longer:
    /// see there); `nil` leaves the session's own `timeoutIntervalForRequest`, which bounds only
    /// the silence between two bytes. Short, because every request waiting for a
    /// refresh waits this long too (see the type's "Timeouts and dead connections"). Any value
    /// is safe: zero or negative fails each token request at once with `URLError.timedOut`, and
    /// anything beyond 100 years counts as 100 years.
    public var timeout: Duration?
    /// How much longer than ``timeout`` an ``OAuth2Authenticator``'s refresh lets its token
    /// request run in the background (60 seconds unless you say otherwise). The requests waiting
    /// for the refresh still fail with `URLError.timedOut` at ``timeout``, but the connection
    /// lives on and the answer is read to its end and stored, whether it was dripping or the
    /// server stayed silent until it answered (the refresh's token request has ``timeout`` plus
    /// this as its `timeoutInterval`): a server that already rotated the refresh token when a
    /// slow answer reached its deadline would otherwise leave the client with a dead one, and
    /// every later refresh would fail with `invalid_grant` until the user signs in again. Until
    /// the answer arrives, later refreshes wait for it instead of sending the old refresh token.
    /// Past both, the transfer is cancelled and the refresh fails with `URLError.timedOut`.
    /// ``refresh(_:)`` and the sign-in grants are not affected: they end at ``timeout``.
    public var lateAnswerLimit: Duration
    /// The most bytes of a token answer's body the kit reads (256 KiB unless you say
    /// otherwise). A token answer is a few hundred bytes, a few KiB with an ID token; without a
    /// bound, a broken or hostile endpoint (or a wrong URL serving a large file) could make the
    /// app hold any amount in memory, twice over while it is parsed. Past it the transfer is
    /// cancelled (at once when a `Content-Length` announces more) and the request fails with
    /// ``OAuth2Error/tokenAnswerTooLarge(limit:url:)``. Zero or negative refuses every answer with
    /// a body.
    public var answerSizeLimit: Int
    /// The session the requests go through.
    public var session: URLSession

    /// How a confidential client authenticates to the token endpoint (RFC 6749 §2.3.1).
    public enum ClientAuthentication: Sendable, Hashable {
        /// `Authorization: Basic` with the form-urlencoded `client_id` and `client_secret`
        /// joined by `:`. The default: every server must support it, and it keeps the secret out
        /// of the form, which servers and proxies are more likely to log.
        case basic
        /// `client_id` and `client_secret` in the form body, which §2.3.1 allows and some
        /// servers require (`client_secret_post` in OpenID Connect terms).
        case requestBody
    }

    /// The ``lateAnswerLimit`` unless you pass another.
    public static let defaultLateAnswerLimit: Duration = .seconds(60)

    /// The ``answerSizeLimit`` unless you pass another: hundreds of times a token answer with
    /// an ID token, a bounded cost in memory.
    public static let defaultAnswerSizeLimit = 256 * 1024

    /// The ``timeout`` unless you pass another: long enough for a token endpoint under load,
    /// short enough that requests waiting for a refresh are not held long by a dead one.
    public static let defaultTimeout: Duration = .seconds(10)

    /// The session used unless you pass one: ephemeral, no cache, no cookies, and the same
    /// 10-second request timeout as ``defaultTimeout`` so a hung token endpoint cannot hold
    /// requests for long. One per process, shared, so endpoints do not each leak a session.
    public static let defaultSession: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        configuration.timeoutIntervalForRequest = defaultTimeout / .seconds(1)
        return URLSession(configuration: configuration, delegate: TokenSessionDelegate(), delegateQueue: nil)
    }()

    /// Describes a token endpoint.
    ///
    /// - Parameters:
    ///   - url: The token endpoint URL.
    ///   - revocationURL: The revocation endpoint (RFC 7009) a sign-out revokes the tokens at;
    ///     `nil` signs out locally only.
    ///   - clientID: Sent as `client_id`, if set.
    ///   - clientSecret: The client's secret, if it has one (confidential clients only).
    ///   - clientAuthentication: How a confidential client sends its secret; HTTP Basic unless
    ///     the server only accepts it in the form.
    ///   - timeout: How long a token request may wait for an answer (``defaultTimeout``).
    ///   - lateAnswerLimit: How much longer a refresh's answer is still read, in the background,
    ///     and stored (``defaultLateAnswerLimit``).
    ///   - answerSizeLimit: The most bytes of a token answer's body read before the transfer is
    ///     cancelled (``defaultAnswerSizeLimit``).
    ///   - session: The session the requests go through (``defaultSession``).
    public init(
        url: URL, revocationURL: URL? = nil, clientID: String? = nil, clientSecret: String? = nil,
        clientAuthentication: ClientAuthentication = .basic, timeout: Duration? = OAuth2TokenEndpoint.defaultTimeout,
        lateAnswerLimit: Duration = OAuth2TokenEndpoint.defaultLateAnswerLimit,
        answerSizeLimit: Int = OAuth2TokenEndpoint.defaultAnswerSizeLimit,
        session: URLSession = OAuth2TokenEndpoint.defaultSession
    ) {
        self.url = url
        self.address = (URLOrigin.description(of: url), url.path)
        self.revocationURL = revocationURL
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.clientAuthentication = clientAuthentication
        self.timeout = timeout
        self.lateAnswerLimit = lateAnswerLimit.clampedWait
        self.answerSizeLimit = answerSizeLimit
        self.session = session
    }

    /// Renews `credential` with its refresh token.
    ///
    /// When the answer carries a new `refresh_token` (rotation), the returned credential holds
    /// it and the old one must be considered dead; when it carries none, the old one is kept, as
    /// RFC 6749 §6 says. The same goes for `scope`.
    public func refresh(_ credential: OAuth2Credential) async throws -> OAuth2Credential {
        try await refresh(credential, within: timeout)
    }

    /// ``refresh(_:)`` with its answer read for ``timeout`` plus ``lateAnswerLimit``: how an
    /// ``OAuth2Authenticator`` refreshes, bounding the wait of the requests that need the
    /// refresh by ``timeout`` itself.
    func refreshAllowingLateAnswer(_ credential: OAuth2Credential) async throws -> OAuth2Credential {
        try await refresh(credential, within: timeout.map { $0.clampedWait + lateAnswerLimit.clampedWait })
    }

    private func refresh(_ credential: OAuth2Credential, within limit: Duration?) async throws -> OAuth2Credential {
        guard let refreshToken = credential.refreshToken else { throw OAuth2Error.noRefreshToken }
        return try await requestToken(["grant_type": "refresh_token", "refresh_token": refreshToken], previous: credential, within: limit)
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

    /// Posts `parameters` as a form, authenticated as ``clientAuthentication`` says, and reads
    /// the token response. Fields the response leaves out (`refresh_token`, `scope`) are taken
    /// from `previous`.
    public func requestToken(_ parameters: [String: String], previous: OAuth2Credential? = nil) async throws -> OAuth2Credential {
        try await requestToken(parameters, previous: previous, within: timeout)
    }

    /// Every ``OAuth2Error`` about the answer names ``url`` (without its query, user, password or
    /// fragment): see ``OAuth2Error/url``.
    private func requestToken(
        _ parameters: [String: String], previous: OAuth2Credential?, within limit: Duration?
    ) async throws -> OAuth2Credential {
        do {
            return try await answer(parameters, previous: previous, within: limit)
        } catch let error as OAuth2Error {
            throw error.naming(url)
        }
    }

    private func answer(
        _ parameters: [String: String], previous: OAuth2Credential?, within limit: Duration?
    ) async throws -> OAuth2Credential {
        // The transport's own timeout is the whole request's: for a refresh that lets its
        // answer come late, a server silent past ``timeout`` is still waited for.
        let request = tokenRequest(parameters, transportTimeout: limit)
        // `expires_in` counts from when the server answered; counting from before the request
        // left errs on the side of renewing early.
        let issuedAt = Date()
        let (data, response) = try await send(request, within: limit)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let mediaType = Self.mediaType(of: response)
        let parsed = try? JSONSerialization.jsonObject(with: data, options: .fragmentsAllowed)
        let object = parsed as? [String: Any]
        if let wrong = notATokenEndpoint(status: status, mediaType: mediaType, body: data, object: object) { throw wrong }
        guard (200..<300).contains(status) else {
            throw OAuth2Error.tokenRequestRejected(
                status: status, error: object?["error"] as? String, description: object?["error_description"] as? String)
        }
        // Past `notATokenEndpoint`, a 2xx without an object is an answer meant as JSON.
        guard let object else {
            throw OAuth2Error.invalidTokenResponse(reason: parsed == nil ? "the body is not valid JSON" : "the body is not a JSON object")
        }
        return try Self.credential(from: object, issuedAt: issuedAt, previous: previous)
    }

    /// The error for an answer that shows ``url`` is no token endpoint: a 404 or 405, or a 2xx
    /// or 4xx answer (but a 401, 408 or 429, which a token endpoint itself sends) whose body is
    /// not JSON and does not claim to be (``isMeantAsJSON(mediaType:body:)``): an HTML page,
    /// plain text, an empty 2xx. An empty error answer is left to the status, as before.
    ///
    /// A body meant as JSON that is not a JSON object (cut short, a JSON array) is the
    /// server's faulty answer, not a wrong URL: a 2xx is then
    /// ``OAuth2Error/invalidTokenResponse(reason:url:)`` and a 4xx
    /// ``OAuth2Error/tokenRequestRejected(status:error:description:url:)`` without a code, both
    /// temporary (issue 47: 0.3.0 called a truncated `{"access_token": "ab` a configuration
    /// error, "check the token endpoint URL").
    private func notATokenEndpoint(status: Int, mediaType: String?, body: Data, object: [String: Any]?) -> OAuth2Error? {
        let notFound = status == 404 || status == 405
        let success = (200..<300).contains(status)
        let clientError = (400..<500).contains(status) && ![401, 408, 429].contains(status)
        let notJSON = object == nil && (success || !body.isEmpty) && !Self.isMeantAsJSON(mediaType: mediaType, body: body)
        guard notFound || (notJSON && (success || clientError)) else { return nil }
        return .notATokenEndpoint(url: Self.displayed(url), status: status, mediaType: mediaType)
    }

    /// The answer's `Content-Type` without its parameters, lowercased; `nil` when it has none.
    private static func mediaType(of response: URLResponse) -> String? {
        guard let value = (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Type") else { return nil }
        let type = String(value.prefix { $0 != ";" }).trimmingCharacters(in: .whitespaces).lowercased()
        return type.isEmpty ? nil : type
    }

    /// Whether an answer is meant as JSON, parsed or not: its media type is `application/json`
    /// or a `+json` one (RFC 6839), or its body's first byte after whitespace (and a UTF-8 byte
    /// order mark) opens a JSON object or array. What a token endpoint sends, even when it
    /// fails to send it whole; an HTML page or plain text is neither.
    static func isMeantAsJSON(mediaType: String?, body: Data) -> Bool {
        if let mediaType, mediaType == "application/json" || mediaType.hasSuffix("+json") { return true }
        var bytes = body[...]
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        let first = bytes.first { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }
        return first == UInt8(ascii: "{") || first == UInt8(ascii: "[")
    }

    /// `url` without its query, user, password and fragment: what an error may name.
    static func displayed(_ url: URL) -> URL {
        guard var parts = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return url }
        parts.user = nil
        parts.password = nil
        parts.query = nil
        parts.fragment = nil
        return parts.url ?? url
    }

    /// Sends `request`, within `limit` for the whole answer; an HTTP authentication
    /// challenge the session's ``TokenSessionDelegate`` refused (URLSession then reports a
    /// cancel) becomes the rejection it stands for. Token and revocation requests alike.
    func send(_ request: URLRequest, within limit: Duration?) async throws -> (Data, URLResponse) {
        let delegate = session.delegate as? TokenSessionDelegate
        do {
            let answer = try await session.boundedData(for: request, deadline: limit, sizeLimit: answerSizeLimit)
            _ = delegate?.takeRefusal(of: request)
            return answer
        } catch let error as URLError where error.code == .cancelled {
            guard let status = delegate?.takeRefusal(of: request) else { throw error }
            throw OAuth2Error.tokenRequestRejected(status: status, error: nil, description: nil)
        }
    }

    /// The `POST` that carries `parameters` plus the client's authentication, with ``timeout``
    /// as its `timeoutInterval`.
    func tokenRequest(_ parameters: [String: String]) -> URLRequest {
        tokenRequest(parameters, transportTimeout: timeout)
    }

    /// The `POST` that carries `parameters` plus the client's authentication, with
    /// `transportTimeout` as its `timeoutInterval`: ``timeout``, or for a refresh that reads a
    /// late answer ``timeout`` plus ``lateAnswerLimit`` (a `timeoutInterval` of ``timeout`` would
    /// cut a server silent until it answers, and lose the refresh token it rotated).
    func tokenRequest(_ parameters: [String: String], transportTimeout: Duration?) -> URLRequest {
        formRequest(to: url, parameters, transportTimeout: transportTimeout)
    }

    /// The `POST` to `target` (the token endpoint, or the revocation endpoint) that carries
    /// `parameters` plus the client's authentication, with `transportTimeout` as its
    /// `timeoutInterval`.
    func formRequest(to target: URL, _ parameters: [String: String], transportTimeout: Duration?) -> URLRequest {
        var fields = parameters
        var request = URLRequest(url: target)
        request.httpMethod = "POST"
        request.cachePolicy = .reloadIgnoringLocalCacheData
        // Clamped: corelibs traps on a `timeoutInterval` beyond about 9.2e15 s. Whole seconds,
        // rounded up: corelibs (6.3.1) reads it as whole seconds, so 0.5 s failed at once and
        // 1.5 s at 1 s; the deadline of `send` (`boundedData`) keeps the limit exactly.
        if let transportTimeout { request.timeoutInterval = (transportTimeout.clampedWait / .seconds(1)).rounded(.up) }
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.setValue("close", forHTTPHeaderField: "Connection")
        switch (clientID, clientSecret, clientAuthentication) {
        case (let id?, let secret?, .basic):
            request.setValue(Self.basicAuthorization(clientID: id, secret: secret), forHTTPHeaderField: "Authorization")
        default:
            if let clientID { fields["client_id"] = clientID }
            if let clientSecret { fields["client_secret"] = clientSecret }
        }
        request.httpBody = Data(Self.formEncoded(fields).utf8)
        return request
    }

    /// `Basic base64(urlencode(id) ":" urlencode(secret))`: RFC 6749 §2.3.1 encodes each part
    /// as a form value first, so an id or secret holding `:` or non-ASCII survives the split.
    static func basicAuthorization(clientID: String, secret: String) -> String {
        "Basic " + Data("\(formEscaped(clientID)):\(formEscaped(secret))".utf8).base64EncodedString()
    }

    /// Whether `request` is addressed to this endpoint (same origin and path).
    public func matches(_ request: URLRequest) -> Bool {
        guard let target = request.url, let origin = address.origin, URLOrigin.description(of: target) == origin else { return false }
        return target.path == address.path
    }

    /// Reads a token response (RFC 6749 §5.1).
    static func credential(from object: [String: Any], issuedAt: Date, previous: OAuth2Credential?) throws -> OAuth2Credential {
        guard let accessToken = object["access_token"] as? String, !accessToken.isEmpty else {
            throw OAuth2Error.invalidTokenResponse(reason: "no access_token")
        }
        if let type = object["token_type"] as? String, type.lowercased() != "bearer" {
            // The type is not echoed: the server chose the text, and it may hold anything.
            throw OAuth2Error.invalidTokenResponse(reason: "token_type is not Bearer")
        }
        let lifetime = try Self.lifetime(object["expires_in"])
        return OAuth2Credential(
            accessToken: accessToken,
            refreshToken: (object["refresh_token"] as? String) ?? previous?.refreshToken,
            expiresAt: lifetime.map { issuedAt.addingTimeInterval($0) } ?? .distantFuture,
            scope: (object["scope"] as? String) ?? previous?.scope,
            issuedAt: issuedAt
        )
    }

    /// The longest lifetime taken from `expires_in`: beyond it a token is as good as
    /// permanent, and `Date` arithmetic on absurd values (1e30 seconds) stops being meaningful.
    static let maximumLifetime: TimeInterval = 10 * 365 * 24 * 60 * 60

    /// The token's lifetime in seconds from `expires_in` (RFC 6749 §5.1), or `nil` when the
    /// server left it out (the token is then renewed when a 401 says so).
    ///
    /// A number, or a string holding one (some servers send that). A lifetime that is not a
    /// positive finite number (negative, zero, NaN, infinite, or not a number at all) makes the
    /// answer invalid: such a token is expired on arrival, and accepting it would make every
    /// request ask for another. Lifetimes beyond ``maximumLifetime`` are cut to it.
    static func lifetime(_ value: Any?) throws -> TimeInterval? {
        let seconds: Double?
        switch value {
        case nil, is NSNull: return nil
        case let string as String: seconds = Double(string.trimmingCharacters(in: .whitespaces))
        case let number as NSNumber: seconds = number.doubleValue
        default: seconds = nil
        }
        guard let seconds else { throw OAuth2Error.invalidTokenResponse(reason: "expires_in is not a number") }
        guard seconds.isFinite, seconds > 0 else {
            throw OAuth2Error.invalidTokenResponse(reason: "expires_in is not a positive number of seconds")
        }
        return min(seconds, maximumLifetime)
    }

    /// `application/x-www-form-urlencoded`, every byte but the unreserved ones escaped (a
    /// refresh token may contain `+`, `/`, `=` and `&`). Sorted, so the body is stable.
    static func formEncoded(_ fields: [String: String]) -> String {
        fields.sorted { $0.key < $1.key }.map { "\(formEscaped($0.key))=\(formEscaped($0.value))" }.joined(separator: "&")
    }

    /// One form name or value, every byte but the unreserved ones percent-escaped.
    static func formEscaped(_ string: String) -> String {
        let unreserved = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
        return string.addingPercentEncoding(withAllowedCharacters: unreserved) ?? string
    }
}

extension OAuth2TokenEndpoint: CustomStringConvertible, CustomDebugStringConvertible {
    /// The URL (secrets redacted, see `Redaction`), the client ID and how the client
    /// authenticates; never the client secret (the synthesized description of a struct would
    /// print every stored property).
    public var description: String {
        "OAuth2TokenEndpoint(url: \(Redaction.standard.url(url)), "
            + (revocationURL.map { "revocationURL: \(Redaction.standard.url($0)), " } ?? "")
            + "clientID: \(clientID ?? "none"), clientSecret: \(clientSecret == nil ? "none" : "set"), "
            + "clientAuthentication: \(clientAuthentication))"
    }

    /// The same as ``description``: `String(reflecting:)` does not show the secret either (nor
    /// do `dump(_:)` and the debugger: see ``customMirror``).
    public var debugDescription: String { description }
}

/// The delegate of ``OAuth2TokenEndpoint/defaultSession``: refuses the HTTP authentication
/// challenge of a token endpoint's 401 (see "A 401 with `WWW-Authenticate`" on the endpoint)
/// and remembers the status, so the refusal can be reported as the rejection it is; and hands
/// each token request's head, body pieces and end to its ``BoundedDataRequest``, which bounds
/// the body's size while it streams (a completion handler would get it only once whole).
final class TokenSessionDelegate: NSObject, URLSessionDataDelegate, Sendable {
    private static let httpAuthentication: Set<String> = [
        NSURLAuthenticationMethodDefault, NSURLAuthenticationMethodHTTPBasic, NSURLAuthenticationMethodHTTPDigest,
        NSURLAuthenticationMethodNTLM, NSURLAuthenticationMethodNegotiate,
    ]
    private struct State {
        var refused: [URLRequest: Int] = [:]
        /// The request each running task answers, until the task completes.
        var requests: [ObjectIdentifier: BoundedDataRequest] = [:]
    }

    private let state = LockedState(State())

    /// Routes `task`'s delegate calls to `request` until the task completes; before it resumes.
    func register(_ request: BoundedDataRequest, for task: URLSessionDataTask) {
        state.withLock { $0.requests[ObjectIdentifier(task)] = request }
    }

    private func request(of task: URLSessionTask) -> BoundedDataRequest? {
        state.withLock { $0.requests[ObjectIdentifier(task)] }
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
    ) {
        guard let request = request(of: dataTask) else { return completionHandler(.allow) }
        let cancels = request.perform(request.locked { $0.received(response) })
        completionHandler(cancels ? .cancel : .allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard let request = request(of: dataTask) else { return }
        request.perform(request.locked { $0.received(data) })
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        guard let request = state.withLock({ $0.requests.removeValue(forKey: ObjectIdentifier(task)) }) else { return }
        request.perform(request.locked { $0.finished(error) })
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        // Server trust and client certificates keep the system's handling.
        guard Self.httpAuthentication.contains(challenge.protectionSpace.authenticationMethod) else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        if let request = task.originalRequest, let status = (challenge.failureResponse as? HTTPURLResponse)?.statusCode {
            state.withLock { $0.refused[request] = status }
        }
        completionHandler(.rejectProtectionSpace, nil)
    }

    /// The status of the challenge refused for `request`, if there was one; forgets it.
    func takeRefusal(of request: URLRequest) -> Int? {
        state.withLock { $0.refused.removeValue(forKey: request) }
    }
}
