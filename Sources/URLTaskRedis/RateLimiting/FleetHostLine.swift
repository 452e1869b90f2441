import Foundation
import URLTaskManager

/// One line per host inside one process: only the request at its head asks Redis for a turn, the
/// others wait behind it in arrival order. Without it every waiting request of the process would
/// wake at the same moment and ask again (hundreds of round trips for one token); with it a
/// process asks about once per turn, and its requests go in the order they came.
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
        var waiting: [UInt64: CheckedContinuation<Void, any Error>] = [:]
        var lastTicket: UInt64 = 0
    }

    private let state = LockedState(State())

    /// Returns when the caller is at the head of `host`'s line; throws `CancellationError` if
    /// the caller is cancelled first.
    func enter(_ host: String) async throws {
        let ticket: UInt64 = state.withLock { state in
            state.lastTicket += 1
            return state.lastTicket
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let go: Bool? = state.withLock { state in
                    // Cancelled before it got here: the handler found nothing to remove.
                    if Task.isCancelled { return false }
                    guard var line = state.lines[host] else {
                        state.lines[host] = Line()
                        return true
                    }
                    line.queue.append(ticket)
                    state.lines[host] = line
                    state.waiting[ticket] = continuation
                    return nil
                }
                switch go {
                case true?: continuation.resume()
                case false?: continuation.resume(throwing: CancellationError())
                case nil: break
                }
            }
        } onCancel: {
            let continuation: CheckedContinuation<Void, any Error>? = state.withLock { state in
                guard let continuation = state.waiting.removeValue(forKey: ticket) else { return nil }
                state.lines[host]?.queue.removeAll { $0 == ticket }
                return continuation
            }
            continuation?.resume(throwing: CancellationError())
        }
    }

    /// The head leaves: the next in line (if any) becomes the head.
    func leave(_ host: String) {
        let next: CheckedContinuation<Void, any Error>? = state.withLock { state in
            guard var line = state.lines[host] else { return nil }
            guard !line.queue.isEmpty else {
                state.lines[host] = nil
                return nil
            }
            let ticket = line.queue.removeFirst()
            state.lines[host] = line
            return state.waiting.removeValue(forKey: ticket)
        }
        next?.resume()
    }

    /// How many hosts have a line (for tests: a host nobody waits for keeps nothing).
    var hostCount: Int { state.withLock { $0.lines.count } }
}

extension FleetHostLine {
    /// How many wait behind the head of `host`'s line (for tests).
    func queuedCount(_ host: String) -> Int { state.withLock { $0.lines[host]?.queue.count ?? 0 } }
}
