// The one place where URLTaskManager forks by platform.
//
// swift-corelibs-foundation (Linux, Windows) hides several things a custom URLProtocol needs
// behind internal API. Each is recovered here by reflection, and each has a safe fallback
// that is taken when the reflection finds nothing (a future toolchain that changed its
// internals): the bridge then buffers a body instead of streaming it, or fails a task with
// a typed error instead of sending an empty body. `PlatformPinTests` pin every fact below
// against the toolchain in use, so the day one changes, a test says which.

import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

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
    /// class's slot says which): `nil` if the session is gone from under it (it cannot be while
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

enum Platform {
    /// Inspects `task` from inside `startLoading`, which runs on the session's work queue (the
    /// only place the session's task registry may be read).
    /// - Parameters:
    ///   - bridge: The protocol class loading the task: a manager's session has one of its own,
    ///     whose slot says which session and pipeline the task belongs to.
    ///   - plainSession: The task's session where no slot says it (the pin tests' own protocol on
    ///     a plain session); the bridge never reads it from the task.
    static func facts(
        for task: URLSessionTask, request: URLRequest, bridge: BridgeURLProtocol.Type = BridgeURLProtocol.self,
        plainSession: URLSession? = nil
    ) -> OuterTaskFacts {
        let isDownload = task is URLSessionDownloadTask
        #if canImport(FoundationNetworking)
        let slot = bridge.slotNumber.map { BridgeRegistry.shared.entry(for: $0) }
        let managed = slot?.session as? ManagedURLSession
        let session = managed ?? plainSession
        // A manager's session found its work queue and task registry once, when it was made.
        let workQueue = managed?.foundWorkQueue ?? Reflection.child(task, "workQueue") as? DispatchQueue
        var body = URLTaskBody(request: request)
        var missing = false
        var fromDelegate = false
        let delivery: BodyDelivery
        let taskDelegate: (any URLSessionTaskDelegate)?
        if let record = managed?.factoryRecords.record(for: task) {
            // Made by one of the session's open factories, which recorded how it reports and the
            // upload body it was given: nothing of corelibs' is read.
            delivery = record.delivery
            taskDelegate = nil
            if let uploadBody = record.uploadBody { body = uploadBody }
            fromDelegate = record.bodyFromDelegate
        } else {
            // Made by an async API (`data(for:delegate:)`, `upload(for:from:)`, ...), which corelibs
            // creates through an internal factory: it reports to a completion handler, so its body
            // is buffered. Only corelibs' task registry holds the delegate the API was given, and
            // only the task holds an upload's body. (A manager's session that found no registry
            // when it was made will not find one later: the task delegate is then not called.)
            let registry = managed.map(\.registryReader) ?? session.flatMap { TaskRegistryReader(session: $0) }
            let behaviour = registry.flatMap { registeredBehaviour($0.entry(for: task.taskIdentifier)) }
            // A plain session's task (the pin tests) may be delegate-driven: the registry says.
            delivery = managed == nil ? behaviour?.delivery ?? .buffer : .buffer
            taskDelegate = behaviour?.taskDelegate
            if case .none = body, task is URLSessionUploadTask {
                if let field = Reflection.child(task, managed?.uploadBodyField ?? "knownBody") {
                    if let known = Reflection.unwrapOptional(field) {
                        body = uploadBody(fromKnownBody: known)
                    } else {
                        // `knownBody` is nil only for `uploadTask(withStreamedRequest:)`.
                        fromDelegate = true
                    }
                }
            }
        }
        if task is URLSessionUploadTask { missing = !fromDelegate && body.isNone }
        var facts = OuterTaskFacts(delivery: delivery, workQueue: workQueue, body: body, bodyMissing: missing, isDownload: isDownload)
        facts.bodyFromDelegate = fromDelegate
        facts.pipeline = slot?.pipeline
        facts.session = managed
        facts.taskDelegate = taskDelegate
        facts.callerDelegate = managed == nil ? nil : task.delegate
        facts.uploadProgressDelegate = taskDelegate ?? (delivery == .stream ? task.delegate : nil)
        return facts
        #else
        // Apple platforms append chunks correctly for every task kind and allow client calls
        // from any thread.
        let body = URLTaskBody(request: request)
        let missing = task is URLSessionUploadTask && body.isNone
        var facts = OuterTaskFacts(delivery: .stream, workQueue: nil, body: body, bodyMissing: missing, isDownload: isDownload)
        facts.pipeline = bridge.slotNumber.flatMap { BridgeRegistry.shared.pipeline(for: $0) }
        return facts
        #endif
    }

    /// Whether the session ``makeSession(configuration:delegate:delegateQueue:pipeline:)`` returns
    /// tells the pipeline of its own invalidation (a ``ManagedURLSession``). Where it cannot (Apple
    /// platforms), the manager's invalidation methods tell the pipeline themselves.
    #if canImport(FoundationNetworking)
    static let sessionReportsInvalidation = true
    #else
    static let sessionReportsInvalidation = false
    #endif

    /// Whether the bridge moves the outer task's `progress` itself: corelibs moves it only for
    /// its own protocol; Apple's URLSession counts what a protocol delivers.
    #if canImport(FoundationNetworking)
    static let bridgeMovesProgress = true
    #else
    static let bridgeMovesProgress = false
    #endif

    /// Creates the session a manager hands out, owning `pipeline` for as long as it lives.
    ///
    /// Every session gets a protocol class of its own whose number is never reused
    /// (``BridgeSlots``): a `URLProtocol` cannot see its task's session (corelibs keeps it in an
    /// internal field), so the class says which session and pipeline a task belongs to, and a
    /// task can only ever run through the pipeline of the session that created it. On
    /// swift-corelibs-foundation the session is a ``ManagedURLSession``: invalidating it ends the
    /// pipeline. On Apple platforms `URLSession` cannot be subclassed (its initializer is a
    /// factory method): the session owns the pipeline through an associated object.
    /// - Parameter configuration: The outer configuration, whose `protocolClasses` this puts
    ///   the bridge in front of.
    static func makeSession(
        configuration: URLSessionConfiguration, delegate: (any URLSessionDelegate)?, delegateQueue: OperationQueue?, pipeline: Pipeline
    ) -> URLSession {
        let number = BridgeRegistry.shared.register(pipeline)
        configuration.protocolClasses = [BridgeSlots.protocolClass(for: number)] + (configuration.protocolClasses ?? [])
        #if canImport(FoundationNetworking)
        let session = ManagedURLSession(
            configuration: configuration, delegate: delegate, delegateQueue: delegateQueue, pipeline: pipeline, slot: number)
        BridgeRegistry.shared.attach(session, to: number)
        return session
        #else
        let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue)
        PipelineOwner.attach(PipelineOwner(pipeline: pipeline, number: number), to: session)
        return session
        #endif
    }

    /// Asks the outer session's delegate for the body of a `uploadTask(withStreamedRequest:)`
    /// task, as corelibs' own protocol does (`URLSessionTask.getBody`): its
    /// `urlSession(_:task:needNewBodyStream:)`, called right here (on the work queue, like
    /// corelibs). `nil` (no delegate, or the delegate gave no stream) means an empty body, as
    /// with a plain session.
    static func requestBodyStream(
        for task: URLSessionTask, session: URLSession?, completion: @escaping @Sendable (InputStream?) -> Void
    ) {
        guard let session, let delegate = session.delegate as? URLSessionTaskDelegate else {
            completion(nil)
            return
        }
        delegate.urlSession(session, task: task, needNewBodyStream: completion)
    }

    /// Runs the transport's delegate callbacks on the queue where the inner session's libcurl
    /// reads (its multi handle's queue, which targets the session's work queue) instead of a
    /// thread of their own, and marks the work queue so ``isOnSessionWorkQueue`` can see it.
    ///
    /// On corelibs every session's work queue targets one shared serial queue, so a callback
    /// running there is serialized with the outer session's work queue too: the bridge may then
    /// answer the outer task's client at once, where it would otherwise wake the delegate
    /// queue's thread and then the work queue's again (two thread hops per event, most of the
    /// bridge's cost). The price is the rule of that queue: nothing run from a transport
    /// callback may create, resume or cancel a task, or answer a challenge, there (each `sync`s
    /// onto it): ``isOnSessionWorkQueue`` says when to move such a call elsewhere.
    ///
    /// Why the multi handle's queue and not the work queue itself: while a socket stays
    /// readable (a fast server on loopback), libdispatch keeps draining that queue, reading the
    /// whole body, before anything else queued on the work queue runs. Callbacks queued on the
    /// work queue then waited behind the entire body (50 MB held in memory, measured), and so
    /// did a `suspend()` meant to pause the transfer. Queued on the same queue as the reads,
    /// each chunk's callback runs right after the read that produced it.
    ///
    /// Must be called before the queue has any operation. Returns `false` (and changes nothing)
    /// where the work queue cannot be found; falls back to the work queue where the multi
    /// handle's queue cannot be.
    @discardableResult
    static func runCallbacksOnWorkQueue(of session: URLSession, delegateQueue: OperationQueue) -> Bool {
        #if canImport(FoundationNetworking)
        guard let workQueue = Reflection.child(session, "workQueue") as? DispatchQueue else { return false }
        workQueue.setSpecific(key: sessionWorkQueueKey, value: true)
        delegateQueue.underlyingQueue = libcurlQueue(of: session) ?? workQueue
        return true
        #else
        return false
        #endif
    }

    /// Runs `body` (on a thread of the pipeline's) once `session` has started every task resumed
    /// before this call: its `startLoading` has run, so the task has reached the pipeline.
    ///
    /// corelibs queues `startLoading` on the task's work queue, which targets the session's, when
    /// the task is resumed: a block queued on the session's work queue after that runs after it.
    /// The block reads nothing; it only hops. corelibs' own barrier, `getAllTasks`, reads the
    /// session's task registry on the delegate queue while the work queue adds and removes tasks
    /// (URLSession.swift:408-414, 6.3.1 to `main`): a SIGILL seen in CI. It is used only where the
    /// work queue cannot be found (a toolchain whose internals changed) and on Apple platforms,
    /// whose `getAllTasks` is thread-safe.
    static func afterTasksResumedSoFar(of session: URLSession, _ body: @escaping @Sendable () -> Void) {
        #if canImport(FoundationNetworking)
        let workQueue = (session as? ManagedURLSession)?.foundWorkQueue ?? Reflection.child(session, "workQueue") as? DispatchQueue
        if let workQueue {
            // Off the work queue at once: every session's work queue is one serial queue.
            workQueue.async { DispatchQueue.global().async(execute: body) }
            return
        }
        #endif
        session.getAllTasks { _ in body() }
    }

    /// Whether the current code runs on a transport's work queue (see
    /// ``runCallbacksOnWorkQueue(of:delegateQueue:)``): then a `URLProtocolClient` may be called
    /// right here, and a task must not be created, resumed or cancelled here.
    static var isOnSessionWorkQueue: Bool {
        #if canImport(FoundationNetworking)
        DispatchQueue.getSpecific(key: sessionWorkQueueKey) ?? false
        #else
        false
        #endif
    }

    #if canImport(FoundationNetworking)
    private static let sessionWorkQueueKey = DispatchSpecificKey<Bool>()

    /// The queue of `session`'s libcurl multi handle (`multiHandle.queue`), where it reads
    /// and writes its sockets; it targets the session's work queue.
    static func libcurlQueue(of session: URLSession) -> DispatchQueue? {
        Reflection.child(session, "multiHandle").flatMap { Reflection.child($0, "queue") } as? DispatchQueue
    }
    #endif

    /// The protocol class URLSession itself uses for HTTP, to which download tasks are handed.
    static let nativeHTTPProtocol: URLProtocol.Type? = {
        let classes = URLSessionConfiguration.default.protocolClasses ?? []
        return classes.lazy.compactMap { $0 as? URLProtocol.Type }.first {
            $0.canInit(with: URLRequest(url: URL(string: "http://127.0.0.1/")!))
        }
    }()

    #if canImport(FoundationNetworking)
    /// What an entry of the task registry says: `callDelegate`, the one case without a payload,
    /// streams; the completion-handler cases buffer, and those of the async APIs
    /// (`dataCompletionHandlerWithTaskDelegate(completion, delegate)`) carry the delegate the
    /// caller gave, second in their payload.
    private static func registeredBehaviour(
        _ entry: TaskRegistryReader.Entry
    ) -> (delivery: BodyDelivery, taskDelegate: (any URLSessionTaskDelegate)?)? {
        switch entry {
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

    /// Maps corelibs' internal `URLSessionTask._Body` (`none`, `data(DispatchData)`,
    /// `file(URL)`, `stream(InputStream)`).
    private static func uploadBody(fromKnownBody known: Any) -> URLTaskBody {
        let mirror = Mirror(reflecting: known)
        guard let payload = mirror.children.first else { return .none }
        switch payload.label {
        case "data":
            if let data = payload.value as? DispatchData { return .data(Data(data)) }
            if let data = payload.value as? Data { return .data(data) }
        case "file":
            if let url = payload.value as? URL { return .file(url) }
        case "stream":
            if let stream = payload.value as? InputStream { return .stream(stream) }
        default:
            break
        }
        return .none
    }
    #endif
}

#if canImport(FoundationNetworking)
/// The session a manager hands out on swift-corelibs-foundation: an ordinary `URLSession` that
/// owns its manager's pipeline.
///
/// Invalidating it, whether through the manager or directly, ends the pipeline as it ends the
/// session: `invalidateAndCancel()` cancels held tasks and the inner transfers,
/// `finishTasksAndInvalidate()` lets every task it accepted finish, then releases the inner
/// session. Released without invalidation, it releases the pipeline too (no task of it can be
/// running then: a running task keeps its session).
// @unchecked Sendable: restated from URLSession (its state is confined to its work queue); adds immutable `let`s, a locked record store, and fields written in init (or by a test before the first task).
final class ManagedURLSession: URLSession, @unchecked Sendable {
    let pipeline: Pipeline
    /// The number of this session's protocol class (``BridgeSlots``), retired with the session.
    let slot: Int
    /// corelibs' work queue of this session, found once: `Platform.facts` reads it for every task.
    /// (Named apart from corelibs' own `workQueue`, which the reflection below looks for.)
    private(set) var foundWorkQueue: DispatchQueue?
    /// The reader of corelibs' task registry of this session, found once; its contents are read
    /// only on the work queue. `nil` (not found): every task's body is buffered and the async
    /// APIs' per-task delegates are not called (see `Platform.facts`). Tests replace it before
    /// the session's first task to force the fallbacks (`CorelibsReadFallbackTests`).
    var registryReader: TaskRegistryReader?

    init(
        configuration: URLSessionConfiguration, delegate: (any URLSessionDelegate)?, delegateQueue: OperationQueue?, pipeline: Pipeline,
        slot: Int
    ) {
        self.pipeline = pipeline
        self.slot = slot
        super.init(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue)
        foundWorkQueue = Reflection.child(self, "workQueue") as? DispatchQueue
        registryReader = TaskRegistryReader(session: self)
    }

    /// How each task made by this session's open factories reports, and the upload body it was
    /// given: read in `startLoading` instead of corelibs' internals.
    let factoryRecords = TaskFactoryRecords()
    /// corelibs' name of the field where a task keeps its upload body (`knownBody`), read only
    /// for the uploads of the async APIs. Tests rename it before the first task to force the
    /// fallback: such an upload then fails with ``URLTaskError/uploadBodyUnavailable``.
    var uploadBodyField = "knownBody"

    deinit {
        BridgeRegistry.shared.unregister(slot)
        pipeline.outerSessionReleased()
    }

    // The open task factories (URLSession.swift:422-507): each records what it was asked for.
    // The async APIs make their tasks through an internal factory that none of these sees.

    override func dataTask(with request: URLRequest) -> URLSessionDataTask {
        factoryRecords.record(super.dataTask(with: request), .stream)
    }

    override func dataTask(with url: URL) -> URLSessionDataTask {
        factoryRecords.record(super.dataTask(with: url), .stream)
    }

    override func dataTask(
        with request: URLRequest, completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    ) -> URLSessionDataTask {
        factoryRecords.record(super.dataTask(with: request, completionHandler: completionHandler), .buffer)
    }

    override func dataTask(
        with url: URL, completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    ) -> URLSessionDataTask {
        factoryRecords.record(super.dataTask(with: url, completionHandler: completionHandler), .buffer)
    }

    override func uploadTask(with request: URLRequest, fromFile fileURL: URL) -> URLSessionUploadTask {
        factoryRecords.record(super.uploadTask(with: request, fromFile: fileURL), .stream, uploadBody: .file(fileURL))
    }

    override func uploadTask(with request: URLRequest, from bodyData: Data) -> URLSessionUploadTask {
        factoryRecords.record(super.uploadTask(with: request, from: bodyData), .stream, uploadBody: .data(bodyData))
    }

    override func uploadTask(withStreamedRequest request: URLRequest) -> URLSessionUploadTask {
        factoryRecords.record(super.uploadTask(withStreamedRequest: request), .stream, bodyFromDelegate: true)
    }

    override func uploadTask(
        with request: URLRequest, fromFile fileURL: URL,
        completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    ) -> URLSessionUploadTask {
        factoryRecords.record(
            super.uploadTask(with: request, fromFile: fileURL, completionHandler: completionHandler), .buffer, uploadBody: .file(fileURL))
    }

    override func uploadTask(
        with request: URLRequest, from bodyData: Data?, completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    ) -> URLSessionUploadTask {
        factoryRecords.record(
            super.uploadTask(with: request, from: bodyData, completionHandler: completionHandler), .buffer,
            uploadBody: bodyData.map { .data($0) })
    }

    override func downloadTask(with request: URLRequest) -> URLSessionDownloadTask {
        factoryRecords.record(super.downloadTask(with: request), .stream)
    }

    override func downloadTask(with url: URL) -> URLSessionDownloadTask {
        factoryRecords.record(super.downloadTask(with: url), .stream)
    }

    override func downloadTask(
        with request: URLRequest, completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void
    ) -> URLSessionDownloadTask {
        factoryRecords.record(super.downloadTask(with: request, completionHandler: completionHandler), .buffer)
    }

    override func downloadTask(
        with url: URL, completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void
    ) -> URLSessionDownloadTask {
        factoryRecords.record(super.downloadTask(with: url, completionHandler: completionHandler), .buffer)
    }

    override func finishTasksAndInvalidate() {
        super.finishTasksAndInvalidate()
        pipeline.outerSessionFinishing(self)
    }

    override func invalidateAndCancel() {
        // The pipeline's lifecycle first: nothing more is sent, and the transfers of the tasks
        // the session then cancels (each reaches `stopLoading`) are abandoned rather than
        // cancelled one by one. Held tasks fail only after corelibs' call returns: it reads its
        // task registry on this thread (URLSession.swift:331-337) while the work queue removes
        // the tasks that complete, so the pipeline completes none of its own meanwhile (a task
        // ending on its own then is as exposed as with a plain session).
        let cancel = pipeline.cancelRequested()
        super.invalidateAndCancel()
        pipeline.cancelHeldTasks(cancel)
    }
}
/// What one of ``ManagedURLSession``'s open task factories was asked for.
struct TaskFactoryRecord {
    /// A delegate-driven task streams; one with a completion handler buffers.
    var delivery: BodyDelivery
    /// The body given to an upload factory; `nil` for other tasks (a data task's body is on its
    /// request, which the protocol sees).
    var uploadBody: URLTaskBody?
    /// `uploadTask(withStreamedRequest:)`: the delegate gives the body.
    var bodyFromDelegate = false
}

/// The records of the tasks a ``ManagedURLSession``'s factories made, kept while the task lives
/// (a task may start loading more than once), found by identity.
final class TaskFactoryRecords: @unchecked Sendable {  // `entries` and `pruneAt` are guarded by `lock`.
    private struct Entry {
        weak var task: URLSessionTask?
        var record: TaskFactoryRecord
    }

    private let lock = NSLock()
    private var entries: [Int: Entry] = [:]
    /// The count at which entries of released tasks are dropped next (doubles with the live ones).
    private var pruneAt = 64

    /// Records `task`'s `delivery` and body; returns `task`.
    func record<Made: URLSessionTask>(
        _ task: Made, _ delivery: BodyDelivery, uploadBody: URLTaskBody? = nil, bodyFromDelegate: Bool = false
    ) -> Made {
        let record = TaskFactoryRecord(delivery: delivery, uploadBody: uploadBody, bodyFromDelegate: bodyFromDelegate)
        lock.withLock {
            entries[task.taskIdentifier] = Entry(task: task, record: record)
            if entries.count >= pruneAt {
                entries = entries.filter { $0.value.task != nil }
                pruneAt = max(64, entries.count * 2)
            }
        }
        return task
    }

    /// The record of `task`; `nil` if no factory of this session made it (an async API's task).
    func record(for task: URLSessionTask) -> TaskFactoryRecord? {
        lock.withLock {
            guard let entry = entries[task.taskIdentifier], entry.task === task else { return nil }
            return entry.record
        }
    }
}
#else
import ObjectiveC

/// Apple platforms: keeps a manager's pipeline alive for as long as its session, as an
/// associated object of the session, and retires the session's protocol class number with it.
final class PipelineOwner: NSObject {
    nonisolated(unsafe) private static var key: UInt8 = 0
    let pipeline: Pipeline
    let number: Int

    init(pipeline: Pipeline, number: Int) {
        self.pipeline = pipeline
        self.number = number
    }

    static func attach(_ owner: PipelineOwner, to session: URLSession) {
        objc_setAssociatedObject(session, &key, owner, .OBJC_ASSOCIATION_RETAIN_NONATOMIC)
    }

    deinit {
        BridgeRegistry.shared.unregister(number)
        pipeline.outerSessionReleased()
    }
}
#endif
