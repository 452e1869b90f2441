import Foundation

/// The Lua scripts a ``FleetRateLimiter`` runs in Redis, and what their replies mean.
///
/// The bucket is GCRA (the generic cell rate algorithm): one number per host, the theoretical
/// arrival time (TAT) of the next request, in microseconds of the Redis server's clock (`TIME`
/// inside the script, so the processes' own clocks never matter). A request may go when
/// `now >= TAT - tolerance`, where `tolerance = (burst - 1) × interval`: after a quiet spell
/// `burst` go at once, then one per `interval = 1 / rate`, as the local token bucket does. The
/// key expires (`PX`) when the bucket would be full again, so a quiet host keeps nothing.
///
/// `TIME` makes a script non-deterministic: Redis 5 and later replicate a script's effects
/// (the `SET` it made), not the script, so it is allowed; on 3.2 and 4 the script asks for
/// that itself (`redis.replicate_commands()`).
enum FleetRateLimitScripts {
    /// KEYS[1] the host's TAT, KEYS[2] the host's pause; ARGV[1] the interval and ARGV[2] the
    /// tolerance, in µs. Returns `{waitMs, paused}`: `{0, 0}` the request goes (its turn was
    /// taken); `{n, 1}` a server's pause has `n` ms left; `{n, 0}` the next turn comes in `n` ms.
    static let take = RedisScript(
        """
        if redis.replicate_commands then redis.replicate_commands() end
        local pause = redis.call('PTTL', KEYS[2])
        if pause > 0 then return {pause, 1} end
        local time = redis.call('TIME')
        local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
        local interval = tonumber(ARGV[1])
        local tolerance = tonumber(ARGV[2])
        local tat = tonumber(redis.call('GET', KEYS[1])) or now
        if tat < now then tat = now end
        local allowAt = tat - tolerance
        if now < allowAt then
          return {math.ceil((allowAt - now) / 1000), 0}
        end
        local newTat = tat + interval
        redis.call('SET', KEYS[1], string.format('%.0f', newTat), 'PX', math.max(1, math.ceil((newTat - now) / 1000)))
        return {0, 0}
        """)

    /// KEYS[1] the host's pause, KEYS[2] the host's TAT; ARGV[1] the pause in ms, ARGV[2] the
    /// tolerance in µs. Sets the pause unless a longer one is in force, and spends what is left
    /// of the burst (the TAT moves to at least `now + tolerance`: one turn left, as the local
    /// bucket keeps one token), so the bucket refills over the pause as over any idle time: when
    /// the pause ends up to a burst goes at once, then the rate. Returns 1 if it set the pause.
    static let pause = RedisScript(
        """
        if redis.replicate_commands then redis.replicate_commands() end
        local left = redis.call('PTTL', KEYS[1])
        local wanted = tonumber(ARGV[1])
        if left == -1 or left >= wanted then return 0 end
        redis.call('SET', KEYS[1], '1', 'PX', wanted)
        local time = redis.call('TIME')
        local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
        local tolerance = tonumber(ARGV[2])
        local tat = tonumber(redis.call('GET', KEYS[2])) or now
        if tat < now + tolerance then
          tat = now + tolerance
          if tat > now then
            redis.call('SET', KEYS[2], string.format('%.0f', tat), 'PX', math.max(1, math.ceil((tat - now) / 1000)))
          end
        end
        return 1
        """)

    /// KEYS[1] the host's TAT; ARGV[1] the interval in µs. Gives one turn back (a request that
    /// took one sent nothing): the TAT moves back one interval, never before now.
    static let refund = RedisScript(
        """
        if redis.replicate_commands then redis.replicate_commands() end
        local tat = tonumber(redis.call('GET', KEYS[1]))
        if not tat then return 0 end
        local time = redis.call('TIME')
        local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
        local newTat = tat - tonumber(ARGV[1])
        if newTat <= now then
          redis.call('DEL', KEYS[1])
        else
          redis.call('SET', KEYS[1], string.format('%.0f', newTat), 'PX', math.max(1, math.ceil((newTat - now) / 1000)))
        end
        return 1
        """)

    /// What ``take`` answered.
    enum Answer: Equatable {
        /// The request goes: its turn was taken.
        case go
        /// Ask again after `wait`; `paused` when a server's `Retry-After` pause is the reason.
        case wait(Duration, paused: Bool)
    }

    /// Reads ``take``'s reply; a reply of another shape is a protocol violation.
    static func answer(from reply: RESPValue) throws -> Answer {
        guard case .array(let elements?) = reply, elements.count == 2, case .integer(let wait) = elements[0],
            case .integer(let paused) = elements[1]
        else {
            throw RedisError(kind: .protocolViolation, message: "the rate-limit script answered in an unexpected shape")
        }
        guard wait > 0 else { return .go }
        return .wait(.milliseconds(wait), paused: paused == 1)
    }
}
