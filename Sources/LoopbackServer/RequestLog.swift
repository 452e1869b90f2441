import Foundation

/// The server's record of arrived requests, plus the async waiters that want to know when enough
/// of them have arrived (resumed from the connection thread that appends, never by polling).
final class RequestLog: @unchecked Sendable {  // unchecked: all mutable state is only touched while holding `lock`
    private struct Waiter {
        let path: String?
        let count: Int
        let continuation: CheckedContinuation<[RecordedRequest], any Error>
        var timeoutTask: Task<Void, Never>?
    }

    private let lock = NSLock()
    private var records: [RecordedRequest] = []
    private var nextSequence = 1
    private var waiters: [Int: Waiter] = [:]
    private var cancelledBeforeRegistration: Set<Int> = []
    private var nextWaiterID = 1
    private var stopped = false

    /// All records in arrival order.
    var all: [RecordedRequest] {
        lock.lock()
        defer { lock.unlock() }
        return records
    }

    /// Records whose path is `path` (nil = all), in arrival order.
    func matching(path: String?) -> [RecordedRequest] {
        lock.lock()
        defer { lock.unlock() }
        return filtered(path: path)
    }

    /// Stamps the next sequence number on a record built by `make`, stores it and wakes satisfied waiters.
    @discardableResult
    func append(_ make: (_ sequence: Int) -> RecordedRequest) -> RecordedRequest {
        lock.lock()
        let record = make(nextSequence)
        nextSequence += 1
        records.append(record)
        var ready: [(Waiter, [RecordedRequest])] = []
        for (id, waiter) in waiters where waiter.path == nil || waiter.path == record.path {
            let hits = filtered(path: waiter.path)
            if hits.count >= waiter.count {
                ready.append((waiter, Array(hits.prefix(waiter.count))))
                waiters[id] = nil
            }
        }
        lock.unlock()
        for (waiter, hits) in ready {
            waiter.timeoutTask?.cancel()
            waiter.continuation.resume(returning: hits)
        }
        return record
    }

    /// Forgets every record (sequence numbers keep counting up).
    func reset() {
        lock.lock()
        records.removeAll()
        lock.unlock()
    }

    /// Suspends until `count` records for `path` exist, then returns the first `count` of them.
    func wait(path: String?, count: Int, timeout: Duration) async throws -> [RecordedRequest] {
        let id = lock.withLock {
            defer { nextWaiterID += 1 }
            return nextWaiterID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                register(id: id, path: path, count: count, timeout: timeout, continuation: continuation)
            }
        } onCancel: {
            finish(id: id, with: CancellationError())
        }
    }

    /// Fails every pending waiter with `.shutDown`, and any later ones immediately.
    func stop() {
        lock.lock()
        stopped = true
        let pending = waiters.values
        waiters.removeAll()
        lock.unlock()
        for waiter in pending {
            waiter.timeoutTask?.cancel()
            waiter.continuation.resume(throwing: LoopbackServerError.shutDown)
        }
    }

    private func register(
        id: Int, path: String?, count: Int, timeout: Duration,
        continuation: CheckedContinuation<[RecordedRequest], any Error>
    ) {
        lock.lock()
        let hits = filtered(path: path)
        if hits.count >= count {
            lock.unlock()
            continuation.resume(returning: Array(hits.prefix(count)))
            return
        }
        if cancelledBeforeRegistration.remove(id) != nil {
            lock.unlock()
            continuation.resume(throwing: CancellationError())
            return
        }
        if stopped {
            lock.unlock()
            continuation.resume(throwing: LoopbackServerError.shutDown)
            return
        }
        waiters[id] = Waiter(path: path, count: count, continuation: continuation, timeoutTask: nil)
        lock.unlock()
        let timeoutTask = Task { [self] in
            do { try await Task.sleep(for: timeout) } catch { return }
            let received = matching(path: path).count
            finish(id: id, with: LoopbackServerError.timeout(path: path, expected: count, received: received))
        }
        lock.lock()
        let stillWaiting = waiters[id] != nil
        if stillWaiting { waiters[id]?.timeoutTask = timeoutTask }
        lock.unlock()
        if !stillWaiting { timeoutTask.cancel() }
    }

    private func finish(id: Int, with error: any Error) {
        lock.lock()
        guard let waiter = waiters.removeValue(forKey: id) else {
            if error is CancellationError { cancelledBeforeRegistration.insert(id) }
            lock.unlock()
            return
        }
        lock.unlock()
        waiter.timeoutTask?.cancel()
        waiter.continuation.resume(throwing: error)
    }

    private func filtered(path: String?) -> [RecordedRequest] {
        guard let path else { return records }
        return records.filter { $0.path == path }
    }
}
