import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import URLTaskManager
import URLTaskResilience
import URLTaskOAuth2

// DocC authentication: begin
/// What an app keeps for one OAuth2 backend: the session it uses, and the authenticator it
/// signs in with. Every request through `session` gets the bearer token (only on `api`'s
/// origin), is held while the token is renewed, and is resent after a 401 once it has been.
struct APIClient: Sendable {
    let session: URLSession
    let auth: OAuth2Authenticator
    let tokenEndpoint: OAuth2TokenEndpoint

    init(
        api: URL, tokenURL: URL, store: any CredentialStore = InMemoryCredentialStore(),
        showLogin: @escaping @Sendable () async -> Void = {}
    ) {
        tokenEndpoint = OAuth2TokenEndpoint(url: tokenURL, clientID: "example-app")
        auth = OAuth2Authenticator(
            origins: [api],
            tokenEndpoint: tokenEndpoint,
            store: store,
            onRefreshFailure: { _ in await showLogin() }  // once per failed refresh, not per request
        )
        session =
            URLTaskManager(
                interceptors: [BearerInterceptor(authenticator: auth)],
                reactors: [OAuth2RefreshReactor(authenticator: auth), RetryReactor()]
            ).session
    }

    func signIn(username: String, password: String) async throws {
        try await auth.signIn(tokenEndpoint.signIn(username: username, password: password))
    }
}
// DocC authentication: end

/// Runs `count` GETs of `url` at once; returns each one's status code, or its error.
func concurrentGETs(_ session: URLSession, _ url: URL, count: Int) async -> [Result<Int, any Error>] {
    await withTaskGroup(of: Result<Int, any Error>.self) { group in
        for _ in 0..<count {
            group.addTask {
                do {
                    let (_, response) = try await session.data(from: url)
                    return .success((response as? HTTPURLResponse)?.statusCode ?? 0)
                } catch {
                    return .failure(error)
                }
            }
        }
        return await group.reduce(into: []) { $0.append($1) }
    }
}

/// Whether `stream` yields an element within `timeout`.
func first(of stream: AsyncStream<Void>, within timeout: Duration) async -> Bool {
    await withTaskGroup(of: Bool.self) { group in
        group.addTask {
            for await _ in stream { return true }
            return false
        }
        group.addTask {
            try? await Task.sleep(for: timeout)  // the deadline, not a synchronisation
            return false
        }
        let result = await group.next() ?? false
        group.cancelAll()
        return result
    }
}

/// Counts calls from any thread (server handlers, hooks).
final class Counter: @unchecked Sendable {  // `count` is guarded by `lock`.
    private let lock = NSLock()
    private var count = 0

    var value: Int { lock.withLock { count } }

    @discardableResult
    func next() -> Int {
        lock.withLock {
            count += 1
            return count
        }
    }
}
