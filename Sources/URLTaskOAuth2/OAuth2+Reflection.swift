import Foundation
import URLTaskManager

// What `dump(_:)`, `Mirror(reflecting:)` and the debugger show of the kit's types that hold a
// secret: what their `description` shows, field by field. A synthesized mirror would show every
// stored property, the tokens, the client secret and the code verifier among them, although
// `description` hides them.

extension OAuth2Credential: CustomReflectable {
    /// The token lengths, the expiry, the scope and when it was issued; never the tokens.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "accessToken": "<\(accessToken.count) characters>",
                "refreshToken": refreshToken.map { "<\($0.count) characters>" } ?? "nil",
                "expiresAt": expiresAt, "scope": scope as Any, "issuedAt": issuedAt as Any,
            ], displayStyle: .struct)
    }
}

extension OAuth2TokenEndpoint: CustomReflectable {
    /// The URL and the revocation URL (secrets redacted, see `Redaction`), the client ID, whether a client secret is
    /// set, how the client authenticates, the timeout, the late answer's limit and the answer's
    /// size limit; never the secret.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "url": Redaction.standard.url(url), "revocationURL": revocationURL.map { Redaction.standard.url($0) } as Any,
                "clientID": clientID as Any, "clientSecret": clientSecret == nil ? "none" : "set",
                "clientAuthentication": clientAuthentication, "timeout": timeout as Any, "lateAnswerLimit": lateAnswerLimit,
                "answerSizeLimit": answerSizeLimit,
            ], displayStyle: .struct)
    }
}

extension OAuth2AuthorizationRequest: CustomReflectable {
    /// The URL, the state and the redirect URI; the code verifier by its length only (a
    /// secret until the exchange).
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "url": url, "state": state, "codeVerifier": "<\(codeVerifier.count) characters>", "redirectURI": redirectURI,
            ], displayStyle: .struct)
    }
}

extension OAuth2Error: CustomReflectable {
    /// ``description``, the status and a registered error code; the server's free text (an
    /// unregistered code, its `error_description`) by its length only, as ``description``
    /// leaves it out: a server may echo a token in it. Read ``serverDescription`` for it.
    public var customMirror: Mirror {
        var children: [(label: String?, value: Any)] = [("description", description)]
        if case .tokenRequestRejected(let status, _, _, _) = self { children.append(("status", status)) }
        if let code = serverErrorCode {
            children.append(("error", Self.registeredErrorCodes.contains(code) ? code : "<unregistered, \(code.count) characters>"))
        }
        if let text = serverDescription { children.append(("serverDescription", "<\(text.count) characters>")) }
        return Mirror(self, children: children, displayStyle: .enum)
    }
}

extension OAuth2AuthorizationError: CustomReflectable {
    /// ``description`` and a registered error code; the server's free text by its length only.
    public var customMirror: Mirror {
        var children: [(label: String?, value: Any)] = [("description", description)]
        if case .authorizationFailed(let error, let text) = self {
            children.append(
                ("error", OAuth2Error.registeredErrorCodes.contains(error) ? error : "<unregistered, \(error.count) characters>"))
            if let text { children.append(("errorDescription", "<\(text.count) characters>")) }
        }
        return Mirror(self, children: children, displayStyle: .enum)
    }
}
