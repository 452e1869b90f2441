#if canImport(FoundationNetworking)
import Foundation
import FoundationNetworking

/// Reads a session's corelibs task registry (`URLSession.taskRegistry.behaviours`, keyed by task
/// identifier), which says how each task reports and holds the delegate an async API was given.
///
/// corelibs reads and writes the registry only on the session's work queue, without a lock: so
/// may this, only from `startLoading`.
struct TaskRegistryReader {
    /// What the registry holds for one task.
    enum Entry {
        /// The task is not (or no longer) registered.
        case absent
        /// The entry, read as corelibs' enum declared again.
        case found(RegisteredBehaviour)
        /// An entry that could not be read as ``RegisteredBehaviour``: left to a `Mirror`.
        case unreadable(Any)
    }

    private let registry: AnyObject
    private let behaviours: StoredField
    private let table: any BehaviourTable.Type
    private let layoutCheck: LayoutCheck

    /// The reader of `session`'s registry; `nil` where the toolchain hides it.
    /// - Parameter layoutCheck: Decides whether an entry may be read as ``RegisteredBehaviour``
    ///   (tests pass one that refuses, to force the `Mirror` fallback).
    init?(session: URLSession, layoutCheck: LayoutCheck = .shared) {
        guard let registry = Reflection.child(session, "taskRegistry"), let registryType = type(of: registry) as? AnyClass,
            let behaviours = StoredField.cached("behaviours", in: registryType),
            let table = behaviours.type as? any BehaviourTable.Type
        else { return nil }
        self.registry = registry as AnyObject
        self.behaviours = behaviours
        self.table = table
        self.layoutCheck = layoutCheck
    }

    /// The type of the registry's entries (corelibs' `_Behaviour`), for the layout pin tests.
    var entryType: Any.Type { table.entryType }

    /// The entry of the task `taskIdentifier`: one key looked up in place (a cast of the whole
    /// dictionary would convert every live task's entry, O(live tasks) for every task started).
    func entry(for taskIdentifier: Int) -> Entry {
        withExtendedLifetime(registry) { table.entry(at: behaviours.pointer(in: registry), forKey: taskIdentifier, check: layoutCheck) }
    }
}

/// corelibs' `[Int: _Behaviour]`, whose value type it keeps internal.
protocol BehaviourTable {
    /// The entry for `key` of the dictionary at `pointer`, read as ``RegisteredBehaviour`` only if
    /// `check` accepts the value type.
    static func entry(at pointer: UnsafeRawPointer, forKey key: Int, check: LayoutCheck) -> TaskRegistryReader.Entry
    /// The dictionary's value type.
    static var entryType: Any.Type { get }
}

extension Dictionary: BehaviourTable where Key == Int {
    static var entryType: Any.Type { Value.self }

    static func entry(at pointer: UnsafeRawPointer, forKey key: Int, check: LayoutCheck) -> TaskRegistryReader.Entry {
        guard let value = pointer.assumingMemoryBound(to: Self.self).pointee[key] else { return .absent }
        return RegisteredBehaviour(bitsOf: value, check: check).map(TaskRegistryReader.Entry.found) ?? .unreadable(value)
    }
}
#endif
