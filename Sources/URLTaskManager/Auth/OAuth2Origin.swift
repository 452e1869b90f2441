import Foundation

/// A scheme, host and port a credential may be sent to.
///
/// A bearer token is as good as a password to whoever receives it, so it is sent only to the
/// exact origins it was issued for: `https://api.example.com` does not cover
/// `http://api.example.com` (the token would cross the network in clear),
/// `https://api.example.com:8443`, or `https://evil.api.example.com`.
struct OAuth2Origin: Hashable, Sendable {
    let scheme: String
    let host: String
    let port: Int?

    init?(_ url: URL) {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty else { return nil }
        self.scheme = scheme
        self.host = host
        self.port = url.port ?? Self.defaultPort(scheme)
    }

    private static func defaultPort(_ scheme: String) -> Int? {
        switch scheme {
        case "http": 80
        case "https": 443
        default: nil
        }
    }
}

extension OAuth2Origin {
    /// The key requests share connections under, as URLSession pools them: the
    /// ``URLOrigin``'s description; `""` for a URL without a host. The per-host connection
    /// slots are keyed by it.
    static func poolKey(of url: URL?) -> String {
        if let url, let plain = URLOrigin.plainDescription(of: url) { return plain }
        return URLOrigin(url)?.description ?? ""
    }

    /// `scheme://host:port`, as ``URLOrigin/description`` spells it: what
    /// ``URLOrigin/plainDescription(of:)`` is compared with.
    var key: String {
        "\(scheme)://\(host):\(port ?? 0)"
    }

    /// Whether `url`'s origin is this one (`OAuth2Origin(url) == self`), from the URL's string
    /// when it is spelled plainly (see ``URLOrigin/plainDescription(of:)``).
    func matches(_ url: URL, key: String) -> Bool {
        if let plain = URLOrigin.plainDescription(of: url) { return plain == key }
        return OAuth2Origin(url) == self
    }
}
