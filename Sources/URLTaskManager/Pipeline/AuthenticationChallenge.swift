import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// HTTP authentication challenges (a 401 with `WWW-Authenticate: Basic`), answered inside the
/// pipeline.
///
/// Left to the caller's session, corelibs answers the challenge itself and resends the request
/// through its own protocol, past the interceptors and reactors, whatever the toolchain. So the
/// bridge asks the caller's delegate before the 401 reaches the session: a credential sends the
/// request again through the pipeline, with its `Authorization: Basic` header; otherwise the
/// caller gets the 401, without the `WWW-Authenticate` header that would make its session
/// challenge again (asking the delegate a second time, then, without a credential, never
/// completing the task on 6.3.1, or completing it with the 401 from 6.3.2: corelibs #5457,
/// pinned by `testCorelibs5457_A401WithoutCredentialCompletes`).
enum AuthenticationChallenge {
    /// Whether `response` is a 401 with a challenge corelibs would raise (Basic or Digest).
    static func isChallenge(_ response: HTTPURLResponse) -> Bool {
        guard response.statusCode == 401 else { return false }
        return schemeAndRealm(response) != nil
    }

    /// The challenge the caller's delegate sees: the protection space of the response's
    /// origin and realm, proposing the credential storage's default for it, if any.
    static func make(for response: HTTPURLResponse, previousFailureCount: Int, storage: URLCredentialStorage?) -> URLAuthenticationChallenge
    {
        let (method, realm) = schemeAndRealm(response) ?? (NSURLAuthenticationMethodHTTPBasic, nil)
        let origin = URLOrigin(response.url)
        let space = URLProtectionSpace(
            host: origin?.host ?? "",
            port: origin?.port ?? 0,
            protocol: origin?.scheme ?? "http",
            realm: realm,
            authenticationMethod: method
        )
        return URLAuthenticationChallenge(
            protectionSpace: space,
            proposedCredential: storage.flatMap { storedCredential(for: space, in: $0) },
            previousFailureCount: previousFailureCount,
            failureResponse: response,
            error: nil,
            sender: UnusedChallengeSender()
        )
    }

    /// The credential `storage` keeps for `space`: its default, else the first by user name (as
    /// URLSession picks one). corelibs compares protection spaces by identity, so a credential
    /// stored for a space the app built itself is never found for the one built from a 401
    /// (URLSession's own lookup misses it too, and then waits on 6.3.1 for an answer that never
    /// comes): the space is looked up by value, as Apple's URLProtectionSpace compares, among
    /// the spaces the storage holds, and then asked for by the instance it holds.
    static func storedCredential(for space: URLProtectionSpace, in storage: URLCredentialStorage) -> URLCredential? {
        if let credential = storage.defaultCredential(for: space) { return credential }
        for (stored, credentials) in storage.allCredentials where sameSpace(stored, space) {
            if let credential = storage.defaultCredential(for: stored) { return credential }
            if let user = credentials.keys.sorted().first { return credentials[user] }
        }
        return nil
    }

    /// Whether two protection spaces are the same by value: host (any case), port (a default
    /// port spelled or not), protocol, realm and method (`NSURLAuthenticationMethodDefault`
    /// meaning Basic, as for HTTP).
    static func sameSpace(_ a: URLProtectionSpace, _ b: URLProtectionSpace) -> Bool {
        func port(_ space: URLProtectionSpace) -> Int {
            guard space.port == 0 else { return space.port }
            return space.protocol?.lowercased() == "https" ? 443 : 80
        }
        func method(_ space: URLProtectionSpace) -> String {
            space.authenticationMethod == NSURLAuthenticationMethodDefault ? NSURLAuthenticationMethodHTTPBasic : space.authenticationMethod
        }
        return a.host.lowercased() == b.host.lowercased() && port(a) == port(b) && a.protocol?.lowercased() == b.protocol?.lowercased()
            && a.realm == b.realm && method(a) == method(b)
    }

    /// What the pipeline does with the delegate's answer: resend `request` with a Basic
    /// credential, deliver the 401, or cancel (as URLSession does for
    /// `.cancelAuthenticationChallenge` and `.rejectProtectionSpace`).
    static func answer(
        _ disposition: URLSession.AuthChallengeDisposition,
        credential: URLCredential?,
        to challenge: URLAuthenticationChallenge,
        response: HTTPURLResponse,
        request: URLRequest
    ) -> TaskStateMachine.ChallengeAnswer {
        let chosen: URLCredential?
        switch disposition {
        case .useCredential:
            chosen = credential
        case .performDefaultHandling:
            // As URLSession: the stored default, once; after it failed, the 401.
            chosen = challenge.previousFailureCount == 0 ? challenge.proposedCredential : nil
        case .cancelAuthenticationChallenge, .rejectProtectionSpace:
            return .fail(URLError.cancelled(url: request.url))
        @unknown default:
            chosen = nil
        }
        guard let chosen, let user = chosen.user, let password = chosen.password,
            challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodHTTPBasic
        else { return .deliver(withoutChallenge(response)) }
        var resend = request
        resend.setValue("Basic " + Data("\(user):\(password)".utf8).base64EncodedString(), forHTTPHeaderField: "Authorization")
        return .resend(resend)
    }

    /// `response` without its `WWW-Authenticate` header.
    static func withoutChallenge(_ response: HTTPURLResponse) -> HTTPURLResponse {
        var fields: [String: String] = [:]
        for (name, value) in response.allHeaderFields {
            guard let name = name as? String, let value = value as? String,
                name.caseInsensitiveCompare("WWW-Authenticate") != .orderedSame
            else { continue }
            fields[name] = value
        }
        guard let url = response.url,
            let stripped = HTTPURLResponse(url: url, statusCode: response.statusCode, httpVersion: "HTTP/1.1", headerFields: fields)
        else { return response }
        return stripped
    }

    /// The authentication method and realm of the first Basic or Digest challenge.
    private static func schemeAndRealm(_ response: HTTPURLResponse) -> (String, String?)? {
        guard let header = response.value(forHTTPHeaderField: "WWW-Authenticate") else { return nil }
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        let scheme = trimmed.prefix { !$0.isWhitespace }.lowercased()
        let method: String
        switch scheme {
        case "basic": method = NSURLAuthenticationMethodHTTPBasic
        case "digest": method = NSURLAuthenticationMethodHTTPDigest
        default: return nil
        }
        var realm: String?
        if let range = trimmed.range(of: "realm=", options: .caseInsensitive) {
            let rest = trimmed[range.upperBound...]
            if rest.hasPrefix("\"") {
                realm = String(rest.dropFirst().prefix { $0 != "\"" })
            } else {
                realm = String(rest.prefix { $0 != "," && !$0.isWhitespace })
            }
        }
        return (method, realm)
    }
}

/// The challenge's sender: URLSession delegates answer through their completion handler, so
/// nothing ever calls it.
private final class UnusedChallengeSender: NSObject, URLAuthenticationChallengeSender {
    func use(_ credential: URLCredential, for challenge: URLAuthenticationChallenge) {}
    func continueWithoutCredential(for challenge: URLAuthenticationChallenge) {}
    func cancel(_ challenge: URLAuthenticationChallenge) {}
    func performDefaultHandling(for challenge: URLAuthenticationChallenge) {}
    func rejectProtectionSpaceAndContinue(with challenge: URLAuthenticationChallenge) {}
}
