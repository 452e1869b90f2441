import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a task's storage (``TaskRun``) needs from the pipeline that runs it: the chain's
/// components, the shared storages (admission, the batches), and every piece of I/O (the
/// interceptors' code, the transport, threads and timers).
///
/// ``Pipeline`` is the real one. The randomized model (`PipelineModelTests`) implements it with
/// the real admission and batch storages and simulated I/O, so that it drives the real task
/// storage and its machine, not a copy of their glue.
protocol TaskEnvironment: AnyObject, Sendable {
    /// Threads, timers and the reactors' work.
    var runtime: any PipelineRuntime { get }
    /// Who each interceptor is in errors and events.
    var interceptorComponents: [URLTaskError.Component] { get }
    /// Each interceptor's type, as a ``URLTaskPolicy`` names the ones a request skips.
    var interceptorTypes: [URLTaskPolicy.ComponentType] { get }
    var reactors: [ReactorRunner] { get }
    var options: URLTaskManager.Options { get }
    /// The configuration's `httpAdditionalHeaders`, put on each caller's request; `nil` when it has none.
    var additionalHeaders: AdditionalHeaders? { get }
    var events: EventHub<URLTaskEvent> { get }
    var engine: EngineStorage { get }
    var batches: [BatchStorage] { get }
    /// Where an authentication challenge's proposed credential is looked up.
    var credentialStorage: URLCredentialStorage? { get }
    /// Whether transfers on the wire are abandoned, not stopped one by one (the session was
    /// invalidated and cancelled).
    var abandonsTransfers: Bool { get }

    /// Runs interceptor `index` on `task`, then calls `decided` once with its outcome, the task
    /// as it changed it, and the batch's flush count it decided under. Returns the Swift task it
    /// runs in, or `nil` if it decided before returning (without suspending).
    func intercept(
        _ index: Int, _ task: URLTask,
        decided: @escaping @Sendable (Result<InterceptCommand, any Error>, URLTask, Int) -> Void
    ) -> Task<Void, Never>?

    /// The manager's outcome observers; `nil` when it has none.
    var outcomeObservers: OutcomeObservers? { get }

    /// The transfers identical requests share; `nil` when the manager shares none.
    var sharing: SharedTransfers? { get }

    /// Creates and starts the transfer of `request`, then calls `started` with its inner task,
    /// or the error the task fails with (the session was invalidated). With `share`, a transfer
    /// of an identical request already on its way is joined instead (``SharedTransfers``), and
    /// the task's role is announced through `share` before any of the transfer's events.
    /// `delivery` says how the caller takes the answer.
    func startTransfer(
        _ request: URLRequest, body: URLTaskBody, callerURL: URL?, events: any TransportEvents, share: TransferShare?,
        delivery: TransferDelivery,
        started: @escaping @Sendable (Result<any TransferHandle, any Error>) -> Void
    )

    /// Stops a transfer (the caller cancelled, or the manager aborted the task).
    func stopTransfer(_ transfer: any TransferHandle)

    /// The task has completed: it leaves admission and the pipeline counts it out.
    func taskEnded(_ task: TaskRun)
}

/// The inner task of a transfer, as a task's machine keeps it: something to stop.
protocol TransferHandle: AnyObject, Sendable {}

/// A timer of the pipeline's runtime (``PipelineRuntime/at(_:_:)``), cancelled when what it
/// bounds has ended, so that it does not outlive it.
protocol PipelineTimer: Sendable {
    func cancel()
}

/// A Dispatch timer source, cancelled once: when it fires, or when cancelled before. Its event
/// handler holds it until then (Dispatch releases the handler on cancellation).
final class DispatchPipelineTimer: PipelineTimer, Sendable {
    /// The source until it is cancelled.
    private let source: LockedState<(any DispatchSourceTimer)?>

    init(deadline: DispatchTime, _ work: @escaping @Sendable () -> Void) {
        let source = DispatchSource.makeTimerSource(queue: .global())
        self.source = LockedState(source)
        source.schedule(deadline: deadline)
        source.setEventHandler { [self] in
            cancel()
            work()
        }
        source.resume()
    }

    func cancel() {
        source.withLock { source in
            defer { source = nil }
            return source
        }?.cancel()
    }
}

extension URLSessionTask: TransferHandle {}

/// Where the pipeline's storages run what is not theirs to run under a caller's thread: hops to
/// another thread, timers, and the reactors' work. ``LiveRuntime`` uses Dispatch and Swift
/// tasks; the randomized model queues each piece and runs them in the order its seed draws.
protocol PipelineRuntime: Sendable {
    /// The time timers and waits count from.
    var now: DispatchTime { get }
    /// Runs `work` soon on another thread (the caller may be the session's work queue, or a
    /// transport callback).
    func async(_ work: @escaping @Sendable () -> Void)
    /// Runs `work` at `deadline` (a timer: it must check that its reason still holds), unless
    /// the returned timer is cancelled first.
    @discardableResult
    func at(_ deadline: DispatchTime, _ work: @escaping @Sendable () -> Void) -> any PipelineTimer
    /// Runs `reactor`'s work once on `outcome`, then calls `finished` with how it went.
    /// Returns the Swift task it runs in.
    func react(
        _ reactor: ReactorRunner, to outcome: URLTaskOutcome, body: Data, of task: URLTask,
        finished: @escaping @Sendable (ReactorRunner.Outcome) -> Void
    ) -> Task<Void, Never>?
}

/// The runtime of a real pipeline: Dispatch's global queue and Swift tasks.
struct LiveRuntime: PipelineRuntime {
    var now: DispatchTime { .now() }

    func async(_ work: @escaping @Sendable () -> Void) {
        DispatchQueue.global().async(execute: work)
    }

    /// A timer source rather than `asyncAfter`, whose timer lives until its deadline whatever
    /// happens: a task's timeouts (60 s by default) then outlived the task, two for each task
    /// that waited, and memory grew with the requests sent, beyond a plain session's (see the
    /// Performance article, "Memory over a long run"). A cancelled source is released at once.
    @discardableResult
    func at(_ deadline: DispatchTime, _ work: @escaping @Sendable () -> Void) -> any PipelineTimer {
        DispatchPipelineTimer(deadline: deadline, work)
    }

    func react(
        _ reactor: ReactorRunner, to outcome: URLTaskOutcome, body: Data, of task: URLTask,
        finished: @escaping @Sendable (ReactorRunner.Outcome) -> Void
    ) -> Task<Void, Never>? {
        Task { finished(await reactor.runWork(outcome: outcome, body: body, task: task)) }
    }
}
