import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Gives every manager's session its own `URLProtocol` class, so the bridge knows a task's
/// session and pipeline without asking the task.
///
/// A `URLProtocol` cannot see which session made its task (on swift-corelibs-foundation only
/// through the task's internal `session` field, which the bridge no longer reads), and on Apple
/// platforms `URLSession` cannot be subclassed, so each session lists a distinct specialisation
/// `SlottedBridgeURLProtocol<Slot>` whose slot type spells a number in binary
/// (`Bit1<Bit0<SlotRoot>>` is 5), and the class looks its pipeline up by that number. A number
/// is taken once for the life of the process and never reused: a session that outlives its
/// pipeline's registration finds nothing, never another session's pipeline.
protocol BridgeSlot { static var number: Int { get } }

enum SlotRoot: BridgeSlot { static var number: Int { 1 } }
enum Bit0<Rest: BridgeSlot>: BridgeSlot { static var number: Int { Rest.number &* 2 } }
enum Bit1<Rest: BridgeSlot>: BridgeSlot { static var number: Int { Rest.number &* 2 &+ 1 } }

/// The bridge of the session whose number `Slot` spells.
final class SlottedBridgeURLProtocol<Slot: BridgeSlot>: BridgeURLProtocol {
    override class var slotNumber: Int? { Slot.number }
}

enum BridgeSlots {
    /// The `SlottedBridgeURLProtocol` specialisation for slot `number` (1 or more).
    static func protocolClass(for number: Int) -> AnyClass {
        precondition(number >= 1)
        func bridge<S: BridgeSlot>(_: S.Type) -> AnyClass { SlottedBridgeURLProtocol<S>.self }
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

/// Maps slot numbers to the pipelines (and, on swift-corelibs-foundation, the sessions) of live
/// sessions.
final class BridgeRegistry: Sendable {
    static let shared = BridgeRegistry()

    private struct Entry {
        weak var pipeline: Pipeline?
        /// The session, where the bridge itself calls its delegate (swift-corelibs-foundation).
        weak var session: URLSession?
    }

    private struct State {
        var entries: [Int: Entry] = [:]
        var nextNumber = 1
    }

    private let state = LockedState(State())

    /// A new number, never handed out before.
    func register(_ pipeline: Pipeline) -> Int {
        state.withLock { state in
            defer { state.nextNumber += 1 }
            state.entries[state.nextNumber] = Entry(pipeline: pipeline)
            return state.nextNumber
        }
    }

    /// Records the session that slot `number` serves (weakly: the session owns the slot).
    func attach(_ session: URLSession, to number: Int) {
        state.withLock { $0.entries[number]?.session = session }
    }

    func unregister(_ number: Int) {
        state.withLock { _ = $0.entries.removeValue(forKey: number) }
    }

    func pipeline(for number: Int) -> Pipeline? {
        state.withLock { $0.entries[number]?.pipeline }
    }

    /// The pipeline and session of slot `number`, in one look-up.
    func entry(for number: Int) -> (pipeline: Pipeline?, session: URLSession?) {
        state.withLock { ($0.entries[number]?.pipeline, $0.entries[number]?.session) }
    }
}
