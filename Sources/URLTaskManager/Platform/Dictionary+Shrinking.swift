/// Removal that gives memory back: a Swift `Dictionary` never shrinks its storage when
/// entries are removed, so a table that once held a burst (200,000 tasks or hosts in flight at
/// once) keeps room for all of them, empty, for as long as it lives (issue 49; how much: the
/// `hosts` benchmark, the Performance article's "The resilience parts").
///
/// `package`: the engine's tables and the resilience parts' per-host and per-task tables use it.
/// After a removal, once the table holds fewer than an eighth of the entries its storage has
/// room for, it is copied into storage sized for twice its entries. That copy costs O(count);
/// reaching it took at least twice as many removals as it copies entries since the storage last
/// grew or shrank, so removal stays O(1) amortized, and a table that stays small never copies.
extension Dictionary {
    /// Removes `key`'s value, then shrinks the storage if it is mostly empty; returns the value.
    @discardableResult
    package mutating func removeValueShrinking(forKey key: Key) -> Value? {
        let removed = removeValue(forKey: key)
        if removed != nil { shrinkIfSparse() }
        return removed
    }

    /// Copies the entries into smaller storage when they fill less than an eighth of it (and it
    /// has room for more than a few).
    private mutating func shrinkIfSparse() {
        guard capacity > ShrinkingThreshold.smallest, count < capacity / 8 else { return }
        var smaller = Self(minimumCapacity: Swift.max(count * 2, 1))
        for (key, value) in self { smaller[key] = value }
        self = smaller
    }
}

/// Below this many entries of room a table is not worth shrinking: a few kilobytes at most.
private enum ShrinkingThreshold {
    static let smallest = 64
}
