#if canImport(FoundationNetworking)
import Foundation
import FoundationNetworking

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
