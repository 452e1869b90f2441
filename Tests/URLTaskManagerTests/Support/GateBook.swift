import Foundation
import LoopbackServer

/// Named gates made on first use, so handlers and tests can share them by name.
final class GateBook: @unchecked Sendable {  // `gates` is guarded by `lock`.
    private let lock = NSLock()
    private var gates: [String: Gate] = [:]

    func gate(_ name: String) -> Gate {
        lock.withLock {
            if let gate = gates[name] { return gate }
            let gate = Gate()
            gates[name] = gate
            return gate
        }
    }

    func openAll() {
        for gate in lock.withLock({ Array(gates.values) }) { gate.open() }
    }
}
