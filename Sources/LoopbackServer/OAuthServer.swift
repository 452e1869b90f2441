import Foundation

/// A demo API and its OAuth 2.0 token endpoint on one loopback server: for testing an app's
/// authentication code against real HTTP, and for the examples.
///
/// - `/api/...` answers 200 (`ok <path>`) only to `Authorization: Bearer <the current access
///   token>`, else 401 with `WWW-Authenticate: Bearer error="invalid_token"`, and counts it;
///   ``revokeEachAccessToken(afterAuthorizing:)`` revokes each token after so many requests,
///   ``expireAccessTokens(after:)`` after so long.
/// - `POST /oauth/token` takes a form (RFC 6749) and answers a JSON token response:
///   - `grant_type=refresh_token` with the current refresh token rotates both tokens; one rotated
///     away is refused, or answered, as ``setRefreshRotation(_:)`` says;
///   - `grant_type=password` with a known user (any user if ``init(name:access:refresh:users:)``
///     was given none) signs in;
///   - a token exchange (RFC 8693) whose `subject_token` was allowed with ``acceptExchange(of:)``
///     or ``acceptExchange(where:)``;
///   - `grant_type=client_credentials` (RFC 6749 §4.4) from the client set with
///     ``requireClient(id:secret:)``: an access token and no refresh token, as §4.4.3 advises
///     (400 `unauthorized_client` while no client is required, since nothing authenticated it);
///   - `grant_type=authorization_code` with a code from `/oauth/authorize`, the same
///     `redirect_uri` and `client_id`, and the `code_verifier` whose S256 hash is the code's
///     challenge (RFC 7636 §4.6); each code is accepted once;
///   - anything else: 400 `invalid_grant`.
/// - `POST /oauth/revoke` (``revocationURL``) is the revocation endpoint (RFC 7009): a form with
///   `token` (and `token_type_hint`), the client authenticated as at the token endpoint. The
///   current refresh token revokes itself and the access token (RFC 7009 §2.1), the current
///   access token itself; any token gets 200, a known one or not (§2.2), and is recorded in
///   ``revokedTokens``. ``setRevocationAnswer(_:)`` makes it refuse instead,
///   ``holdRevocationResponses(on:)`` hold its answers.
/// - `GET /.well-known/oauth-authorization-server` (``metadataURL``) is its RFC 8414 metadata,
///   naming ``issuer`` (the server's origin) and the endpoints above;
///   ``setMetadataIssuer(_:)`` makes it name another issuer.
/// - `GET /oauth/authorize` (``authorizeURL``) is the authorization endpoint of the
///   authorization code grant with PKCE (RFC 6749 §4.1, RFC 7636): it approves at once, as if
///   the user had signed in, and redirects to `redirect_uri` with `code` and the `state` it was
///   given; it requires `response_type=code`, `client_id`, `redirect_uri` and an S256
///   `code_challenge`, and answers a request without them with an `invalid_request` redirect
///   (400 without a `redirect_uri`). ``setAuthorizationAnswer(_:)`` makes it refuse instead.
///
/// After ``requireClient(id:secret:)``, a token request must also authenticate as that client
/// (RFC 6749 §2.3.1), with HTTP Basic or in the form but not both, or it is answered 401
/// `invalid_client` (400 `invalid_request` for both at once).
///
/// Tokens are `<name>-access-<n>` and `<name>-refresh-<n>`, so two servers' tokens differ and a
/// test can tell which server issued what. Every request is recorded by ``server``.
public final class OAuthServer: @unchecked Sendable {  // all mutable state is guarded by `lock`.
    /// How the token endpoint answers.
    public enum TokenAnswer: Sendable {
        /// Issue tokens as the grant says.
        case issue
        /// Answer every token request with this status and OAuth 2.0 error code.
        case reject(status: Int, error: String)
    }

    /// What the token endpoint does with a refresh token it rotated away (RFC 9700 §4.14.2),
    /// the ways real servers differ.
    public enum RefreshRotation: Sendable, Equatable {
        /// The old token is refused (`invalid_grant`); the current pair stays valid.
        case refuseReused
        /// The old token, presented within this long after it was rotated, gets the current
        /// pair again (Okta's grace period, Auth0's reuse interval); later it is refused.
        case graceWindow(Duration)
        /// Reuse detection: presenting a rotated-away token refuses it and revokes the whole
        /// family, the current refresh and access tokens included (Keycloak's "revoke refresh
        /// token", RFC 9700's recommendation).
        case revokeFamilyOnReuse
    }

    /// How the revocation endpoint answers.
    public enum RevocationAnswer: Sendable {
        /// Revoke the token (a known one), answer 200.
        case revoke
        /// Answer every revocation request with this status and OAuth 2.0 error code, revoking
        /// nothing (503 `temporarily_unavailable`, RFC 7009 §2.2.1, is a server that is down).
        case reject(status: Int, error: String)
    }

    /// How the authorization endpoint answers.
    public enum AuthorizationAnswer: Sendable {
        /// Approve: redirect with a code.
        case approve
        /// Refuse: redirect with this OAuth 2.0 error code (`access_denied` is a user who
        /// declined), and the `state`.
        case refuse(error: String)
    }

    /// An authorization code the authorize endpoint issued, and what it is bound to.
    private struct IssuedCode {
        let clientID: String
        let redirectURI: String
        let challenge: String
        var used = false
    }

    /// The underlying server: its request log, extra routes.
    public let server: LoopbackServer
    /// Prefixes every token this server issues.
    public let name: String
    private let users: [String: String]
    private let lock = NSLock()
    private var validAccess: String?
    private var validRefresh: String?
    private var issued = 0
    private var unauthorized = 0
    private var answer = TokenAnswer.issue
    private var expiresIn: Int? = 3600
    private var tokenGate: Gate?
    /// Token answers are sent in this many pieces, this far apart (after the grant is processed).
    private var tokenDrip: (pieces: Int, interval: Duration)?
    /// Token answers wait this long, silent, after the grant was processed.
    private var tokenDelay: Duration?
    /// Told how the writing of each token answer ended.
    private var tokenAnswerSent: (@Sendable (ServerResponse.SendOutcome) -> Void)?
    private var heldPaths: [String: Gate] = [:]
    private var exchangeAccepts: @Sendable (String) -> Bool = { _ in false }
    private var receivedRefreshTokens: [String] = []
    private var rotation = RefreshRotation.refuseReused
    /// Refresh tokens this server rotated away, and when (for ``RefreshRotation/graceWindow(_:)``).
    private var rotatedAway: [String: ContinuousClock.Instant] = [:]
    /// The last answer to a refresh grant, sent again within a grace window.
    private var lastRefreshAnswer: Data?
    private var refusedRefreshes = 0
    private var onTokenRequest: (@Sendable () -> Void)?
    private var unauthorizedDelay: Duration?
    /// Requests each access token authorizes before it is revoked (`nil`: no limit).
    private var accessUses: Int?
    /// Requests the current access token has authorized since it was issued (or the limit set).
    private var usedAccess = 0
    /// How long an access token is accepted after it was issued, by the server's clock (`nil`: for ever).
    private var accessLifetime: Duration?
    /// When the current access token was issued (or the server started).
    private var accessIssuedAt = ContinuousClock.now
    private var requiredClient: (id: String, secret: String)?
    private var authorizationAnswer = AuthorizationAnswer.approve
    private var codes: [String: IssuedCode] = [:]
    private var codeRefusals: [String] = []
    private var revocationAnswer = RevocationAnswer.revoke
    private var revocationGate: Gate?
    private var revoked: [String] = []
    private var metadataIssuer: String?

    /// Starts the demo API and its token endpoint on a new ``LoopbackServer`` on 127.0.0.1.
    ///
    /// - Parameters:
    ///   - name: Prefixes every token, so two servers' tokens differ.
    ///   - access: The access token valid at start (`nil`: none is).
    ///   - refresh: The refresh token valid at start.
    ///   - users: Username to password, for the password grant; empty accepts anyone.
    public init(name: String = "a", access: String? = nil, refresh: String = "refresh-0", users: [String: String] = [:]) throws {
        server = try LoopbackServer()
        self.name = name
        self.users = users
        validAccess = access
        validRefresh = refresh
        install()
    }

    deinit { server.shutdown() }

    /// Stops the server now (it also stops when released).
    public func shutdown() { server.shutdown() }

    /// The token endpoint, `POST /oauth/token`.
    public var tokenURL: URL { server.url("/oauth/token") }
    /// The authorization endpoint, `GET /oauth/authorize`.
    public var authorizeURL: URL { server.url("/oauth/authorize") }
    /// The revocation endpoint (RFC 7009), `POST /oauth/revoke`.
    public var revocationURL: URL { server.url("/oauth/revoke") }
    /// The RFC 8414 metadata, `GET /.well-known/oauth-authorization-server`.
    public var metadataURL: URL { server.url("/.well-known/oauth-authorization-server") }
    /// The server's issuer identifier: its origin, `http://127.0.0.1:<port>`, as its metadata
    /// names it (unless ``setMetadataIssuer(_:)`` said otherwise).
    public var issuer: String { server.baseURL.absoluteString }
    /// Makes the metadata name `issuer` instead of the server's own (`nil`: its own again): a
    /// document served for another issuer, which a client must refuse (RFC 8414 §3.3).
    public func setMetadataIssuer(_ issuer: String?) { lock.withLock { metadataIssuer = issuer } }
    /// Makes the revocation endpoint revoke or refuse the next requests.
    public func setRevocationAnswer(_ answer: RevocationAnswer) { lock.withLock { revocationAnswer = answer } }
    /// Holds every revocation answer until `gate` opens (`nil`: stop holding): a revocation
    /// endpoint that hangs.
    public func holdRevocationResponses(on gate: Gate?) { lock.withLock { revocationGate = gate } }
    /// The requests the revocation endpoint received.
    public var revocationRequests: [RecordedRequest] { server.requests(path: "/oauth/revoke") }
    /// Every token the revocation endpoint was asked to revoke and answered 200 for, in order
    /// (known to it or not).
    public var revokedTokens: [String] { lock.withLock { revoked } }
    /// Makes the authorization endpoint approve or refuse the next requests.
    public func setAuthorizationAnswer(_ answer: AuthorizationAnswer) { lock.withLock { authorizationAnswer = answer } }
    /// How many authorization codes the authorize endpoint issued.
    public var authorizationCodesIssued: Int { lock.withLock { codes.count } }
    /// Why each refused `authorization_code` grant was refused, in order: `unknown code`,
    /// `code reused`, `redirect_uri mismatch`, `client_id mismatch` or `code_verifier mismatch`
    /// (the client only hears `invalid_grant`).
    public var authorizationCodeRefusals: [String] { lock.withLock { codeRefusals } }
    /// The scheme, host and port of the API: the origin a credential is for.
    public var baseURL: URL { server.baseURL }

    /// A URL of the protected API.
    public func apiURL(_ path: String = "/profile") -> URL { server.url("/api" + path) }

    /// The access token the API accepts now.
    public var currentAccess: String? { lock.withLock { validAccess } }
    /// The refresh token the token endpoint accepts now.
    public var currentRefresh: String? { lock.withLock { validRefresh } }
    /// Every refresh token presented to the token endpoint, in order.
    public var refreshTokensReceived: [String] { lock.withLock { receivedRefreshTokens } }
    /// How many API requests were answered 401.
    public var unauthorizedCount: Int { lock.withLock { unauthorized } }
    /// The requests the token endpoint received.
    public var tokenRequests: [RecordedRequest] { server.requests(path: "/oauth/token") }
    /// How many requests the token endpoint received.
    public var tokenRequestCount: Int { server.requestCount(path: "/oauth/token") }
    /// The requests the API received.
    public var apiRequests: [RecordedRequest] { server.requests.filter { $0.path.hasPrefix("/api/") } }

    /// Makes the token endpoint issue tokens or refuse every request.
    public func setTokenAnswer(_ answer: TokenAnswer) { lock.withLock { self.answer = answer } }
    /// The `expires_in` of the next token responses (`nil`: left out).
    public func setExpiresIn(_ seconds: Int?) { lock.withLock { expiresIn = seconds } }
    /// Holds every token response until `gate` opens (`nil`: stop holding).
    public func holdTokenResponses(on gate: Gate?) { lock.withLock { tokenGate = gate } }
    /// Sends each token answer in `pieces` pieces `interval` apart, after the grant was processed
    /// (a rotated refresh token is then already the only valid one): a token endpoint answering
    /// slower than its client waits. `nil` sends answers whole again.
    public func dripTokenAnswers(pieces: Int = 10, every interval: Duration?) {
        lock.withLock { tokenDrip = interval.map { (max(1, pieces), $0) } }
    }
    /// Sends each token answer only `delay` after the grant was processed (a rotated refresh
    /// token is then already the only valid one), without a byte before it: a token endpoint
    /// silent past its client's timeout. `nil` answers at once again.
    public func delayTokenAnswers(by delay: Duration?) { lock.withLock { tokenDelay = delay } }
    /// Called on the server thread when the writing of each token answer has ended, with how
    /// it ended: whether the client was still there to read it.
    public func onTokenAnswerSent(_ action: (@Sendable (ServerResponse.SendOutcome) -> Void)?) {
        lock.withLock { tokenAnswerSent = action }
    }
    /// Holds the response to `/api<path>` until `gate` opens.
    public func holdResponses(to path: String, on gate: Gate) { lock.withLock { heldPaths["/api" + path] = gate } }
    /// The access token a token exchange must present as `subject_token` (`nil`: refuse all).
    public func acceptExchange(of subject: String?) {
        acceptExchange { token in subject.map { $0 == token } ?? false }
    }
    /// Accepts a token exchange whose `subject_token` passes `isValid`: for example, whatever
    /// another server's ``currentAccess`` is.
    public func acceptExchange(where isValid: @escaping @Sendable (String) -> Bool) {
        lock.withLock { exchangeAccepts = isValid }
    }
    /// Called on the server thread as each token request arrives, before it is answered.
    public func onTokenRequest(_ action: @escaping @Sendable () -> Void) { lock.withLock { onTokenRequest = action } }
    /// Delays every 401, so more requests are in flight with a refused token at once.
    public func delayUnauthorized(by delay: Duration?) { lock.withLock { unauthorizedDelay = delay } }
    /// Makes the token endpoint check client authentication, as a server does for a confidential
    /// client, so a test can tell a client configuration error from a rejected grant. Until it
    /// is called, any client is accepted.
    public func requireClient(id: String, secret: String) { lock.withLock { requiredClient = (id, secret) } }
    /// Makes the current access token invalid: revoked, or expired by the server's clock.
    public func revokeAccess() { lock.withLock { validAccess = nil } }
    /// Revokes each access token once it has authorized `requests` API requests, as a server
    /// that revokes tokens often (a password change, a security sweep), so a test can drive many
    /// revocations at a pace set by its own load, with no timer. The next request with it, and
    /// every one after, is answered 401 until a new token is issued. `0` makes the API refuse
    /// every token the endpoint issues (tokens for another audience); `nil`, the default, never
    /// revokes. Counts for the current token from now on.
    public func revokeEachAccessToken(afterAuthorizing requests: Int?) {
        lock.withLock {
            accessUses = requests
            usedAccess = 0
        }
    }
    /// Makes the API refuse each access token once `lifetime` has passed since it was issued, by
    /// the server's clock, as a server that enforces `expires_in` does (`nil`, the default:
    /// tokens never expire). The token the server started with counts from ``init(name:access:refresh:users:)``.
    /// `expires_in` in the token responses stays what ``setExpiresIn(_:)`` says.
    public func expireAccessTokens(after lifetime: Duration?) { lock.withLock { accessLifetime = lifetime } }
    /// Makes the current refresh token invalid too: only a new sign-in helps.
    public func revokeRefresh() { lock.withLock { validRefresh = nil } }

    /// Sets what happens to a refresh token presented again after it was rotated away.
    public func setRefreshRotation(_ rotation: RefreshRotation) { lock.withLock { self.rotation = rotation } }

    /// How many `refresh_token` grants were answered `invalid_grant`.
    public var refreshRefusals: Int { lock.withLock { refusedRefreshes } }

    /// Decodes an `application/x-www-form-urlencoded` body.
    public static func decodeForm(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { decodeFormComponent(String($0)) }
            if parts.count == 2 { fields[parts[0]] = parts[1] }
        }
        return fields
    }

    /// Decodes `Authorization: Basic` client credentials as RFC 6749 §2.3.1 encodes them (each
    /// part form-urlencoded, then joined by `:`), or `nil` if the header is not that.
    public static func decodeBasicClient(_ header: String?) -> (id: String, secret: String)? {
        guard let header, header.lowercased().hasPrefix("basic "),
            let data = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
            let text = String(data: data, encoding: .utf8),
            let colon = text.firstIndex(of: ":")
        else { return nil }
        return (decodeFormComponent(String(text[..<colon])), decodeFormComponent(String(text[text.index(after: colon)...])))
    }

    private static func decodeFormComponent(_ text: String) -> String {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? text
    }

    private func install() {
        server.route(prefix: "/api/") { [weak self] request in
            guard let self else { return .status(500) }
            let (authorized, gate, delay) = lock.withLock {
                let authorized = authorize(request.headers["authorization"])
                if !authorized { unauthorized += 1 }
                return (authorized, heldPaths[request.path], unauthorizedDelay)
            }
            _ = gate?.wait(timeout: .seconds(10))
            guard authorized else {
                return ServerResponse(status: 401, headers: ["WWW-Authenticate": "Bearer error=\"invalid_token\""]).with {
                    $0.delay = delay
                }
            }
            return .text("ok \(request.path)")
        }
        server.route("POST", "/oauth/revoke") { [weak self] request in
            guard let self else { return .status(500) }
            let form = Self.decodeForm(request.bodyText)
            let basic = Self.decodeBasicClient(request.headers["authorization"])
            let gate = lock.withLock { revocationGate }
            _ = gate?.wait(timeout: .seconds(30))
            return lock.withLock { answerRevocation(form, basic: basic) }
        }
        server.route("GET", "/.well-known/oauth-authorization-server") { [weak self] _ in
            guard let self else { return .status(500) }
            let issuer = lock.withLock { metadataIssuer } ?? issuer
            let metadata: [String: Any] = [
                "issuer": issuer, "authorization_endpoint": authorizeURL.absoluteString, "token_endpoint": tokenURL.absoluteString,
                "revocation_endpoint": revocationURL.absoluteString, "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token", "password", "client_credentials"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
                "revocation_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
            ]
            return .json((try? JSONSerialization.data(withJSONObject: metadata, options: [.sortedKeys])) ?? Data())
        }
        server.route("GET", "/oauth/authorize") { [weak self] request in
            guard let self else { return .status(500) }
            return lock.withLock { authorize(Self.decodeForm(request.query ?? "")) }
        }
        server.route("POST", "/oauth/token") { [weak self] request in
            guard let self else { return .status(500) }
            let form = Self.decodeForm(request.bodyText)
            let (hook, gate, accepts) = lock.withLock {
                if let token = form["refresh_token"] { receivedRefreshTokens.append(token) }
                return (onTokenRequest, tokenGate, exchangeAccepts)
            }
            hook?()
            _ = gate?.wait(timeout: .seconds(10))
            // The test's predicate runs outside the lock (it may ask another server).
            let exchangeAllowed = form["subject_token"].map(accepts) ?? false
            let basic = Self.decodeBasicClient(request.headers["authorization"])
            return lock.withLock {
                let answer = answerToken(form, basic: basic, exchangeAllowed: exchangeAllowed).with {
                    $0.delay = tokenDelay
                    $0.onSent = tokenAnswerSent
                }
                guard let tokenDrip, case .data(let body) = answer.body else { return answer }
                let size = max(1, (body.count + tokenDrip.pieces - 1) / tokenDrip.pieces)
                let pieces = stride(from: 0, to: body.count, by: size).map { body.subdata(in: $0..<min(body.count, $0 + size)) }
                return answer.with { $0.body = .chunked(pieces, chunkDelay: tokenDrip.interval) }
            }
        }
    }

    /// Must be called with `lock` held.
    private func answerToken(_ form: [String: String], basic: (id: String, secret: String)?, exchangeAllowed: Bool) -> ServerResponse {
        if case .reject(let status, let error) = answer {
            return .json(["error": error, "error_description": "refused by the server"], status: status)
        }
        if let refusal = refuseClient(form, basic: basic) { return refusal }
        switch form["grant_type"] {
        case "refresh_token" where validRefresh != nil && form["refresh_token"] == validRefresh:
            break
        case "refresh_token":
            return answerReusedRefresh(form["refresh_token"] ?? "")
        case "password" where users.isEmpty || (form["username"].flatMap { users[$0] } == form["password"] && form["password"] != nil):
            break
        case "urn:ietf:params:oauth:grant-type:token-exchange" where exchangeAllowed:
            break
        case "client_credentials":
            // `refuseClient` has checked the client's credentials, when a client is required.
            guard requiredClient != nil else { return .json(["error": "unauthorized_client"], status: 400) }
            return issue(refreshToken: false)
        case "authorization_code":
            if let refusal = redeemCode(form, basic: basic) {
                codeRefusals.append(refusal)
                return .json(["error": "invalid_grant"], status: 400)
            }
        default:
            return .json(["error": "invalid_grant"], status: 400)
        }
        return issue()
    }

    /// The revocation endpoint's answer (RFC 7009 §2.1, §2.2). Must be called with `lock` held.
    private func answerRevocation(_ form: [String: String], basic: (id: String, secret: String)?) -> ServerResponse {
        if case .reject(let status, let error) = revocationAnswer { return .json(["error": error], status: status) }
        if let refusal = refuseClient(form, basic: basic) { return refusal }
        guard let token = form["token"], !token.isEmpty else { return .json(["error": "invalid_request"], status: 400) }
        if token == validRefresh {
            // The refresh token, and the access token of the same grant.
            validRefresh = nil
            validAccess = nil
        } else if token == validAccess {
            validAccess = nil
        }
        rotatedAway[token] = nil
        revoked.append(token)
        return .status(200)
    }

    /// The answer to a refresh token that is not the current one, as ``rotation`` says. Must be
    /// called with `lock` held.
    private func answerReusedRefresh(_ token: String) -> ServerResponse {
        if let rotated = rotatedAway[token] {
            switch rotation {
            case .refuseReused:
                break
            case .graceWindow(let window):
                if rotated.duration(to: .now) <= window, let lastRefreshAnswer { return .json(lastRefreshAnswer) }
            case .revokeFamilyOnReuse:
                validRefresh = nil
                validAccess = nil
            }
        }
        refusedRefreshes += 1
        return .json(["error": "invalid_grant"], status: 400)
    }

    /// The answer to a token request whose client authentication is missing or wrong, or `nil`
    /// when it passes (or none is required). Must be called with `lock` held.
    private func refuseClient(_ form: [String: String], basic: (id: String, secret: String)?) -> ServerResponse? {
        guard let requiredClient else { return nil }
        if basic != nil, form["client_secret"] != nil {
            return .json(["error": "invalid_request", "error_description": "more than one client authentication method"], status: 400)
        }
        let presented = basic ?? form["client_id"].map { ($0, form["client_secret"] ?? "") }
        guard let presented, presented.id == requiredClient.id, presented.secret == requiredClient.secret else {
            return ServerResponse.json(["error": "invalid_client"], status: 401).with {
                $0.headers["WWW-Authenticate"] = "Basic realm=\"oauth\""
            }
        }
        return nil
    }

    /// The authorize endpoint's answer: a redirect to `redirect_uri` with a code, or with an
    /// error. Must be called with `lock` held.
    private func authorize(_ query: [String: String]) -> ServerResponse {
        guard let redirect = query["redirect_uri"], var target = URLComponents(string: redirect), target.scheme != nil else {
            // Without a valid redirect URI there is nowhere to send an error (RFC 6749 §4.1.2.1).
            return .text("invalid_request: redirect_uri", status: 400)
        }
        var answer = [URLQueryItem]()
        if query["response_type"] != "code" {
            answer.append(URLQueryItem(name: "error", value: "unsupported_response_type"))
        } else if query["client_id"] == nil || query["code_challenge"] == nil || query["code_challenge_method"] != "S256" {
            answer.append(URLQueryItem(name: "error", value: "invalid_request"))
        } else if case .refuse(let error) = authorizationAnswer {
            answer.append(URLQueryItem(name: "error", value: error))
        } else {
            let code = "\(name)-code-\(codes.count + 1)"
            codes[code] = IssuedCode(clientID: query["client_id"] ?? "", redirectURI: redirect, challenge: query["code_challenge"] ?? "")
            answer.append(URLQueryItem(name: "code", value: code))
        }
        if let state = query["state"] { answer.append(URLQueryItem(name: "state", value: state)) }
        target.queryItems = (target.queryItems ?? []) + answer
        return .redirect(to: target.string ?? redirect)
    }

    /// Why an `authorization_code` grant is refused, or `nil` when it is good (the code is then
    /// used up). A code presented once is used up whatever the outcome, as RFC 6749 §4.1.2 asks.
    /// Must be called with `lock` held.
    private func redeemCode(_ form: [String: String], basic: (id: String, secret: String)?) -> String? {
        guard let code = form["code"], let issued = codes[code] else { return "unknown code" }
        guard !issued.used else { return "code reused" }
        codes[code]?.used = true
        guard form["redirect_uri"] == issued.redirectURI else { return "redirect_uri mismatch" }
        guard (basic?.id ?? form["client_id"]) == issued.clientID else { return "client_id mismatch" }
        var digest = SHA256()
        digest.update(bytes: Array((form["code_verifier"] ?? "").utf8))
        let challenge = Data(digest.finalize()).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        guard form["code_verifier"] != nil, challenge == issued.challenge else { return "code_verifier mismatch" }
        return nil
    }

    /// Whether `authorization` carries the current access token, which has neither expired
    /// (``expireAccessTokens(after:)``) nor used up its requests
    /// (``revokeEachAccessToken(afterAuthorizing:)``); revokes it when it has, or just did.
    /// Must be called with `lock` held.
    private func authorize(_ authorization: String?) -> Bool {
        guard let validAccess, authorization == "Bearer \(validAccess)" else { return false }
        if let accessLifetime, accessIssuedAt.duration(to: .now) >= accessLifetime {
            self.validAccess = nil
            return false
        }
        guard let accessUses else { return true }
        guard usedAccess < accessUses else {
            self.validAccess = nil
            return false
        }
        usedAccess += 1
        if usedAccess == accessUses { self.validAccess = nil }
        return true
    }

    /// Issues the next pair of tokens, or only an access token (the client credentials grant,
    /// whose client asks again rather than refresh; the current refresh token stays valid).
    /// Must be called with `lock` held.
    private func issue(refreshToken: Bool = true) -> ServerResponse {
        issued += 1
        usedAccess = 0
        accessIssuedAt = .now
        let access = "\(name)-access-\(issued)"
        validAccess = access
        var body: [String: Any] = ["access_token": access, "token_type": "Bearer"]
        if refreshToken {
            let refresh = "\(name)-refresh-\(issued)"
            if let old = validRefresh { rotatedAway[old] = .now }
            validRefresh = refresh
            body["refresh_token"] = refresh
        }
        if let expiresIn { body["expires_in"] = expiresIn }
        // Keys sorted: the same grant gives the same bytes.
        let data = (try? JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])) ?? Data()
        if refreshToken { lastRefreshAnswer = data }
        return .json(data)
    }
}
