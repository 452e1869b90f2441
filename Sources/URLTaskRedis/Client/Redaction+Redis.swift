import Foundation

// What `"\(value)"`, `String(reflecting:)`, `dump(_:)`, `Mirror(reflecting:)` and the debugger
// show of the types that hold a Redis password: the settings, and whether a password is set,
// never the password, as URLTaskManager's and URLTaskOAuth2's types show theirs. A synthesized
// description or mirror would show every stored property, the password among them (also one
// read from a `redis://` URL), and a client's or a fleet type's mirror would reach it through
// the client.

extension RedisClient.Configuration: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The endpoint, the user, whether a password is set, the database, the timeouts and the
    /// reply limits; never the password, so a configuration can be logged.
    public var description: String {
        "RedisClient.Configuration(endpoint: \(endpointDescription), username: \(username ?? "none"), "
            + "password: \(password == nil ? "none" : "set"), database: \(database), connectTimeout: \(connectTimeout), "
            + "replyTimeout: \(replyTimeout), reconnectDelay: \(reconnectDelay), maximumReconnectDelay: \(maximumReconnectDelay), "
            + "subscriptionHealthCheckInterval: \(subscriptionHealthCheckInterval), maximumReplyDepth: \(maximumReplyDepth), "
            + "maximumReplySize: \(RESPParser.describe(bytes: maximumReplySize)))"
    }

    /// The same as ``description``: `String(reflecting:)` shows no password either (nor do
    /// `dump(_:)` and the debugger: see ``customMirror``).
    public var debugDescription: String { description }

    /// Every setting as ``description`` shows it: the password as `set` or `none`.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "endpoint": endpoint, "username": username as Any, "password": password == nil ? "none" : "set", "database": database,
                "connectTimeout": connectTimeout, "replyTimeout": replyTimeout, "reconnectDelay": reconnectDelay,
                "maximumReconnectDelay": maximumReconnectDelay, "subscriptionHealthCheckInterval": subscriptionHealthCheckInterval,
                "maximumReplyDepth": maximumReplyDepth, "maximumReplySize": maximumReplySize,
            ], displayStyle: .struct)
    }

    /// `tcp redis.internal:6379`, `unix /run/redis.sock`.
    var endpointDescription: String {
        switch endpoint {
        case .tcp(let host, let port): return "tcp \(host):\(port)"
        case .unixSocket(let path): return "unix \(path)"
        }
    }
}

extension RedisClient: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// `RedisClient(<its configuration>)`: where it connects and how, never the password.
    public var description: String { "RedisClient(\(configuration))" }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// The configuration alone (its own mirror hides the password); the connections' state is
    /// no setting and holds nothing a reader of a dump needs.
    public var customMirror: Mirror {
        Mirror(self, children: ["configuration": configuration], displayStyle: .class)
    }
}

extension FleetCredential: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The key prefix, the lease's life and the client (without its password); never a token.
    public var description: String {
        "FleetCredential(keyPrefix: \(configuration.keyPrefix), leaseTimeToLive: \(configuration.leaseTimeToLive), client: \(client))"
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// The configuration and the client (whose mirror hides the password); not the credential
    /// held, nor the lease's state.
    public var customMirror: Mirror {
        Mirror(self, children: ["configuration": configuration, "client": client], displayStyle: .class)
    }
}

extension FleetRateLimiter: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The rate, the burst, the number of processes and the key prefix; nothing of the Redis
    /// client it talks through.
    public var description: String {
        "FleetRateLimiter(rate: \(policy.rate), burst: \(policy.burst), processCount: \(policy.processCount), keyPrefix: \(policy.keyPrefix))"
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// The policy and the local fallback; not the Redis client (and so not its password).
    public var customMirror: Mirror {
        Mirror(self, children: ["policy": policy, "fallback": fallback], displayStyle: .class)
    }
}
