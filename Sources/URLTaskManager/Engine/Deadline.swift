import Foundation

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
