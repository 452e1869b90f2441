// 0.2.0's documented patterns over `OAuth2Error`, whose `tokenRequestRejected` and
// `invalidTokenResponse` have one more associated value since 0.3.0 (`url:`). Swift cannot be
// given a message for a pattern (an overload or an unavailable declaration of the same name
// changes nothing: a pattern resolves to the enum case), and for an `if case` or `guard case`
// it fails to produce any diagnostic. scripts/check-migration.sh builds this target and checks
// that it fails with exactly the diagnostics written under each form, which the "Migrating from
// 0.2" article quotes with the code to write instead (Tests/Migration/After/main.swift).
import Foundation
import URLTaskOAuth2

func serverCode(of error: any Error) -> String? {
    if case .tokenRequestRejected(_, let code?, _)? = error as? OAuth2Error { return code }
    // error: failed to produce diagnostic for expression; please submit a bug report (https://swift.org/contributing/#reporting-bugs)
    return nil
}

func isRefusedGrant(_ oauth: OAuth2Error) -> Bool {
    if case .tokenRequestRejected(400, "invalid_grant", _) = oauth { return true }
    // error: failed to produce diagnostic for expression; please submit a bug report (https://swift.org/contributing/#reporting-bugs)
    return false
}

func status(of oauth: OAuth2Error) -> Int? {
    guard case .tokenRequestRejected(let status, _, _) = oauth else { return nil }
    // error: failed to produce diagnostic for expression; please submit a bug report (https://swift.org/contributing/#reporting-bugs)
    return status
}

func summary(of oauth: OAuth2Error) -> String {
    switch oauth {
    case .tokenRequestRejected(let status, let code, _): return "\(status) \(code ?? "-")"
    // error: tuple pattern has the wrong length for tuple type '(status: Int, error: String?, description: String?, url: URL?)'
    case .invalidTokenResponse(let reason): return reason
    // warning: enum case 'invalidTokenResponse' has 2 associated values; matching them as a tuple is deprecated [#deprecation]
    // error: cannot convert return expression of type '(reason: String, url: URL?)' to return type 'String'
    default: return "\(oauth)"
    }
}

_ = (serverCode, isRefusedGrant, status, summary)
