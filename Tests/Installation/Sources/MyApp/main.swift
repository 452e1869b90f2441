import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking  // URLSession, URLRequest and HTTPURLResponse on Linux
#endif
import URLTaskManager
import URLTaskOAuth2
import URLTaskRedis
import URLTaskResilience

// An app of the package that depends on URLTaskManager: the library's products and the imports
// of the README's quick start are enough to make a session with a token and retries (and, with
// URLTaskRedis, to name a fleet's parts).
let endpoint = OAuth2TokenEndpoint(url: URL(string: "https://auth.example.com/token")!, clientID: "my-app")
let auth = OAuth2Authenticator(origins: [URL(string: "https://api.example.com")!], tokenEndpoint: endpoint)
let session: URLSession = URLTaskManager(
    interceptors: [HeaderInterceptor(["X-Client": "my-app"]), BearerInterceptor(authenticator: auth)],
    reactors: [OAuth2RefreshReactor(authenticator: auth), RetryReactor()]
).session
print("MyApp made its session: \(session.configuration.protocolClasses?.count ?? 0) protocol classes")
print("MyApp can name a fleet's credential: \(FleetCredential.self)")
