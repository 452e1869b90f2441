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
private final class DeadlineRace: @unchecked Sendable {  // all state is guarded by `lock`.
    private enum State {
        case idle
        case running(CheckedContinuation<Void, any Error>, [Task<Void, Never>])
        case finished
    }

    private let lock = NSLock()
    private var state = State.idle
    private var early: Result<Void, any Error>?

    func begin(_ continuation: CheckedContinuation<Void, any Error>, limit: Duration?, work: @escaping @Sendable () async throws -> Void) {
        let tooLate: Result<Void, any Error>? = lock.withLock {
            guard case .idle = state else { return early }
            state = .running(continuation, [])
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
        let finishedMeanwhile: Bool = lock.withLock {
            guard case .running(let continuation, _) = state else { return true }
            state = .running(continuation, tasks)
            return false
        }
        if finishedMeanwhile { tasks.forEach { $0.cancel() } }
    }

    func finish(_ result: Result<Void, any Error>) {
        let winner: (CheckedContinuation<Void, any Error>, [Task<Void, Never>])? = lock.withLock {
            switch state {
            case .idle:
                // Cancelled before `begin`: answer as soon as it runs.
                early = result
                state = .finished
                return nil
            case .running(let continuation, let tasks):
                state = .finished
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
