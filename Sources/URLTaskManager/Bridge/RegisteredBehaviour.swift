#if canImport(FoundationNetworking)
import Foundation
import FoundationNetworking

/// corelibs' `URLSession._TaskRegistry._Behaviour`, declared again case for case, so that an
/// entry of a session's task registry can be read as this type instead of through a `Mirror`
/// (reflecting an enum whose payload holds a closure looks the payload's type up by its mangled
/// name every time: about 66,000 instructions a task, half the bridge's cost on top of the floor).
///
/// Two enums with the same cases, in the same order, with payloads of the same types, have the
/// same layout. ``init(bitsOf:)`` checks what it can: the size, stride and alignment on every
/// read, the type's full name once, and each case's name against a `Mirror` the first time the
/// process meets that case.
/// When a check fails (a toolchain whose corelibs changed the enum), it returns `nil` for good
/// and `Platform` goes back to the `Mirror`. `PlatformPinTests` pin every case.
enum RegisteredBehaviour {
    typealias DataCompletion = @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    typealias DownloadCompletion = @Sendable (URL?, URLResponse?, (any Error)?) -> Void

    case callDelegate
    case dataCompletionHandler(DataCompletion)
    case dataCompletionHandlerWithTaskDelegate(DataCompletion, (any URLSessionTaskDelegate)?)
    case downloadCompletionHandler(DownloadCompletion)
    case downloadCompletionHandlerWithTaskDelegate(DownloadCompletion, (any URLSessionTaskDelegate)?)

    /// The case names, in declaration order, as corelibs spells them.
    private static let caseNames = [
        "callDelegate", "dataCompletionHandler", "dataCompletionHandlerWithTaskDelegate", "downloadCompletionHandler",
        "downloadCompletionHandlerWithTaskDelegate",
    ]

    private var caseIndex: Int {
        switch self {
        case .callDelegate: 0
        case .dataCompletionHandler: 1
        case .dataCompletionHandlerWithTaskDelegate: 2
        case .downloadCompletionHandler: 3
        case .downloadCompletionHandlerWithTaskDelegate: 4
        }
    }

    /// `value` (an entry of corelibs' registry) read as this type; `nil` when it cannot be
    /// shown to have this type's layout.
    init?<Corelibs>(bitsOf value: Corelibs) {
        guard MemoryLayout<Corelibs>.size == MemoryLayout<Self>.size, MemoryLayout<Corelibs>.stride == MemoryLayout<Self>.stride,
            MemoryLayout<Corelibs>.alignment == MemoryLayout<Self>.alignment, LayoutCheck.shared.isUsable(for: Corelibs.self)
        else { return nil }
        let behaviour = unsafeBitCast(value, to: Self.self)
        let index = behaviour.caseIndex
        if !LayoutCheck.shared.isConfirmed(index) {
            // A case with a payload is a child named after it; `callDelegate` has none.
            let name = Mirror(reflecting: value).children.first?.label ?? "\(value)"
            guard LayoutCheck.shared.confirm(index, matches: name == Self.caseNames[index]) else { return nil }
        }
        self = behaviour
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

/// Which cases of ``RegisteredBehaviour`` have been checked against corelibs' own, and whether
/// one failed (then none is read this way again).
private final class LayoutCheck: @unchecked Sendable {  // `confirmed`, `confirmedType` and `failed` are guarded by `lock`.
    static let shared = LayoutCheck()
    private let lock = NSLock()
    private var confirmed: Set<Int> = []
    private var confirmedType: ObjectIdentifier?
    private var failed = false

    /// The full name corelibs 6 gives its enum.
    private static let corelibsName = "FoundationNetworking.URLSession._TaskRegistry._Behaviour"

    /// Whether `type` is corelibs' enum and no check has failed.
    func isUsable(for type: Any.Type) -> Bool {
        let id = ObjectIdentifier(type)
        if let usable = lock.withLock({ failed ? false : (confirmedType == id ? true : nil) }) { return usable }
        let matches = _typeName(type, qualified: true) == Self.corelibsName
        lock.withLock {
            if matches { confirmedType = id } else { failed = true }
        }
        return matches
    }

    func isConfirmed(_ index: Int) -> Bool { lock.withLock { confirmed.contains(index) } }

    /// Records the check of case `index`; returns `matches`.
    func confirm(_ index: Int, matches: Bool) -> Bool {
        lock.withLock {
            if matches { confirmed.insert(index) } else { failed = true }
        }
        return matches
    }
}
#endif
