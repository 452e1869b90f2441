import Foundation
import URLTaskManager

/// One line per host inside one process: only the request at its head asks Redis (or, while
/// Redis is away, the local bucket) for a turn, the others wait behind it in arrival order.
/// Without it every waiting request of the process would wake at the same moment and ask again
/// (hundreds of round trips for one token); with it a process asks about once per turn, and its
/// requests go in the order they came. Since the head holds it through a local turn too, the
/// requests waiting when Redis returns are still here, and ask the shared bucket, rather than in
/// a local queue that would go on draining beside it.
///
/// A request that is cancelled while in line leaves at once; the holder passes the head on with
/// ``leave(_:)``. A host nobody is in line for keeps no state.
final class FleetHostLine: Sendable {
    private struct Line {
        var queue: [UInt64] = []
    }

    private struct State {
        /// The hosts someone holds the head of, with who waits behind.
        var lines: [String: Line] = [:]
        var waiting: [UInt64: CheckedContinuation<Entry, any Error>] = [:]
        var lastTicket: UInt64 = 0
    }

    private let state = LockedState(State())

    /// What an arriving caller does, decided under the lock.
    private enum Step {
        case go, cancelled, wait
        case refuse(Int)
    }

    /// How ``enter(_:refusingPast:)`` ended.
    enum Entry: Equatable {
        /// The caller is at the head of the line.
        case head
        /// `queued` already wait behind the head, as many as the caller allowed: it did not join.
        case refused(queued: Int)
    }

    /// Returns when the caller is at the head of `host`'s line; throws `CancellationError` if
    /// the caller is cancelled first.
    func enter(_ host: String) async throws {
        _ = try await enter(host, refusingPast: nil)
    }

    /// The same, unless `maximumQueued` (or more) already wait behind the head: then the caller
    /// does not join (a bounded line, as `RateLimiter`'s `maximumQueueLength` bounds its own).
    func enter(_ host: String, refusingPast maximumQueued: Int?) async throws -> Entry {
        let ticket: UInt64 = state.withLock { state in
            state.lastTicket += 1
            return state.lastTicket
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Entry, any Error>) in
                let step: Step = state.withLock { state in
                    // Cancelled before it got here: the handler found nothing to remove.
                    if Task.isCancelled { return .cancelled }
                    guard var line = state.lines[host] else {
                        state.lines[host] = Line()
                        return .go
                    }
                    if let maximumQueued, line.queue.count >= maximumQueued { return .refuse(line.queue.count) }
                    line.queue.append(ticket)
                    state.lines[host] = line
                    state.waiting[ticket] = continuation
                    return .wait
                }
                switch step {
                case .go: continuation.resume(returning: .head)
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .refuse(let queued): continuation.resume(returning: .refused(queued: queued))
                case .wait: break
                }
            }
        } onCancel: {
            let continuation: CheckedContinuation<Entry, any Error>? = state.withLock { state in
                guard let continuation = state.waiting.removeValue(forKey: ticket) else { return nil }
                state.lines[host]?.queue.removeAll { $0 == ticket }
                return continuation
            }
            continuation?.resume(throwing: CancellationError())
        }
    }

    /// The head leaves: the next in line (if any) becomes the head.
    func leave(_ host: String) {
        let next: CheckedContinuation<Entry, any Error>? = state.withLock { state in
            guard var line = state.lines[host] else { return nil }
            guard !line.queue.isEmpty else {
                state.lines[host] = nil
                return nil
            }
            let ticket = line.queue.removeFirst()
            state.lines[host] = line
            return state.waiting.removeValue(forKey: ticket)
        }
        next?.resume(returning: .head)
    }

    /// How many hosts have a line (for tests: a host nobody waits for keeps nothing).
    var hostCount: Int { state.withLock { $0.lines.count } }
}

extension FleetHostLine {
    /// How many wait behind the head of `host`'s line (for tests).
    func queuedCount(_ host: String) -> Int { state.withLock { $0.lines[host]?.queue.count ?? 0 } }
}
