import Foundation
import URLTaskManager

/// The messages heard on a fleet credential's update channel, and the refreshes waiting for
/// one. A message is a hint, never a fact: it only tells a waiter to read the record (the
/// record's fence decides), so nothing a publisher sends is kept. Messages are counted
/// (``heardCount``); a waiter waits for one heard after the count it read before its last read
/// of the record, so one heard in between is not missed. A waiter is resumed by such a message,
/// by the subscription's loss or renewal (messages may have been missed), by the end of its
/// time, or by its task's cancellation, whichever comes first. Continuations are resumed outside
/// the lock.
final class FleetAnnouncements: Sendable {
    private struct Waiter {
        let after: Int
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var heard = 0
        var ready = false
        var waiters: [UUID: Waiter] = [:]
        var readyWaiters: [UUID: CheckedContinuation<Bool, Never>] = [:]
    }

    private let state = LockedState(State())

    /// Whether the subscription heard its own test message and has not been lost since.
    var isReady: Bool { state.withLock { $0.ready } }

    /// How many hints were heard so far (messages, and the subscription's losses and renewals).
    var heardCount: Int { state.withLock { $0.heard } }

    /// A message was heard on the channel: wakes every waiter.
    func heard() {
        let woken = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            state.heard += 1
            defer { state.waiters = [:] }
            return state.waiters.values.map(\.continuation)
        }
        for continuation in woken { continuation.resume(returning: true) }
    }

    /// The subscription is active.
    func markReady() {
        let woken = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            state.ready = true
            defer { state.readyWaiters = [:] }
            return Array(state.readyWaiters.values)
        }
        for continuation in woken { continuation.resume(returning: true) }
    }

    /// The subscription ended: messages may be missed until it is active again, so the waiters
    /// read the record now rather than wait out their time.
    func markLost() {
        state.withLock { $0.ready = false }
        heard()
    }

    /// The subscription was confirmed (again): messages published while it was away were
    /// missed, so the waiters read the record now (their lease holder is not presumed dead).
    func resubscribed() {
        heard()
    }

    /// Wakes every waiter (as if its time had run out).
    func wakeAll() {
        let woken = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            defer {
                state.waiters = [:]
                state.readyWaiters = [:]
            }
            return state.waiters.values.map(\.continuation) + state.readyWaiters.values
        }
        for continuation in woken { continuation.resume(returning: false) }
    }

    /// Whether a hint was heard after the `after`th within `limit` (`true` at once if one was).
    func wait(forMessageAfter after: Int, within limit: Duration) async -> Bool {
        let id = UUID()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.heard > after { return true }
                    state.waiters[id] = Waiter(after: after, continuation: continuation)
                    return false
                }
                if now { return continuation.resume(returning: true) }
                Task { [weak self] in
                    try? await Task.sleep(for: limit)
                    self?.resume(id, with: false)
                }
            }
        } onCancel: {
            resume(id, with: false)
        }
    }

    /// Whether the subscription became ready within `limit`.
    func waitUntilReady(within limit: Duration) async -> Bool {
        let id = UUID()
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let now = state.withLock { state -> Bool in
                if state.ready { return true }
                state.readyWaiters[id] = continuation
                return false
            }
            if now { return continuation.resume(returning: true) }
            Task { [weak self] in
                try? await Task.sleep(for: limit)
                let continuation = self?.state.withLock { $0.readyWaiters.removeValue(forKey: id) }
                continuation?.resume(returning: false)
            }
        }
    }

    private func resume(_ id: UUID, with value: Bool) {
        let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
        waiter?.continuation.resume(returning: value)
    }

    /// `task`'s value, or `CancellationError` as soon as the caller is cancelled; the task itself
    /// runs on (a refresh whose endpoint rotated the refresh token must still store it).
    static func value<Value: Sendable>(of task: Task<Value, any Error>) async throws -> Value {
        let once = ResumeOnce<Value>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
                once.set(continuation)
                Task { once.resume(with: await task.result) }
            }
        } onCancel: {
            once.resume(with: .failure(CancellationError()))
        }
    }
}

/// A continuation resumed once, by whichever comes first; a result that comes before the
/// continuation is kept for it.
private final class ResumeOnce<Value: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Value, any Error>?
        var result: Result<Value, any Error>?
        var resumed = false
    }

    private let state = LockedState(State())

    func set(_ continuation: CheckedContinuation<Value, any Error>) {
        let early = state.withLock { state -> Result<Value, any Error>? in
            guard let result = state.result, !state.resumed else {
                state.continuation = continuation
                return nil
            }
            state.resumed = true
            return result
        }
        if let early { continuation.resume(with: early) }
    }

    func resume(with result: Result<Value, any Error>) {
        let continuation = state.withLock { state -> CheckedContinuation<Value, any Error>? in
            guard !state.resumed, state.result == nil else { return nil }
            guard let continuation = state.continuation else {
                state.result = result
                return nil
            }
            state.resumed = true
            state.continuation = nil
            return continuation
        }
        continuation?.resume(with: result)
    }
}
