import Foundation
import LoopbackServer
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A real authorization server for the OAuth2 kit's tests: django-oauth-toolkit (DOT) 3.4.1,
/// started by the test from `scripts/oauth-server/serve.py` on 127.0.0.1 and a port the system
/// chose, with a fresh SQLite database, stopped when the test drops it.
///
/// It lives in the test target rather than in `LoopbackServer` beside `OAuthServer`: it runs a
/// Python program found in this repository's `scripts/` (by `#filePath`) with a virtual
/// environment made on this machine, which is no part of a library product (and `Process`
/// does not exist on iOS, tvOS or watchOS, which LoopbackServer supports). It needs nothing
/// else of the test target but `XCTSkip` in ``start(_:)``, so it moves to another test target
/// as it is.
///
/// The virtual environment is `$URLTASKMANAGER_DOT_PYTHON` when set (`.ci/run` sets it), else
/// the one `scripts/oauth-server/install.sh` makes for the current `requirements.txt`; without
/// either, ``start(_:)`` skips the test, saying to run that script.
///
/// Every wait is on an event with a deadline: the `DOT-READY` line, the process's exit, an
/// HTTP answer. The server's own records (``requests()``, ``tokenCounts()``) are written
/// before it sends the answer, so a test that has its answer finds its request there.
final class DjangoOAuthServer: @unchecked Sendable {  // The lifecycle and the output are guarded by `condition`.
    /// The server's settings, passed to `serve.py` on its command line.
    struct Configuration: Sendable {
        /// DOT's `ACCESS_TOKEN_EXPIRE_SECONDS`: the `expires_in` of every access token.
        var accessTokenLifetime = 3600
        /// DOT's `ROTATE_REFRESH_TOKEN`: every refresh answers a new refresh token and revokes
        /// the one it was given.
        var rotatesRefreshTokens = true
        /// DOT's `REFRESH_TOKEN_GRACE_PERIOD_SECONDS`: how long a rotated-away refresh token
        /// is still taken (0: not at all).
        var refreshGracePeriod = 0
        /// DOT's `COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS`: RFC 9207's `iss` on every
        /// authorization response, and `authorization_response_iss_parameter_supported` in
        /// the metadata.
        var sendsIssuerInAuthorizationResponses = false

        var arguments: [String] {
            [
                "--access-token-seconds", String(accessTokenLifetime),
                "--rotate-refresh-tokens", rotatesRefreshTokens ? "yes" : "no",
                "--refresh-grace-seconds", String(refreshGracePeriod),
                "--authorization-response-iss", sendsIssuerInAuthorizationResponses ? "yes" : "no",
            ]
        }
    }

    /// Why the server cannot be started here: no virtual environment with DOT.
    struct Unavailable: Error, CustomStringConvertible {
        let description: String
    }

    /// The server did not start, or an answer of its test endpoints was not what it sends.
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// One request the server answered, as `GET /test/requests` lists it (no token, secret,
    /// code or verifier: the form's parameter names only).
    struct Request: Sendable, Equatable {
        let sequence: Int
        let method: String
        let path: String
        let status: Int
        let grantType: String?
        /// RFC 7009's `token_type_hint` (`refresh_token`, `access_token`), if the form had one.
        let tokenTypeHint: String?
        /// `basic`, `bearer`, `form` (a `client_secret` in the form), `client_id` (a public
        /// client's id alone) or `none`.
        let clientAuthentication: String
        let parameters: [String]
    }

    /// What RFC 7662 introspection says about a token.
    struct Introspection: Sendable, Equatable {
        let active: Bool
        let clientID: String?
        let username: String?
        let scope: String?
        let expiresAt: Int?
    }

    /// The confidential client: authorization code (PKCE), refresh token and client
    /// credentials, with HTTP Basic or the form.
    static let confidentialClientID = "urltaskmanager-confidential"
    static let confidentialClientSecret = "confidential-secret-for-tests-only"
    /// The public client: authorization code with PKCE, refresh token, no secret.
    static let publicClientID = "urltaskmanager-public"
    /// The user the test's browser signs in as.
    static let username = "ada"
    static let password = "password-for-tests-only"
    /// Both clients' redirect URIs: `http://127.0.0.1/callback` on any port (RFC 8252 §7.3) and
    /// `com.example.app:/callback`.
    static let customScheme = "com.example.app"

    static let missingMessage =
        "django-oauth-toolkit not installed: run `scripts/oauth-server/install.sh` (it makes a virtual environment in ~/.cache/urltaskmanager), or set URLTASKMANAGER_DOT_PYTHON to a python that has the packages of scripts/oauth-server/requirements.txt"

    /// The repository's `scripts/oauth-server`, found from this file.
    static let scriptsDirectory: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/oauth-server")

    /// The virtual environment's python: `$URLTASKMANAGER_DOT_PYTHON`, else the environment
    /// `install.sh` makes for the current pins (`<cache>/urltaskmanager/oauth-venv-<16 hex
    /// digits of requirements.txt's SHA-256>`, complete once it holds `.complete`).
    static func python() throws -> String {
        let environment = ProcessInfo.processInfo.environment
        if let python = environment["URLTASKMANAGER_DOT_PYTHON"], !python.isEmpty {
            guard FileManager.default.isExecutableFile(atPath: python) else {
                throw Unavailable(description: "URLTASKMANAGER_DOT_PYTHON is \(python), which is not an executable. " + missingMessage)
            }
            return python
        }
        let requirements = scriptsDirectory.appendingPathComponent("requirements.txt")
        guard let pins = FileManager.default.contents(atPath: requirements.path) else {
            throw Failure(description: "\(requirements.path) is missing")
        }
        let cache =
            environment["XDG_CACHE_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".cache").path
        let venv = "\(cache)/urltaskmanager/oauth-venv-\(SHA256.hex(pins).prefix(16))"
        guard FileManager.default.fileExists(atPath: venv + "/.complete"),
            FileManager.default.isExecutableFile(atPath: venv + "/bin/python")
        else { throw Unavailable(description: missingMessage) }
        return venv + "/bin/python"
    }

    /// Starts a server, or skips the test where DOT is not installed.
    static func start(_ configuration: Configuration = Configuration()) throws -> DjangoOAuthServer {
        do {
            return try DjangoOAuthServer(configuration)
        } catch let unavailable as Unavailable {
            throw XCTSkip(unavailable.description)
        }
    }

    let configuration: Configuration
    /// Set once, by `init`, when the server is ready.
    private(set) var port = 0
    /// From the `Process` start to the `DOT-READY` line.
    private(set) var startupTime = Duration.zero
    /// `serve.py`'s own measure: from its start to the port being ready (migrations included).
    private(set) var serverStartupMilliseconds = 0

    /// `http://127.0.0.1:<port>`: the server's origin, its issuer (RFC 8414 `issuer`, RFC 9207
    /// `iss`) and the API's origin.
    var baseURL: URL { URL(string: issuer)! }
    var issuer: String { "http://127.0.0.1:\(port)" }
    var tokenURL: URL { url("/o/token/") }
    var authorizeURL: URL { url("/o/authorize/") }
    /// RFC 7662; callers authenticate as the confidential client.
    var introspectionURL: URL { url("/o/introspect/") }
    /// RFC 7009, with the token endpoint's client authentication.
    var revocationURL: URL { url("/o/revoke_token/") }
    /// RFC 8414's document.
    var metadataURL: URL { url("/.well-known/oauth-authorization-server") }
    /// RFC 9728's document.
    var protectedResourceMetadataURL: URL { url("/.well-known/oauth-protected-resource") }
    /// The API as RFC 6750 says: a missing, expired or revoked token gets 401 with
    /// `WWW-Authenticate: Bearer error="invalid_token",...` (DOT's `ProtectedResourceMetadataView`).
    var apiURL: URL { url("/api/profile") }
    /// The API as DOT's default `ProtectedResourceView` answers: a bare 403 for a bad token.
    var apiWithDOTDefaultURL: URL { url("/api/profile-dot-default") }
    /// A loopback redirect URI (RFC 8252 §7.3: the server takes any port for it).
    func loopbackRedirectURI(port: Int) -> URL { URL(string: "http://127.0.0.1:\(port)/callback")! }
    /// The custom-scheme redirect URI.
    static var customSchemeRedirectURI: URL { URL(string: "\(customScheme):/callback")! }

    func url(_ path: String) -> URL { URL(string: issuer + path)! }

    private let process: Process
    private let standardInput: FileHandle
    private let condition = NSCondition()
    private var lifecycle = DjangoServerLifecycle()
    private var printed = Printed()
    private let session: URLSession

    private init(_ configuration: Configuration) throws {
        self.configuration = configuration
        let python = try Self.python()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [Self.scriptsDirectory.appendingPathComponent("serve.py").path] + configuration.arguments
        process.currentDirectoryURL = Self.scriptsDirectory
        var environment = ProcessInfo.processInfo.environment
        environment["PYTHONDONTWRITEBYTECODE"] = "1"
        environment["PYTHONUNBUFFERED"] = "1"
        process.environment = environment
        let input = Pipe()
        let output = Pipe()
        let errors = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        self.process = process
        self.standardInput = input.fileHandleForWriting
        let configurationOfSession = URLSessionConfiguration.ephemeral
        configurationOfSession.timeoutIntervalForRequest = 30
        self.session = URLSession(configuration: configurationOfSession, delegate: NoRedirects(), delegateQueue: nil)

        let started = ContinuousClock.now
        try launch(process, output: output.fileHandleForReading, errors: errors.fileHandleForReading)
        // A first start migrates a new database (seconds on a loaded machine); later ones copy it.
        let deadline = Date().addingTimeInterval(90)
        condition.lock()
        while case .waiting = lifecycle.readiness, Date() < deadline {
            _ = condition.wait(until: deadline)
        }
        let readiness = lifecycle.readiness
        let log = printed.standardError.suffix(2_000)
        condition.unlock()
        guard case .ready(let port, let milliseconds) = readiness else {
            terminate()
            throw Failure(description: "django-oauth-toolkit did not start (\(readiness)): \(log)")
        }
        self.port = port
        self.serverStartupMilliseconds = milliseconds
        self.startupTime = started.duration(to: .now)
    }

    deinit {
        stop()
        session.invalidateAndCancel()
    }

    private func launch(_ process: Process, output: FileHandle, errors: FileHandle) throws {
        process.terminationHandler = { [weak self] finished in
            self?.locked { lifecycle, _ in lifecycle.exited(status: finished.terminationStatus) }
        }
        try process.runWithEverySignalUnblocked()
        Self.read(output) { [weak self] text in
            self?.locked { lifecycle, printed in
                printed.standardOutput += text
                lifecycle.received(printed.standardOutput)
            }
        }
        Self.read(errors) { [weak self] text in self?.locked { _, printed in printed.standardError += text } }
    }

    /// Reads `handle` on a thread of its own until the end of the stream.
    private static func read(_ handle: FileHandle, _ deliver: @escaping @Sendable (String) -> Void) {
        Thread.detachNewThread {
            while true {
                let data = handle.availableData
                if data.isEmpty { return }
                deliver(String(decoding: data, as: UTF8.self))
            }
        }
    }

    /// Applies one event to the lifecycle (and what the server printed) under the lock, and
    /// wakes the waiters.
    private func locked(_ transition: (inout DjangoServerLifecycle, inout Printed) -> Void) {
        condition.lock()
        transition(&lifecycle, &printed)
        condition.broadcast()
        condition.unlock()
    }

    /// The server's standard output and standard error so far.
    private struct Printed {
        var standardOutput = ""
        var standardError = ""
    }

    /// Everything the server printed on its standard output (`DOT-READY`, a `DOT-REQUEST` line
    /// per request, `DOT-STOPPED`).
    var output: String { condition.withLock { printed.standardOutput } }

    /// Whether the process has exited, with its status.
    var exitStatus: Int32? { condition.withLock { lifecycle.exitStatus } }

    /// Closes the server's standard input, which is how it is told to stop (and what happens
    /// when the test process dies), and waits at most `deadline` for it to exit.
    @discardableResult
    func closeStandardInput(deadline: TimeInterval = 10) -> Bool {
        try? standardInput.close()
        return waitForExit(deadline)
    }

    /// Stops the server: its standard input closed, then SIGTERM, then SIGKILL, each after a
    /// deadline; waits for the exit.
    func stop() {
        let stopping = condition.withLock { lifecycle.stopRequested() }
        guard stopping == .stop else { return }
        if closeStandardInput(deadline: 5) { return }
        terminate()
    }

    private func terminate() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        if !waitForExit(5) {
            kill(process.processIdentifier, SIGKILL)
            _ = waitForExit(5)
        }
    }

    private func waitForExit(_ seconds: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        condition.lock()
        defer { condition.unlock() }
        // Rechecked every 20 ms as well: during `deinit` the termination handler can no longer
        // reach this object.
        while lifecycle.exitStatus == nil, process.isRunning, Date() < deadline {
            _ = condition.wait(until: min(deadline, Date().addingTimeInterval(0.02)))
        }
        return lifecycle.exitStatus != nil || !process.isRunning
    }

    // MARK: - What the tests ask the server

    /// Every request the server answered, in order (its test endpoints not included).
    func requests() async throws -> [Request] {
        let object = try await json(URLRequest(url: url("/test/requests")))
        guard let list = object["requests"] as? [[String: Any]] else { throw Failure(description: "no requests in \(object)") }
        return try list.map { entry in
            guard let sequence = entry["sequence"] as? Int, let method = entry["method"] as? String, let path = entry["path"] as? String,
                let status = entry["status"] as? Int, let authentication = entry["client_authentication"] as? String
            else { throw Failure(description: "a malformed request record: \(entry)") }
            return Request(
                sequence: sequence, method: method, path: path, status: status, grantType: entry["grant_type"] as? String,
                tokenTypeHint: entry["token_type_hint"] as? String, clientAuthentication: authentication,
                parameters: entry["parameters"] as? [String] ?? [])
        }
    }

    /// The requests to the token endpoint, in order.
    func tokenRequests() async throws -> [Request] {
        try await requests().filter { $0.path == "/o/token/" }
    }

    /// The requests to the revocation endpoint (RFC 7009), in order.
    func revocationRequests() async throws -> [Request] {
        try await requests().filter { $0.path == "/o/revoke_token/" }
    }

    /// How many access and refresh tokens DOT's database holds, and how many refresh tokens are
    /// revoked (rotated away or revoked at the revocation endpoint).
    func tokenCounts() async throws -> (accessTokens: Int, refreshTokens: Int, revokedRefreshTokens: Int) {
        let object = try await json(URLRequest(url: url("/test/tokens")))
        guard let access = object["access_tokens"] as? Int, let refresh = object["refresh_tokens"] as? Int,
            let revoked = object["refresh_tokens_revoked"] as? Int
        else { throw Failure(description: "malformed token counts: \(object)") }
        return (access, refresh, revoked)
    }

    /// RFC 7662 introspection of `token`, authenticated as the confidential client (HTTP Basic).
    func introspect(token: String) async throws -> Introspection {
        var request = form(introspectionURL, ["token": token])
        request.setValue(Self.basic(Self.confidentialClientID, Self.confidentialClientSecret), forHTTPHeaderField: "Authorization")
        let object = try await json(request)
        guard let active = object["active"] as? Bool else { throw Failure(description: "no `active` in the introspection: \(object)") }
        return Introspection(
            active: active, clientID: object["client_id"] as? String, username: object["username"] as? String,
            scope: object["scope"] as? String, expiresAt: object["exp"] as? Int)
    }

    /// Makes an access token expired at the server now, as if its lifetime had passed while the
    /// client still holds it for valid (a token endpoint that shortened its tokens, a clock
    /// that runs slow).
    func expireAccessToken(_ token: String) async throws {
        let object = try await json(form(url("/test/expire-access-token"), ["token": token]))
        guard object["expired"] as? Bool == true else { throw Failure(description: "the server knows no such access token") }
    }

    /// Whether the server knows `token` as a refresh token, and whether it is revoked.
    func refreshTokenState(_ token: String) async throws -> (exists: Bool, revoked: Bool) {
        let object = try await json(form(url("/test/refresh-token-state"), ["token": token]))
        return (object["exists"] as? Bool ?? false, object["revoked"] as? Bool ?? false)
    }

    /// What a browser does with an authorization URL: opens it with the test user signed in
    /// (HTTP Basic, which the test project takes at the authorization endpoint alone), and is
    /// sent to the redirect URI. Returns that `Location`, without following it: a custom scheme
    /// is the app's to receive, and nothing listens on a loopback redirect URI here.
    func browse(
        _ authorizationURL: URL, username: String = DjangoOAuthServer.username, password: String = DjangoOAuthServer.password
    )
        async throws -> URL
    {
        var request = URLRequest(url: authorizationURL)
        request.setValue(Self.basic(username, password), forHTTPHeaderField: "Authorization")
        let (_, response) = try await session.data(for: request)
        guard let http = response as? HTTPURLResponse, http.statusCode == 302,
            let location = http.value(forHTTPHeaderField: "Location"), let callback = URL(string: location)
        else {
            throw Failure(description: "the authorization endpoint did not redirect: \((response as? HTTPURLResponse)?.statusCode ?? 0)")
        }
        return callback
    }

    private func form(_ url: URL, _ fields: [String: String]) -> URLRequest {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        request.httpBody = Data(
            fields.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }.joined(separator: "&").utf8)
        return request
    }

    private func json(_ request: URLRequest) async throws -> [String: Any] {
        let (data, _) = try await session.data(for: request)
        guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw Failure(description: "not a JSON object from \(request.url?.path ?? "?")")
        }
        return object
    }

    static func basic(_ user: String, _ password: String) -> String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    /// Refuses every redirect, so the browser sees the authorization endpoint's 302 itself.
    private final class NoRedirects: NSObject, URLSessionTaskDelegate, Sendable {
        func urlSession(
            _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
            newRequest request: URLRequest,
            completionHandler: @escaping @Sendable (URLRequest?) -> Void
        ) {
            completionHandler(nil)
        }
    }
}

/// The server process's lifecycle: started, ready on a port (or exited before that), asked to
/// stop, exited. Events come from the output reader, the termination handler and the test; the
/// server holds this under its lock for the transition only.
struct DjangoServerLifecycle {
    private enum State {
        case starting
        case ready(port: Int, startupMilliseconds: Int)
        case stopping
        case exited(status: Int32, wasReady: Bool)
    }

    /// What a test waiting for the server sees.
    enum Readiness: Equatable, CustomStringConvertible {
        case waiting
        case ready(port: Int, startupMilliseconds: Int)
        case failed(String)

        var description: String {
            switch self {
            case .waiting: "no DOT-READY line before the deadline"
            case .ready(let port, _): "ready on \(port)"
            case .failed(let why): why
            }
        }
    }

    /// What ``stopRequested()`` asks of the server.
    enum StopAction: Equatable {
        /// Close its standard input (then SIGTERM, SIGKILL).
        case stop
        /// It was already asked, or has exited.
        case nothing
    }

    private var state = State.starting
    private var stopWasRequested = false

    var readiness: Readiness {
        switch state {
        case .starting: .waiting
        case .ready(let port, let milliseconds): .ready(port: port, startupMilliseconds: milliseconds)
        case .stopping: .failed("asked to stop")
        case .exited(let status, let wasReady):
            wasReady ? .failed("exited with status \(status)") : .failed("exited with status \(status) before it was ready")
        }
    }

    var exitStatus: Int32? {
        if case .exited(let status, _) = state { return status }
        return nil
    }

    /// The standard output so far: ready once it holds `DOT-READY port=N startup_ms=M`.
    mutating func received(_ output: String) {
        guard case .starting = state, let line = output.split(separator: "\n").first(where: { $0.hasPrefix("DOT-READY ") }) else { return }
        var fields: [Substring: Int] = [:]
        for pair in line.split(separator: " ").dropFirst() {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2, let value = Int(parts[1]) { fields[parts[0]] = value }
        }
        guard let port = fields["port"] else { return }
        state = .ready(port: port, startupMilliseconds: fields["startup_ms"] ?? 0)
    }

    mutating func exited(status: Int32) {
        let wasReady: Bool
        switch state {
        case .ready, .stopping: wasReady = true
        case .starting: wasReady = false
        case .exited: return
        }
        state = .exited(status: status, wasReady: wasReady)
    }

    mutating func stopRequested() -> StopAction {
        guard !stopWasRequested else { return .nothing }
        stopWasRequested = true
        switch state {
        case .starting, .ready:
            state = .stopping
            return .stop
        case .stopping, .exited:
            return .nothing
        }
    }
}
