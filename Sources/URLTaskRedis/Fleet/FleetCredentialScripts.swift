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
    /// The record's fields, in the order every script and read returns them after its own
    /// leading numbers: the fence, the credential's JSON, the in-flight mark (the fingerprint of
    /// the refresh token a holder took the lease to send, and how many holders did), the
    /// fingerprint of a refused refresh token.
    static let recordFields = ["fence", "credential", "inflight", "inflight_sends", "refused"]

    /// Removes the refresh token's marks: a new credential's write, in the scripts below.
    private static let clearMarks = "redis.call('HDEL', KEYS[1], 'inflight', 'inflight_holder', 'inflight_sends', 'refused')"

    /// Takes the lease if it is free (or is already the caller's: a first attempt whose reply was
    /// lost to a slow Redis), and with it the next fence (kept above the stored record's and
    /// above the newest the caller has seen, should Redis have lost the counter and the record: a
    /// process that still owes Redis an older credential then cannot restore it over the one this
    /// holder writes); marks the refresh token the holder will send as in flight, counting the
    /// holders that took the lease for it; returns the record in the same round trip. Takes no
    /// lease when the record holds a credential newer than the fence the caller knows (another
    /// process renewed it already), or when the token the caller would send was refused.
    ///
    /// KEYS: lease, fence counter, record. ARGV: token, time to live in ms, known fence, the
    /// fingerprint of the refresh token to send.
    /// Returns `{status, number, sends, <recordFields>}`: status 1 (lease taken, number the
    /// fence, sends the holders of this token so far), 0 (held by another for number more ms),
    /// 2 (newer, no lease) or 3 (refused, no lease).
    static let acquire = RedisScript(
        """
        local rec = redis.call('HMGET', KEYS[3], 'fence', 'credential', 'inflight', 'inflight_sends', 'refused', 'inflight_holder')
        local stored = tonumber(rec[1] or '0')
        local fields = {rec[1], rec[2], rec[3], rec[4], rec[5]}
        if stored > tonumber(ARGV[3]) and rec[2] then
          return {2, 0, 0, unpack(fields)}
        end
        if rec[5] and rec[5] == ARGV[4] then
          return {3, 0, 0, unpack(fields)}
        end
        local mine = redis.call('GET', KEYS[1]) == ARGV[1]
        if mine then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
        if mine or redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
          local f = redis.call('INCR', KEYS[2])
          local floor = math.max(stored, tonumber(ARGV[3]))
          if f <= floor then
            f = floor + 1
            redis.call('SET', KEYS[2], f)
          end
          local sends = 1
          if rec[3] == ARGV[4] then
            sends = tonumber(rec[4] or '1')
            if rec[6] ~= ARGV[1] then sends = sends + 1 end
          end
          redis.call('HSET', KEYS[3], 'inflight', ARGV[4], 'inflight_holder', ARGV[1], 'inflight_sends', sends)
          return {1, f, sends, unpack(fields)}
        end
        return {0, redis.call('PTTL', KEYS[1]), 0, unpack(fields)}
        """)

    /// The holder's write: refused when the stored fence is not below the holder's (a later
    /// holder or a sign-in wrote); clears the refresh token's marks, announces the fence;
    /// releases the lease if the token still holds it.
    ///
    /// KEYS: record, lease. ARGV: fence, credential JSON, token, channel.
    /// Returns `{1, fence}` or `{0, <recordFields>}`.
    static let commit = RedisScript(
        """
        local rec = redis.call('HMGET', KEYS[1], 'fence', 'credential', 'inflight', 'inflight_sends', 'refused')
        local stored = tonumber(rec[1] or '0')
        local result
        if stored < tonumber(ARGV[1]) then
          \(clearMarks)
          redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'credential', ARGV[2])
          redis.call('PUBLISH', ARGV[4], ARGV[1])
          result = {1, tonumber(ARGV[1])}
        else
          result = {0, rec[1], rec[2], rec[3], rec[4], rec[5]}
        end
        if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
        return result
        """)

    /// Deletes the lease if the token still holds it (a holder whose lease expired must not
    /// delete its successor's), and the in-flight mark the holder set: it did not send the token,
    /// or knows how its request ended.
    ///
    /// KEYS: lease, record. ARGV: token.
    static let release = RedisScript(
        """
        if redis.call('HGET', KEYS[2], 'inflight_holder') == ARGV[1] then
          redis.call('HDEL', KEYS[2], 'inflight', 'inflight_holder', 'inflight_sends')
        end
        if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
        return 0
        """)

    /// Records that the token endpoint refused the refresh token with this fingerprint (or that
    /// it is presumed spent), unless a record newer than the refresh's base was written since;
    /// announces it (`refused:<fence>`) and releases the caller's lease.
    ///
    /// KEYS: record, lease. ARGV: fingerprint, base fence, channel, token.
    /// Returns `{1}` or `{0, <recordFields>}`.
    static let refuse = RedisScript(
        """
        local rec = redis.call('HMGET', KEYS[1], 'fence', 'credential', 'inflight', 'inflight_sends', 'refused')
        local stored = tonumber(rec[1] or '0')
        if stored > tonumber(ARGV[2]) then
          return {0, rec[1], rec[2], rec[3], rec[4], rec[5]}
        end
        redis.call('HDEL', KEYS[1], 'inflight', 'inflight_holder', 'inflight_sends')
        redis.call('HSET', KEYS[1], 'refused', ARGV[1])
        redis.call('PUBLISH', ARGV[3], 'refused:' .. stored)
        if redis.call('GET', KEYS[2]) == ARGV[4] then redis.call('DEL', KEYS[2]) end
        return {1}
        """)

    /// A write owed by a process (see `FleetCredentialStateMachine.Pending.Kind`):
    /// `refreshed` (ARGV[2] the base fence) is refused if a record newer than the base was
    /// written since, and takes a new fence; `restore` (ARGV[2] its own fence) writes the record
    /// Redis lost with its fence unless Redis holds that fence or a newer one; `replace` (a
    /// sign-in or sign-out) always writes, with a new fence. The counter never falls behind a
    /// fence written.
    ///
    /// KEYS: record, fence counter. ARGV: kind, number, credential JSON (empty: signed out),
    /// channel. Returns `{1, fence}` or `{0, storedFence, storedJSON}`; a write of no credential
    /// (a sign-out) announces `signed-out:<fence>` and returns `{1, fence, storedFence,
    /// storedJSON}`, what it replaced (for the revocation of the process that signed out).
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
        \(clearMarks)
        if ARGV[3] == '' then
          redis.call('HDEL', KEYS[1], 'credential')
          redis.call('HSET', KEYS[1], 'fence', fence)
        else
          redis.call('HSET', KEYS[1], 'fence', fence, 'credential', ARGV[3])
        end
        if ARGV[3] == '' then
          redis.call('PUBLISH', ARGV[4], 'signed-out:' .. fence)
          return {1, fence, rec[1], rec[2]}
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

    /// The record from its fields as Redis returned them, starting at `offset` of `reply`
    /// (``recordFields``; `nil`: nothing stored).
    static func record(_ reply: [RESPValue], at offset: Int) throws -> FleetCredentialStateMachine.Record? {
        func field(_ index: Int) -> RESPValue? { reply.indices.contains(offset + index) ? reply[offset + index] : nil }
        guard let fence = integer(field(0)) else { return nil }
        var record = FleetCredentialStateMachine.Record(fence: fence, credential: nil)
        if let data = bytes(field(1)) {
            do {
                record.credential = try JSONDecoder().decode(OAuth2Credential.self, from: data)
            } catch {
                // Not echoed: the bytes may hold a token.
                throw RedisError(kind: .protocolViolation, message: "the fleet's stored credential is not a credential's JSON")
            }
        }
        if let fingerprint = bytes(field(2)).map({ String(decoding: $0, as: UTF8.self) }) {
            record.inFlight = .init(fingerprint: fingerprint, sends: Int(integer(field(3)) ?? 1))
        }
        record.refused = bytes(field(4)).map { String(decoding: $0, as: UTF8.self) }
        return record
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
