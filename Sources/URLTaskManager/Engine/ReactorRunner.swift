import Foundation

/// One reactor of a manager: its configuration, its name for errors, what it reports of a task
/// (read outside the engine's lock), and a way to run its work within its timeout
/// (``withDeadline(_:_:)``, below). Its runs, gates and stamps are part of admission
/// (``AdmissionStateMachine``); this type holds no state of its own.
final class ReactorRunner: Sendable {
    enum Outcome {
        case succeeded
        case failed(any Error)
        /// No run can help this task: give its caller the response it received.
        case declined
    }

    let index: Int
    let reactor: any URLTaskReactor
    let configuration: URLTaskReactorConfiguration
    /// Who it is in errors and events: its index, and its type's name (disambiguated).
    let component: URLTaskError.Component
    var name: String { component.name }
    /// Its type, as a ``URLTaskPolicy`` names the reactors a request skips.
    let type: URLTaskPolicy.ComponentType

    /// Whether the reactor keeps a credential version of its own
    /// (``URLTaskReactor/currentCredentialVersion()`` is not `nil`, asked once): a task it covers
    /// that is handed a connection slot reads its versions again before it leaves.
    let reportsCredentialVersions: Bool
    /// Its mode's facts every task asks (``URLTaskReactorConfiguration/Mode``), read once.
    let holdsNewTasks: Bool
    let isShared: Bool
    let afterwards: URLTaskReactorConfiguration.Afterwards

    init(reactor: any URLTaskReactor, component: URLTaskError.Component) {
        self.index = component.index ?? 0
        self.reactor = reactor
        self.reportsCredentialVersions = reactor.currentCredentialVersion() != nil
        self.type = URLTaskPolicy.ComponentType(Swift.type(of: reactor))
        self.configuration = reactor.configuration
        self.holdsNewTasks = configuration.mode.holdsNewTasks
        self.isShared = configuration.mode.isShared
        self.afterwards = configuration.mode.afterwards
        self.component = component
    }

    // MARK: Readings (the reactor's code: called without the lock, just before the event they inform)

    /// What the reactor reports of `task` (``ReactorRunStateMachine/ReportedVersion``), if it
    /// keeps a credential version of its own.
    func reportedVersion(of task: URLTask) -> ReactorRunStateMachine.ReportedVersion? {
        guard let current = reactor.currentCredentialVersion(), let sent = reactor.credentialVersion(of: task) else { return nil }
        return .init(sent: sent, current: current)
    }

    /// The credential version `task`'s headers were decided under, for its `sent` event: the
    /// reactor's own (``URLTaskReactor/credentialVersion(of:)``) or, for a reactor that holds new
    /// tasks (a credential's), its run the task was stamped with (`stamped`, per reactor index).
    /// A reactor with neither (a retry) has none.
    func credentialVersion(of task: URLTask, stamped: [Int: Int]) -> Int? {
        if let own = reactor.credentialVersion(of: task) { return own }
        return holdsNewTasks ? stamped[index] : nil
    }

    // MARK: Work

    /// Runs the reactor's work once, within its timeout, and makes its failure what the caller
    /// receives (``URLTaskError/delivered(_:from:code:)``): what a single flight run and a
    /// per-task reaction both do.
    func runWork(outcome: URLTaskOutcome, body: Data, task: URLTask) async -> Outcome {
        do {
            try await withDeadline(configuration.timeout) {
                try await self.reactor.react(to: outcome, body: body, of: task)
            }
            return .succeeded
        } catch let error as ReactorDeadlineExceeded {
            return .failed(URLTaskError.reactorTimedOut(component, after: error.limit))
        } catch {
            return .failed(URLTaskError.delivered(error, from: component, code: .reactorFailed))
        }
    }
}

// MARK: - The deadline

struct ReactorDeadlineExceeded: Error {
    let limit: Duration
}

/// Runs `work`, throwing ``ReactorDeadlineExceeded`` (and cancelling the work) if it takes
/// longer than `limit`. Cancelling the caller cancels the work and throws `CancellationError`.
///
/// Neither the deadline nor the caller's cancellation waits for the work to notice: work that
/// ignores cancellation (an `await` on another unstructured task, a blocking call) would
/// otherwise keep every task waiting on it well past the limit. Such work is left to finish on
/// its own and its result is dropped.
func withDeadline(_ limit: Duration?, _ work: @escaping @Sendable () async throws -> Void) async throws {
    let race = DeadlineRace()
    try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { continuation in
            race.begin(continuation, limit: limit, work: work)
        }
    } onCancel: {
        race.finish(.failure(CancellationError()))
    }
}

/// The first of work, deadline and cancellation to finish wins; the others are cancelled.
private final class DeadlineRace: Sendable {
    private enum Phase {
        case idle
        case running(CheckedContinuation<Void, any Error>, [Task<Void, Never>])
        case finished
    }

    private struct State {
        var phase = Phase.idle
        var early: Result<Void, any Error>?
    }

    private let state = LockedState(State())

    func begin(_ continuation: CheckedContinuation<Void, any Error>, limit: Duration?, work: @escaping @Sendable () async throws -> Void) {
        let tooLate: Result<Void, any Error>? = state.withLock { state in
            guard case .idle = state.phase else { return state.early }
            state.phase = .running(continuation, [])
            return nil
        }
        if let tooLate { return continuation.resume(with: tooLate) }
        var tasks = [
            Task { [self] in
                do {
                    try await work()
                    finish(.success(()))
                } catch {
                    finish(.failure(error))
                }
            }
        ]
        if let limit {
            tasks.append(
                Task { [self] in
                    // `Task.sleep` traps beyond `Int64` seconds from now: a caller's timeout is clamped.
                    guard (try? await Task.sleep(for: limit.clampedWait)) != nil else { return }
                    finish(.failure(ReactorDeadlineExceeded(limit: limit)))
                })
        }
        let finishedMeanwhile: Bool = state.withLock { state in
            guard case .running(let continuation, _) = state.phase else { return true }
            state.phase = .running(continuation, tasks)
            return false
        }
        if finishedMeanwhile { tasks.forEach { $0.cancel() } }
    }

    func finish(_ result: Result<Void, any Error>) {
        let winner: (CheckedContinuation<Void, any Error>, [Task<Void, Never>])? = state.withLock { state in
            switch state.phase {
            case .idle:
                // Cancelled before `begin`: answer as soon as it runs.
                state.early = result
                state.phase = .finished
                return nil
            case .running(let continuation, let tasks):
                state.phase = .finished
                return (continuation, tasks)
            case .finished:
                return nil
            }
        }
        guard let (continuation, tasks) = winner else { return }
        tasks.forEach { $0.cancel() }
        continuation.resume(with: result)
    }
}
