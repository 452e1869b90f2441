import Foundation
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskOAuth2

/// The OAuth2 kit's view of LoopbackServer's demo OAuth server.
extension OAuthServer {
    var endpoint: OAuth2TokenEndpoint { OAuth2TokenEndpoint(url: tokenURL, clientID: "tests") }

    /// A credential for `access`, expiring in `expiresIn` seconds by the client's clock.
    func credential(access: String, refresh: String? = nil, expiresIn: TimeInterval = 3600) -> OAuth2Credential {
        OAuth2Credential(accessToken: access, refreshToken: refresh ?? currentRefresh, expiresAt: Date().addingTimeInterval(expiresIn))
    }
}
