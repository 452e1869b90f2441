/// One host's state in a ``HostTable``: whether it can be forgotten.
protocol HostState {
    /// Whether the state is, by `now`, the same as a host never seen (a closed circuit whose
    /// failures are older than its window, a full bucket nobody waits on): dropping it changes
    /// nothing.
    func isIdle(at now: ContinuousClock.Instant) -> Bool
    /// Whether it may be dropped when the table is full, although not idle: nothing waits on it
    /// and nothing a server asked for (a pause) is in force. A host dropped this way starts
    /// afresh when it is seen again.
    func mayBeEvicted(at now: ContinuousClock.Instant) -> Bool
}

/// Per-host state that cannot grow without bound: a rate limiter's buckets, a circuit breaker's
/// circuits. Idle hosts are forgotten, and past `capacity` hosts the least recently used one
/// that may be evicted goes first.
///
/// 0.2.0 kept an entry for every host it ever saw, so memory grew with the number of distinct
/// hosts and was never reclaimed (measured: URLTaskManager's Performance article, "The
/// resilience parts"). Here the table is trimmed when a new host would pass
/// `capacity`: every idle entry goes, then the least recently used evictable ones until a
/// quarter of the room is free; and every `capacity` uses, idle entries are swept, so a quiet
/// table shrinks too. Both cost O(1) per use, amortized. Entries that may not be evicted
/// (requests wait on them) can hold the table above `capacity`; the next trim then waits until
/// it has grown by half again. A value type, held under its owner's lock.
struct HostTable<Entry: HostState> {
    private struct Slot {
        var entry: Entry
        var lastUse: UInt64
    }

    /// The most hosts kept before the least recently used is evicted.
    let capacity: Int
    private var slots: [String: Slot] = [:]
    private var uses: UInt64 = 0
    private var usesUntilSweep: Int
    private var trimAt: Int

    init(capacity: Int) {
        self.capacity = max(1, capacity)
        self.usesUntilSweep = self.capacity
        self.trimAt = self.capacity
    }

    /// How many hosts have state.
    var count: Int { slots.count }

    /// `host`'s state, without counting as a use.
    subscript(host: String) -> Entry? {
        slots[host]?.entry
    }

    /// Runs `body` on `host`'s state, made with `make` if the host has none; `body` returns
    /// whether the state is worth keeping and its result. A use: the host becomes the most
    /// recently used, and the table may be trimmed first.
    mutating func update<Result>(
        _ host: String, now: ContinuousClock.Instant, make: () -> Entry, _ body: (inout Entry) -> (keep: Bool, result: Result)
    ) -> Result {
        uses &+= 1
        usesUntilSweep -= 1
        if usesUntilSweep <= 0 {
            usesUntilSweep = capacity
            slots = slots.filter { !$0.value.entry.isIdle(at: now) }
        }
        var slot = slots.removeValue(forKey: host) ?? Slot(entry: make(), lastUse: 0)
        let (keep, result) = body(&slot.entry)
        guard keep else { return result }
        if slots.count + 1 > trimAt { trim(now: now) }
        slot.lastUse = uses
        slots[host] = slot
        return result
    }

    /// Runs `body` on `host`'s state only if it has one (not a use: a timer firing).
    mutating func updateIfPresent<Result>(_ host: String, _ body: (inout Entry) -> Result) -> Result? {
        guard var slot = slots[host] else { return nil }
        let result = body(&slot.entry)
        slots[host] = slot
        return result
    }

    /// Forgets every idle host, then, unless that freed a quarter of `capacity`, evicts the least
    /// recently used evictable ones until it has.
    private mutating func trim(now: ContinuousClock.Instant) {
        slots = slots.filter { !$0.value.entry.isIdle(at: now) }
        // Room for the host being added, and a quarter of the table free when it is large.
        let target = min(capacity - 1, capacity - capacity / 4)
        if slots.count > target {
            let evictable = slots.filter { $0.value.entry.mayBeEvicted(at: now) }.sorted { $0.value.lastUse < $1.value.lastUse }
            for (host, _) in evictable.prefix(slots.count - target) { slots[host] = nil }
        }
        // Entries that may not go keep the table full: wait for half as many again.
        trimAt = max(capacity, slots.count + slots.count / 2)
    }
}
