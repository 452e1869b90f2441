import Foundation
import URLTaskManager

/// The fences announced on a fleet credential's update channel, and the refreshes waiting for
/// one: a waiter is resumed by an announcement above the fence it knows, by the end of its
/// time, by the subscription's loss, or by its task's cancellation, whichever comes first.
/// Continuations are resumed outside the lock.
final class FleetAnnouncements: Sendable {
    private struct Waiter {
        let after: Int64
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var announced: Int64 = 0
        var ready = false
        var waiters: [UUID: Waiter] = [:]
        var readyWaiters: [UUID: CheckedContinuation<Bool, Never>] = [:]
    }

    private let state = LockedState(State())

    /// Whether the subscription heard its own test message and has not been lost since.
    var isReady: Bool { state.withLock { $0.ready } }

    /// A fence was announced: wakes the waiters that know an older one.
    func announce(_ fence: Int64) {
        let woken = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            state.announced = max(state.announced, fence)
            let due = state.waiters.filter { $0.value.after < fence }
            for id in due.keys { state.waiters[id] = nil }
            return due.values.map(\.continuation)
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

    /// The subscription ended: announcements may be missed until it is active again, so the
    /// waiters look at Redis now rather than wait out their time.
    func markLost() {
        state.withLock { $0.ready = false }
        wakeAll()
    }

    /// The subscription was confirmed (again): announcements published while it was away were
    /// missed, so the fence waiters look at Redis now (as if a fence had been announced: their
    /// lease holder is not presumed dead).
    func resubscribed() {
        let woken = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            defer { state.waiters = [:] }
            return state.waiters.values.map(\.continuation)
        }
        for continuation in woken { continuation.resume(returning: true) }
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

    /// Whether a fence above `after` was announced within `limit` (`true` at once if one was).
    func wait(forFenceAbove after: Int64, within limit: Duration) async -> Bool {
        let id = UUID()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.announced > after { return true }
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
