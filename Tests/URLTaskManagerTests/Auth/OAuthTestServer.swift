import XCTest
import LoopbackServer
@testable import URLTaskManager

/// A demo API and its OAuth2 token endpoint on one real loopback server.
///
/// - `/api/...` answers 200 only to `Authorization: Bearer <the current access token>`, else
///   401 with `WWW-Authenticate: Bearer error="invalid_token"`. A test can hold the answer of
///   one path on a `Gate` (the 401-or-200 decision is made on arrival, before the hold).
/// - `POST /oauth/token` implements the refresh-token grant with rotation: it accepts only
///   the current refresh token, then issues a new access token AND a new refresh token. It
///   also accepts `grant_type=password` and a token exchange whose `subject_token` the test
///   names. It counts calls and records the refresh tokens it received.
///
/// The server records every request (path, `Authorization`, sequence number, arrival time)
/// through `LoopbackServer`'s own log.
final class OAuthTestServer: @unchecked Sendable {  // all mutable state is guarded by `lock`.
    enum TokenAnswer {
        /// Issue tokens as the grant says.
        case issue
        /// Answer every token request with this status and OAuth2 error code.
        case reject(status: Int, error: String)
    }

    let server: LoopbackServer
    let name: String
    private let lock = NSLock()
    private var validAccess: String?
    private var validRefresh: String
    private var issued = 0
    private var answer = TokenAnswer.issue
    private var expiresIn: Int? = 3600
    private var tokenGate: Gate?
    private var heldPaths: [String: Gate] = [:]
    private var exchangeSubject: String?
    private var receivedRefreshTokens: [String] = []
    private var onTokenRequest: (@Sendable () -> Void)?
    private var unauthorizedDelay: Duration?

    /// - Parameters:
    ///   - name: Prefixes every token, so two servers' tokens differ.
    ///   - access: The access token valid at start (`nil`: none is).
    ///   - refresh: The refresh token valid at start.
    init(name: String = "a", access: String? = nil, refresh: String = "refresh-0") throws {
        server = try LoopbackServer()
        self.name = name
        validAccess = access
        validRefresh = refresh
        install()
    }

    deinit { server.shutdown() }

    var tokenURL: URL { server.url("/oauth/token") }
    var endpoint: OAuth2TokenEndpoint { OAuth2TokenEndpoint(url: tokenURL, clientID: "tests") }

    func apiURL(_ path: String = "/profile") -> URL { server.url("/api" + path) }

    var currentAccess: String? { lock.withLock { validAccess } }
    var currentRefresh: String { lock.withLock { validRefresh } }
    var refreshTokensReceived: [String] { lock.withLock { receivedRefreshTokens } }
    var tokenRequests: [RecordedRequest] { server.requests(path: "/oauth/token") }
    var tokenRequestCount: Int { server.requestCount(path: "/oauth/token") }
    var apiRequests: [RecordedRequest] { server.requests.filter { $0.path.hasPrefix("/api/") } }

    /// A credential for `access`, expiring in `expiresIn` seconds by the client's clock.
    func credential(access: String, refresh: String? = nil, expiresIn: TimeInterval = 3600) -> OAuth2Credential {
        OAuth2Credential(accessToken: access, refreshToken: refresh ?? currentRefresh, expiresAt: Date().addingTimeInterval(expiresIn))
    }

    func setTokenAnswer(_ answer: TokenAnswer) { lock.withLock { self.answer = answer } }
    func setExpiresIn(_ seconds: Int?) { lock.withLock { expiresIn = seconds } }
    /// Holds every token response until `gate` opens.
    func holdTokenResponses(on gate: Gate?) { lock.withLock { tokenGate = gate } }
    /// Holds the response to `/api<path>` until `gate` opens.
    func holdResponses(to path: String, on gate: Gate) { lock.withLock { heldPaths["/api" + path] = gate } }
    /// The access token a token exchange must present as `subject_token` (`nil`: refuse all).
    func acceptExchange(of subject: String?) { lock.withLock { exchangeSubject = subject } }
    /// Called on the server thread as each token request arrives, before it is answered.
    func onTokenRequest(_ action: @escaping @Sendable () -> Void) { lock.withLock { onTokenRequest = action } }
    /// Delays every 401, so more requests are in flight with a refused token at once.
    func delayUnauthorized(by delay: Duration?) { lock.withLock { unauthorizedDelay = delay } }
    /// Makes the current access token invalid (the server revoked it, or its clock says it expired).
    func revokeAccess() { lock.withLock { validAccess = nil } }

    private func install() {
        server.route(prefix: "/api/") { [weak self] request in
            guard let self else { return .status(500) }
            let (authorized, gate, delay) = lock.withLock {
                (validAccess.map { request.headers["authorization"] == "Bearer \($0)" } ?? false, heldPaths[request.path], unauthorizedDelay)
            }
            gate?.wait(timeout: .seconds(10))
            guard authorized else {
                return ServerResponse(status: 401, headers: ["WWW-Authenticate": "Bearer error=\"invalid_token\""]).with { $0.delay = delay }
            }
            return .text("ok \(request.path)")
        }
        server.route("POST", "/oauth/token") { [weak self] request in
            guard let self else { return .status(500) }
            let form = Self.decodeForm(request.bodyText)
            let (hook, gate) = lock.withLock {
                if let token = form["refresh_token"] { receivedRefreshTokens.append(token) }
                return (onTokenRequest, tokenGate)
            }
            hook?()
            gate?.wait(timeout: .seconds(10))
            return lock.withLock { answerToken(form) }
        }
    }

    /// Must be called with `lock` held.
    private func answerToken(_ form: [String: String]) -> ServerResponse {
        if case .reject(let status, let error) = answer {
            return .json(["error": error, "error_description": "refused by the test"], status: status)
        }
        switch form["grant_type"] {
        case "refresh_token" where form["refresh_token"] == validRefresh:
            break
        case "password":
            break
        case "urn:ietf:params:oauth:grant-type:token-exchange" where exchangeSubject != nil && form["subject_token"] == exchangeSubject:
            break
        default:
            return .json(["error": "invalid_grant"], status: 400)
        }
        issued += 1
        validAccess = "\(name)-access-\(issued)"
        validRefresh = "\(name)-refresh-\(issued)"
        var body: [String: Any] = ["access_token": validAccess!, "token_type": "Bearer", "refresh_token": validRefresh]
        if let expiresIn { body["expires_in"] = expiresIn }
        return .json(try! JSONSerialization.data(withJSONObject: body, options: [.sortedKeys]))
    }

    static func decodeForm(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map {
                String($0).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String($0)
            }
            if parts.count == 2 { fields[parts[0]] = parts[1] }
        }
        return fields
    }
}
