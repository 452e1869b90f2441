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

    /// How the task `taskIdentifier` reports its body, and the delegate an async API was given
    /// for it; `nil` when the task is not registered. `callDelegate`, the one case without a
    /// payload, streams; the completion-handler cases buffer, and those of the async APIs
    /// (`dataCompletionHandlerWithTaskDelegate(completion, delegate)`) carry the delegate the
    /// caller gave, second in their payload.
    func behaviour(for taskIdentifier: Int) -> (delivery: BodyDelivery, taskDelegate: (any URLSessionTaskDelegate)?)? {
        switch entry(for: taskIdentifier) {
        case .absent:
            return nil
        case .found(let behaviour):
            return (behaviour.delivery, behaviour.taskDelegate)
        case .unreadable(let behaviour):
            // A toolchain whose enum no longer matches ``RegisteredBehaviour``: read it by name.
            // Only the case named `callDelegate` streams; any other case, known or not, buffers
            // (a completion handler given chunks would keep only the last one).
            guard let payload = Mirror(reflecting: behaviour).children.first?.value else {
                return ("\(behaviour)" == "callDelegate" ? .stream : .buffer, nil)
            }
            // A cast to the payload's tuple type, not a second `Mirror`: reflecting a payload
            // that holds a closure looks the closure's type up by its mangled name every time.
            // corelibs 6 declares the completions `@Sendable`; the plain types are for older ones.
            if let pair = payload as? (RegisteredBehaviour.DataCompletion, (any URLSessionTaskDelegate)?) { return (.buffer, pair.1) }
            if let pair = payload as? (RegisteredBehaviour.DownloadCompletion, (any URLSessionTaskDelegate)?) { return (.buffer, pair.1) }
            if let pair = payload as? (DataCompletion, (any URLSessionTaskDelegate)?) { return (.buffer, pair.1) }
            if let pair = payload as? (DownloadCompletion, (any URLSessionTaskDelegate)?) { return (.buffer, pair.1) }
            return (.buffer, nil)
        }
    }

    /// corelibs' `_TaskRegistry.DataTaskCompletion` and `DownloadTaskCompletion` before corelibs 6
    /// made them `@Sendable` (``RegisteredBehaviour`` declares those of corelibs 6).
    private typealias DataCompletion = (Data?, URLResponse?, (any Error)?) -> Void
    private typealias DownloadCompletion = (URL?, URLResponse?, (any Error)?) -> Void
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

/// corelibs' `URLSession._TaskRegistry._Behaviour`, declared again case for case, so that an
/// entry of a session's task registry can be read as this type instead of through a `Mirror`
/// (reflecting an enum whose payload holds a closure looks the payload's type up by its mangled
/// name every time, for every task; its cost: the Performance article, "Single operations on
/// Linux").
///
/// Two enums with the same cases, in the same order, with payloads of the same types, have the
/// same layout. Before any value is read as this type, ``LayoutCheck`` compares corelibs' enum
/// with this one as the runtime's metadata describes them (``EnumShape``: every case's name,
/// payload type and indirectness, in order, and the size, stride and alignment) and the type's
/// full name, once per process. On any difference (a toolchain whose corelibs inserted, renamed,
/// reordered or retyped a case, even one that kept the size) no value is ever cast, and
/// `Platform` reads the entry through a `Mirror` instead. `PlatformPinTests` pin every case, and
/// `CorelibsReadFallbackTests` force the fallback.
enum RegisteredBehaviour {
    typealias DataCompletion = @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    typealias DownloadCompletion = @Sendable (URL?, URLResponse?, (any Error)?) -> Void

    case callDelegate
    case dataCompletionHandler(DataCompletion)
    case dataCompletionHandlerWithTaskDelegate(DataCompletion, (any URLSessionTaskDelegate)?)
    case downloadCompletionHandler(DownloadCompletion)
    case downloadCompletionHandlerWithTaskDelegate(DownloadCompletion, (any URLSessionTaskDelegate)?)

    /// `value` (an entry of corelibs' registry) read as this type; `nil` when `check` cannot show
    /// that its type has this type's layout (then nothing is cast).
    init?<Corelibs>(bitsOf value: Corelibs, check: LayoutCheck = .shared) {
        guard check.isUsable(for: Corelibs.self) else { return nil }
        self = unsafeBitCast(value, to: Self.self)
    }

    /// How the task reports its body: chunk by chunk to the session's delegate, or all at once
    /// to a completion handler.
    var delivery: BodyDelivery {
        if case .callDelegate = self { .stream } else { .buffer }
    }

    /// The delegate an async API (`data(for:delegate:)`, …) was given, kept only here.
    var taskDelegate: (any URLSessionTaskDelegate)? {
        switch self {
        case .dataCompletionHandlerWithTaskDelegate(_, let delegate), .downloadCompletionHandlerWithTaskDelegate(_, let delegate):
            delegate
        case .callDelegate, .dataCompletionHandler, .downloadCompletionHandler:
            nil
        }
    }
}

/// Whether corelibs' enum has ``RegisteredBehaviour``'s layout, decided once per type before
/// any value is cast.
final class LayoutCheck: Sendable {
    /// The check against ``RegisteredBehaviour`` that every session uses.
    static let shared = LayoutCheck(expected: EnumShape(of: RegisteredBehaviour.self), typeName: corelibsName)

    /// The full name corelibs 6 gives its enum.
    static let corelibsName = "FoundationNetworking.URLSession._TaskRegistry._Behaviour"

    private let expected: EnumShape?
    private let typeName: String
    private let verdicts = LockedState<[ObjectIdentifier: Bool]>([:])

    /// A check that accepts only an enum named `typeName` whose shape is `expected` (`nil`
    /// accepts none). Tests make one with another shape to force the `Mirror` fallback.
    init(expected: EnumShape?, typeName: String) {
        self.expected = expected
        self.typeName = typeName
    }

    /// Whether this check has refused a type (tests see that the fallback was taken).
    var hasRefused: Bool { verdicts.withLock { $0.values.contains(false) } }

    /// Whether `type` has the expected name and shape: its metadata is read the first time only.
    func isUsable<Corelibs>(for type: Corelibs.Type) -> Bool {
        let id = ObjectIdentifier(type)
        if let verdict = verdicts.withLock({ $0[id] }) { return verdict }
        let usable = expected != nil && _typeName(type, qualified: true) == typeName && EnumShape(of: type) == expected
        verdicts.withLock { $0[id] = usable }
        return usable
    }
}
#endif
