/// Gives every manager its own `URLProtocol` class.
///
/// A `URLProtocol` subclass only sees the request and the outer task. On Linux neither
/// carries anything that says which session made it (`URLProtocol.setProperty` values and
/// the configuration's `httpAdditionalHeaders` do not reach the protocol), so a single bridge
/// class shared by all managers could not tell their tasks apart. Instead each manager
/// registers a distinct specialisation `BridgeURLProtocol<Slot>` in its own session's
/// `protocolClasses`; the slot type spells the manager's number in binary
/// (`Bit1<Bit0<SlotRoot>>` is 5) and the class looks its pipeline up by that number.
/// Numbers are reused after a manager goes away, so the set of types stays bounded.
protocol BridgeSlot { static var number: Int { get } }

enum SlotRoot: BridgeSlot { static var number: Int { 1 } }
enum Bit0<Rest: BridgeSlot>: BridgeSlot { static var number: Int { Rest.number &* 2 } }
enum Bit1<Rest: BridgeSlot>: BridgeSlot { static var number: Int { Rest.number &* 2 &+ 1 } }

enum BridgeSlots {
    /// The `BridgeURLProtocol` specialisation for slot `number` (1 or more).
    static func protocolClass(for number: Int) -> AnyClass {
        precondition(number >= 1)
        func bridge<S: BridgeSlot>(_: S.Type) -> AnyClass { BridgeURLProtocol<S>.self }
        return bridge(slotType(for: number))
    }

    static func slotType(for number: Int) -> any BridgeSlot.Type {
        var bits: [Bool] = []
        var rest = number
        while rest > 1 {
            bits.append(rest & 1 == 1)
            rest >>= 1
        }
        var type: any BridgeSlot.Type = SlotRoot.self
        for bit in bits.reversed() {
            func wrap<S: BridgeSlot>(_: S.Type) -> any BridgeSlot.Type { bit ? Bit1<S>.self : Bit0<S>.self }
            type = wrap(type)
        }
        return type
    }
}

/// Maps slot numbers to live pipelines.
final class BridgeRegistry: @unchecked Sendable {  // all state is guarded by `lock`.
    static let shared = BridgeRegistry()

    private struct Entry {
        weak var pipeline: Pipeline?
    }

    private let lock = NSLock()
    private var entries: [Int: Entry] = [:]
    private var freeNumbers: [Int] = []
    private var nextNumber = 1

    func register(_ pipeline: Pipeline) -> Int {
        lock.withLock {
            let number = freeNumbers.popLast() ?? { defer { nextNumber += 1 }; return nextNumber }()
            entries[number] = Entry(pipeline: pipeline)
            return number
        }
    }

    func unregister(_ number: Int) {
        lock.withLock {
            guard entries.removeValue(forKey: number) != nil else { return }
            freeNumbers.append(number)
        }
    }

    func pipeline(for number: Int) -> Pipeline? {
        lock.withLock { entries[number]?.pipeline }
    }
}
