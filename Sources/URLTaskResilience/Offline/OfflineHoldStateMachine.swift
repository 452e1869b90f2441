import URLTaskManager
/// Which hosts an ``OfflineHold`` is probing, and which requests wait for each. A host is
/// probed while at least one request waits for it; a successful probe releases all of them.
/// Pure: no locks, no I/O.
struct OfflineHoldStateMachine {
    /// One held request.
    struct Waiter: Hashable, Sendable {
        let rawValue: UInt64
    }

    private enum State {
        case probing(waiters: [Waiter], failedProbes: Int)
    }

    private var hosts: [String: State] = [:]
    private var hostOfWaiter: [Waiter: String] = [:]

    enum HeldAction: Equatable {
        /// The first request held for this host: start probing it.
        case startProbing
        /// The host is already being probed.
        case wait
    }

    enum LeftAction: Equatable {
        /// It was not held (already released): an expected race.
        case none
        case left
        /// Nobody waits for `host` any more: stop probing it.
        case stopProbing(host: String)
    }

    /// The hosts being probed.
    var probedHosts: [String] { Array(hosts.keys) }

    mutating func held(_ waiter: Waiter, host: String) -> HeldAction {
        hostOfWaiter[waiter] = host
        switch hosts[host] {
        case .probing(var waiters, let failed):
            waiters.append(waiter)
            hosts[host] = .probing(waiters: waiters, failedProbes: failed)
            return .wait
        case nil:
            hosts[host] = .probing(waiters: [waiter], failedProbes: 0)
            return .startProbing
        }
    }

    mutating func left(_ waiter: Waiter) -> LeftAction {
        guard let host = hostOfWaiter.removeValueShrinking(forKey: waiter), case .probing(var waiters, let failed) = hosts[host] else {
            return .none
        }
        waiters.removeAll { $0 == waiter }
        if waiters.isEmpty {
            hosts.removeValueShrinking(forKey: host)
            return .stopProbing(host: host)
        }
        hosts[host] = .probing(waiters: waiters, failedProbes: failed)
        return .left
    }

    /// The host answered a probe: every request held for it, in the order they were held.
    mutating func probeSucceeded(host: String) -> [Waiter] {
        guard case .probing(let waiters, _) = hosts.removeValueShrinking(forKey: host) else { return [] }
        for waiter in waiters { hostOfWaiter.removeValueShrinking(forKey: waiter) }
        return waiters
    }

    /// A probe failed: how many have failed in a row, or `nil` when the host is no longer probed.
    mutating func probeFailed(host: String) -> Int? {
        guard case .probing(let waiters, let failed) = hosts[host] else { return nil }
        hosts[host] = .probing(waiters: waiters, failedProbes: failed + 1)
        return failed + 1
    }
}
