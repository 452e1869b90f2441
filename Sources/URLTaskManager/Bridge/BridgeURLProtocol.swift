import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The `URLProtocol` subclass a manager puts first in its session's `protocolClasses`.
///
/// It holds no logic: `startLoading` hands the request to the ``Pipeline`` of the session that
/// created the task (``OuterTaskFacts/pipeline``) with a ``ProtocolSink`` to answer through,
/// and `stopLoading` cancels that work. Both run on the session's serial work queue, which
/// must never block, so the pipeline does everything on its own threads.
class BridgeURLProtocol: URLProtocol {
    /// The number of the session this class serves (see `NumberedBridgeURLProtocol`): every
    /// manager's session lists a class of its own; `nil` for this base class, which no session
    /// lists.
    class var sessionNumber: Int? { nil }

    private var handle: PipelineTaskHandle?
    private var sink: ProtocolSink?
    private var native: NativeDownload?

    override class func canInit(with request: URLRequest) -> Bool {
        // Only managers' sessions list this class, so every request it is asked about is one
        // of theirs.
        guard let scheme = request.url?.scheme?.lowercased() else { return false }
        return scheme == "http" || scheme == "https"
    }

    override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }

    override func startLoading() {
        guard let client else { return }
        guard let task else {
            client.urlProtocol(self, didFailWithError: URLError(.unsupportedURL))
            return
        }
        let facts = Platform.facts(for: task, request: request, bridge: Self.self)
        let sink = ProtocolSink(urlProtocol: self, client: client, facts: facts)
        self.sink = sink
        if facts.isDownload, let nativeClass = Platform.nativeHTTPProtocol {
            // See `CorelibsPlatform`: only the native protocol can complete a download task.
            let native = NativeDownload(
                native: nativeClass.init(task: task, cachedResponse: cachedResponse, client: client), sink: sink, facts: facts)
            self.native = native
            native.start(request)
            return
        }
        guard let pipeline = facts.pipeline else {
            sink.fail(URLTaskError.managerInvalidated)
            return
        }
        if facts.bodyMissing {
            sink.fail(URLTaskError.uploadBodyUnavailable)
            return
        }
        if facts.bodyFromDelegate {
            // The delegate may answer later, from any thread; a cancel before then wins.
            let deferred = DeferredTaskHandle()
            handle = deferred
            let request = self.request
            Platform.requestBodyStream(for: task, session: facts.session) { stream in
                let body: URLTaskBody = stream.map { .stream($0) } ?? .none
                deferred.start { pipeline.start(request: request, body: body, sink: sink) }
            }
            return
        }
        handle = pipeline.start(request: request, body: facts.body, sink: sink)
    }

    override func stopLoading() {
        if let native {
            native.stop()
            return
        }
        // The session reports the cancellation itself right after this call; from now on the
        // sink drops anything the pipeline still sends.
        sink?.close()
        handle?.cancel()
    }
}

// MARK: - What the bridge learns of the outer task

/// How the outer session wants a task's body handed over.
enum BodyDelivery: Sendable, Equatable {
    /// The task reports each chunk to a delegate: forward chunks as they arrive.
    case stream
    /// The task has a completion handler (or is `async data(for:)`): corelibs keeps only the
    /// LAST `didLoad` chunk for those, so the whole body must arrive in one call.
    case buffer
}

/// What the bridge learns about the outer task it is loading.
struct OuterTaskFacts: Sendable {
    var delivery: BodyDelivery
    /// The serial queue the outer session uses for this task. Every `URLProtocolClient` call is
    /// made on it: corelibs reads its task registry from the client callbacks without a lock,
    /// and a call from another thread races with the session adding or removing tasks.
    var workQueue: DispatchQueue?
    /// The request body as the outer session holds it.
    var body: URLTaskBody
    /// `true` when the body should have been found but was not (an upload task whose body the
    /// toolchain hides): the task must fail rather than go out empty.
    var bodyMissing: Bool
    /// An upload task made with `uploadTask(withStreamedRequest:)`: like corelibs, the bridge
    /// asks the session delegate for the body (``Platform/requestBodyStream(for:completion:)``).
    var bodyFromDelegate = false
    /// A download task: corelibs cannot complete one through a custom protocol (it reads a
    /// temporary file URL only its own protocol can set), so it is handed to the native one.
    var isDownload: Bool
    /// The pipeline of the session that created the task, and only that one (its protocol
    /// class's number says which): `nil` if the session is gone from under it (it cannot be while
    /// the task lives).
    var pipeline: Pipeline?
    /// The session that created the task, where the bridge itself asks the caller's delegate
    /// about redirects and authentication challenges (corelibs cannot take either from a
    /// custom protocol); `nil` where the platform does that itself.
    var session: URLSession?
    /// The delegate given to one of the async APIs (`data(for:delegate:)`, `upload(for:from:delegate:)`,
    /// ...): corelibs keeps it in its task registry and has only its own protocol stream the body
    /// and report upload progress to it, so the bridge does. `nil` on other platforms.
    var taskDelegate: (any URLSessionTaskDelegate)?
    /// Who is told of upload progress (`didSendBodyData`): the task's own delegate, or the
    /// session's delegate for a delegate-driven task, as corelibs' own protocol does. `nil` where
    /// the platform reports it itself.
    var uploadProgressDelegate: (any URLSessionTaskDelegate)?
    /// The task's `delegate` (its own, or the session's), read once in `startLoading`, on the work
    /// queue: the bridge asks it about redirects and challenges later, from its own threads, where
    /// reading `task.delegate` would race with corelibs setting the session's delegate to `nil`
    /// on the delegate queue when the session is invalidated. `nil` where the platform asks it.
    var callerDelegate: (any URLSessionTaskDelegate)?
}

// MARK: - One protocol class per session

/// Gives every manager's session its own `URLProtocol` class, so the bridge knows a task's
/// session and pipeline without asking the task.
///
/// A `URLProtocol` cannot see which session made its task (on swift-corelibs-foundation only
/// through the task's internal `session` field, which the bridge no longer reads), and on Apple
/// platforms `URLSession` cannot be subclassed, so each session lists a distinct specialisation
/// `NumberedBridgeURLProtocol<Number>` whose type argument spells a number in binary
/// (`Bit1<Bit0<NumberRoot>>` is 5), and the class looks its pipeline up by that number. A number
/// is taken once for the life of the process and never reused: a session that outlives its
/// pipeline's registration finds nothing, never another session's pipeline.
protocol BridgeNumber { static var number: Int { get } }

enum NumberRoot: BridgeNumber { static var number: Int { 1 } }
enum Bit0<Rest: BridgeNumber>: BridgeNumber { static var number: Int { Rest.number &* 2 } }
enum Bit1<Rest: BridgeNumber>: BridgeNumber { static var number: Int { Rest.number &* 2 &+ 1 } }

/// The bridge of the session whose number `Number` spells.
final class NumberedBridgeURLProtocol<Number: BridgeNumber>: BridgeURLProtocol {
    override class var sessionNumber: Int? { Number.number }
}

enum BridgeClasses {
    /// The `NumberedBridgeURLProtocol` specialisation for session number `number` (1 or more).
    static func protocolClass(for number: Int) -> AnyClass {
        precondition(number >= 1)
        func bridge<S: BridgeNumber>(_: S.Type) -> AnyClass { NumberedBridgeURLProtocol<S>.self }
        return bridge(numberType(for: number))
    }

    static func numberType(for number: Int) -> any BridgeNumber.Type {
        var bits: [Bool] = []
        var rest = number
        while rest > 1 {
            bits.append(rest & 1 == 1)
            rest >>= 1
        }
        var type: any BridgeNumber.Type = NumberRoot.self
        for bit in bits.reversed() {
            func wrap<S: BridgeNumber>(_: S.Type) -> any BridgeNumber.Type { bit ? Bit1<S>.self : Bit0<S>.self }
            type = wrap(type)
        }
        return type
    }
}

/// Maps session numbers to the pipelines (and, on swift-corelibs-foundation, the sessions) of live
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

    /// Records the session that number `number` serves (weakly: the session owns its number).
    func attach(_ session: URLSession, to number: Int) {
        state.withLock { $0.entries[number]?.session = session }
    }

    func unregister(_ number: Int) {
        state.withLock { _ = $0.entries.removeValue(forKey: number) }
    }

    func pipeline(for number: Int) -> Pipeline? {
        state.withLock { $0.entries[number]?.pipeline }
    }

    /// The pipeline and session of number `number`, in one look-up.
    func entry(for number: Int) -> (pipeline: Pipeline?, session: URLSession?) {
        state.withLock { ($0.entries[number]?.pipeline, $0.entries[number]?.session) }
    }
}
