import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking  // URLSession, URLRequest and HTTPURLResponse on Linux
#endif
import URLTaskManager

// An app of the package that depends on URLTaskManager: the library's product and the imports
// of the README's quick start are enough to make a session.
let session: URLSession = URLTaskManager(interceptors: [HeaderInterceptor(["X-Client": "my-app"])]).session
print("MyApp made its session: \(session.configuration.protocolClasses?.count ?? 0) protocol classes")
