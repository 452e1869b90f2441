import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

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

extension URLOrigin {
    /// `URLOrigin(url)?.description`, the name per-host state is kept under, worked out cheaply:
    /// a URL spelled plainly (`http` or `https`, a lowercase ASCII host, an optional port) has it
    /// read from its string in one pass, without parsing it through `URL`'s `scheme`, `host` and
    /// `port` (on Linux each parses the URL, for a part asked on every request; <doc:Performance>,
    /// "Single operations on Linux"); any other spelling goes through ``init(_:)``, so the answer
    /// is the same either way. `nil` for a URL without a scheme or host.
    public static func description(of url: URL?) -> String? {
        guard let url else { return nil }
        return plainDescription(of: url) ?? URLOrigin(url)?.description
    }

    /// `URLOrigin(url)?.description`, read straight from the URL's string when it is spelled
    /// plainly: `http` or `https`, `://`, a host of lowercase ASCII letters, digits, `-` and `.`,
    /// an optional port, then `/`, `?`, `#` or the end. `nil` for any other spelling (a user, a
    /// percent sign, an IPv6 literal, an uppercase letter, another scheme), which the caller then
    /// works out through `URLOrigin`, so the answer is the same either way.
    ///
    /// Why: reading a URL's scheme, host and port through `URL` parses it on Linux (see the
    /// Performance article, "Single operations on Linux"), and a request's origin is asked for up
    /// to three times (the bearer's origin check, the refresh reactor's exemption, the per-host
    /// connection slots).
    static func plainDescription(of url: URL) -> String? {
        var string = url.absoluteString
        return string.withUTF8 { bytes -> String? in
            let count = bytes.count
            let scheme: (secure: Bool, defaultPort: Int, end: Int)
            if count >= 7, bytes[0] == UInt8(ascii: "h"), bytes[1] == UInt8(ascii: "t"), bytes[2] == UInt8(ascii: "t"),
                bytes[3] == UInt8(ascii: "p")
            {
                if bytes[4] == UInt8(ascii: ":") {
                    scheme = (false, 80, 4)
                } else if bytes[4] == UInt8(ascii: "s"), count >= 8, bytes[5] == UInt8(ascii: ":") {
                    scheme = (true, 443, 5)
                } else {
                    return nil
                }
            } else {
                return nil
            }
            guard bytes[scheme.end + 1] == UInt8(ascii: "/"), scheme.end + 2 < count, bytes[scheme.end + 2] == UInt8(ascii: "/") else {
                return nil
            }
            let hostStart = scheme.end + 3
            var index = hostStart
            var hostEnd: Int?
            var port = 0
            var portDigits = 0
            while index < count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "/") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#") { break }
                if hostEnd == nil {
                    switch byte {
                    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."):
                        break
                    case UInt8(ascii: ":"):
                        hostEnd = index
                    default:
                        return nil
                    }
                } else {
                    // No leading zero: `:080` is port 80 spelled another way, left to `URL`.
                    guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte), portDigits < 5,
                        portDigits > 0 || byte != UInt8(ascii: "0")
                    else { return nil }
                    port = port * 10 + Int(byte - UInt8(ascii: "0"))
                    portDigits += 1
                }
                index += 1
            }
            let end = hostEnd ?? index
            guard end > hostStart, hostEnd == nil || portDigits > 0 else { return nil }
            // Written byte by byte into one new string: appending the four parts cost more than
            // the whole parse.
            let portValue = hostEnd == nil ? scheme.defaultPort : port
            var digits = 1
            var rest = portValue
            while rest >= 10 {
                rest /= 10
                digits += 1
            }
            let length = scheme.end + 3 + (end - hostStart) + 1 + digits
            return String(unsafeUninitializedCapacity: length) { out in
                // `scheme://host` as the URL spells it, then `:` and the port.
                var written = 0
                for index in 0..<end {
                    out[written] = bytes[index]
                    written += 1
                }
                out[written] = UInt8(ascii: ":")
                written += digits + 1
                var value = portValue
                for position in stride(from: written - 1, to: written - 1 - digits, by: -1) {
                    out[position] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                }
                return written
            }
        }
    }
}

extension URLOrigin {
    /// The key requests share connection slots under: scheme, host and port, as URLSession pools
    /// connections (``description(of:)``; `""` for a URL without a scheme or host).
    static func slotKey(of request: URLRequest) -> String {
        description(of: request.url) ?? ""
    }
}
