import Foundation

/// The scheme, host and port of a URL, as URLSession pools connections: the key a part keeps
/// per-host state under (a circuit, a rate-limit bucket, an offline hold), and the name its
/// events and errors give the host.
///
/// Requests to one origin share connections and, usually, one server's health and limits;
/// requests to another port or scheme of the same host name do not. Two URLs are the same
/// origin when their schemes and hosts are equal ignoring case and their ports are equal, a
/// missing port being the scheme's default (80 for `http`, 443 for `https`): `http://H:80/a`
/// and `http://h/b` are one origin, `http://h:8080` and `https://h` are two others. Paths,
/// queries, users and fragments do not count.
///
/// The built-in `CircuitBreaker`, `RateLimiter` and `OfflineHold` key their state by it;
/// a part of your own that does the same agrees with them on what a host is.
public struct URLOrigin: Hashable, Sendable, CustomStringConvertible {
    /// The scheme, lowercased (`https`).
    public let scheme: String
    /// The host, lowercased (`api.example.com`).
    public let host: String
    /// The port: the URL's own, or the scheme's default; `nil` for a scheme without a known
    /// default and no port in the URL.
    public let port: Int?

    /// The origin of `url`; `nil` when it has no scheme or host (a relative or `data:` URL),
    /// so there is no host to keep state for.
    public init?(_ url: URL?) {
        guard let url, let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty else {
            return nil
        }
        self.scheme = scheme
        self.host = host
        self.port = url.port ?? Self.defaultPort(scheme)
    }

    /// `scheme://host:port` (`https://api.example.com:443`; port 0 when unknown): the name the
    /// built-in parts' events and errors give the host.
    public var description: String {
        "\(scheme)://\(host):\(port ?? 0)"
    }

    private static func defaultPort(_ scheme: String) -> Int? {
        switch scheme {
        case "http": 80
        case "https": 443
        default: nil
        }
    }
}
