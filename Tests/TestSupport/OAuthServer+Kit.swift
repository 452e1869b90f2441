import Foundation
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2

/// The OAuth2 kit's view of LoopbackServer's demo OAuth server.
extension OAuthServer {
    package var endpoint: OAuth2TokenEndpoint { OAuth2TokenEndpoint(url: tokenURL, clientID: "tests") }

    /// A credential for `access`, expiring in `expiresIn` seconds by the client's clock.
    package func credential(access: String, refresh: String? = nil, expiresIn: TimeInterval = 3600) -> OAuth2Credential {
        OAuth2Credential(accessToken: access, refreshToken: refresh ?? currentRefresh, expiresAt: Date().addingTimeInterval(expiresIn))
    }
}
