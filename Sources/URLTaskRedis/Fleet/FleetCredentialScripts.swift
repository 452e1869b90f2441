import Foundation
import URLTaskOAuth2

/// The Redis keys of one fleet credential, all under its prefix.
struct FleetCredentialKeys: Sendable {
    /// A hash: `fence` (the fence of the last write) and `credential` (its JSON; absent when
    /// signed out).
    let record: String
    /// The lease: `SET NX PX`, its value the holder's random token.
    let lease: String
    /// The fence counter (`INCR`).
    let fence: String
    /// The pub/sub channel announcing each write's fence (never the credential).
    let channel: String

    init(prefix: String) {
        record = prefix + ":credential"
        lease = prefix + ":lease"
        fence = prefix + ":fence"
        channel = prefix + ":updated"
    }
}

/// The Lua scripts of a fleet credential: each decision that must see and change Redis at once.
enum FleetCredentialScripts {
    /// Takes the lease if it is free, and with it the next fence (kept above the stored record's
    /// and above the newest the caller has seen, should Redis have lost the counter and the
    /// record: a process that still owes Redis an older credential then cannot restore it over
    /// the one this holder writes); returns the record in the same round trip. Takes no
    /// lease when the record holds a credential newer than the fence the caller knows: another
    /// process renewed it already.
    ///
    /// KEYS: lease, fence counter, record. ARGV: token, time to live in ms, known fence.
    /// Returns `{1, fence, recordFence, recordJSON}`, `{0, leaseMillisecondsLeft, recordFence,
    /// recordJSON}` or `{2, 0, recordFence, recordJSON}` (newer, no lease taken).
    static let acquire = RedisScript(
        """
        local rec = redis.call('HMGET', KEYS[3], 'fence', 'credential')
        local stored = tonumber(rec[1] or '0')
        if stored > tonumber(ARGV[3]) and rec[2] then
          return {2, 0, rec[1], rec[2]}
        end
        if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
          local f = redis.call('INCR', KEYS[2])
          local floor = math.max(stored, tonumber(ARGV[3]))
          if f <= floor then
            f = floor + 1
            redis.call('SET', KEYS[2], f)
          end
          return {1, f, rec[1], rec[2]}
        end
        return {0, redis.call('PTTL', KEYS[1]), rec[1], rec[2]}
        """)

    /// The holder's write: refused when the stored fence is not below the holder's (a later
    /// holder or a sign-in wrote); announces the fence; releases the lease if the token still
    /// holds it.
    ///
    /// KEYS: record, lease. ARGV: fence, credential JSON, token, channel.
    /// Returns `{1, fence}` or `{0, storedFence, storedJSON}`.
    static let commit = RedisScript(
        """
        local rec = redis.call('HMGET', KEYS[1], 'fence', 'credential')
        local stored = tonumber(rec[1] or '0')
        local result
        if stored < tonumber(ARGV[1]) then
          redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'credential', ARGV[2])
          redis.call('PUBLISH', ARGV[4], ARGV[1])
          result = {1, tonumber(ARGV[1])}
        else
          result = {0, stored, rec[2]}
        end
        if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
        return result
        """)

    /// Deletes the lease if the token still holds it (a holder whose lease expired must not
    /// delete its successor's).
    ///
    /// KEYS: lease. ARGV: token.
    static let release = RedisScript(
        """
        if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
        return 0
        """)

    /// A write owed by a process (see `FleetCredentialStateMachine.Pending.Kind`):
    /// `refreshed` (ARGV[2] the base fence) is refused if a record newer than the base was
    /// written since, and takes a new fence; `restore` (ARGV[2] its own fence) writes the record
    /// Redis lost with its fence unless Redis holds that fence or a newer one; `replace` (a
    /// sign-in or sign-out) always writes, with a new fence. The counter never falls behind a
    /// fence written.
    ///
    /// KEYS: record, fence counter. ARGV: kind, number, credential JSON (empty: signed out),
    /// channel. Returns `{1, fence}` or `{0, storedFence, storedJSON}`.
    static let write = RedisScript(
        """
        local rec = redis.call('HMGET', KEYS[1], 'fence', 'credential')
        local stored = tonumber(rec[1] or '0')
        local n = tonumber(ARGV[2])
        local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
        local fence
        if ARGV[1] == 'restore' then
          if stored >= n then return {0, stored, rec[2]} end
          fence = n
        elseif ARGV[1] == 'refreshed' then
          if stored > n then return {0, stored, rec[2]} end
          fence = math.max(counter, stored, n) + 1
        else
          fence = math.max(counter, stored) + 1
        end
        redis.call('SET', KEYS[2], math.max(counter, fence))
        if ARGV[3] == '' then
          redis.call('HDEL', KEYS[1], 'credential')
          redis.call('HSET', KEYS[1], 'fence', fence)
        else
          redis.call('HSET', KEYS[1], 'fence', fence, 'credential', ARGV[3])
        end
        redis.call('PUBLISH', ARGV[4], fence)
        return {1, fence}
        """)

    /// The script arguments of `pending`'s write.
    static func writeArguments(_ pending: FleetCredentialStateMachine.Pending, channel: String) throws -> [String] {
        let json = try pending.credential.map(encode) ?? ""
        switch pending.kind {
        case .refreshed(let base): return ["refreshed", String(base), json, channel]
        case .restore(let fence): return ["restore", String(fence), json, channel]
        case .replace: return ["replace", "0", json, channel]
        }
    }

    // MARK: Values

    static func encode(_ credential: OAuth2Credential) throws -> String {
        String(decoding: try JSONEncoder().encode(credential), as: UTF8.self)
    }

    /// The record from a fence and a credential's JSON as Redis returned them (`nil`: nothing stored).
    static func record(fence: RESPValue?, json: RESPValue?) throws -> FleetCredentialStateMachine.Record? {
        guard let fence = integer(fence) else { return nil }
        guard let data = bytes(json) else { return .init(fence: fence, credential: nil) }
        do {
            return .init(fence: fence, credential: try JSONDecoder().decode(OAuth2Credential.self, from: data))
        } catch {
            // Not echoed: the bytes may hold a token.
            throw RedisError(kind: .protocolViolation, message: "the fleet's stored credential is not a credential's JSON")
        }
    }

    /// The elements of an array reply (a script's table), or a protocol violation.
    static func elements(_ value: RESPValue) throws -> [RESPValue] {
        guard case .array(let items?) = value else {
            throw RedisError(kind: .protocolViolation, message: "a fleet credential script answered something other than an array")
        }
        return items
    }

    static func integer(_ value: RESPValue?) -> Int64? {
        guard let value else { return nil }
        switch value {
        case .integer(let number): return number
        case .bulkString(let data): return data.flatMap { Int64(String(decoding: $0, as: UTF8.self)) }
        case .simpleString(let text): return Int64(text)
        default: return nil
        }
    }

    static func bytes(_ value: RESPValue?) -> Data? {
        guard let value else { return nil }
        switch value {
        case .bulkString(let data): return data
        case .simpleString(let text): return Data(text.utf8)
        default: return nil
        }
    }
}
