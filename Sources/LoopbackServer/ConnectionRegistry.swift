import Foundation

/// The live connections of one server, so shutdown can wake every blocked socket call, wait for the
/// connection threads to finish, and interrupt response delays; also the server's stop flag.
final class ConnectionRegistry: @unchecked Sendable {  // unchecked: all mutable state is guarded by `condition`
    private struct Entry {
        let fd: Int32
        var inHandler: Bool
    }

    private let condition = NSCondition()
    private var entries: [Int: Entry] = [:]
    private var nextID = 1
    private var stopped = false

    /// Whether `stop()` has been called.
    var isStopped: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopped
    }

    /// Connections accepted so far.
    var acceptedCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return nextID - 1
    }

    /// Connections currently open.
    var openCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return entries.count
    }

    /// Tracks a freshly accepted socket and returns its connection ID; nil (socket closed) once stopped.
    func register(fd: Int32) -> Int? {
        condition.lock()
        defer { condition.unlock() }
        if stopped {
            Socket.closeDescriptor(fd)
            return nil
        }
        let id = nextID
        nextID += 1
        entries[id] = Entry(fd: fd, inHandler: false)
        return id
    }

    /// Marks whether connection `id` is inside a user handler (shutdown does not wait for those).
    func setInHandler(_ id: Int, _ inHandler: Bool) {
        condition.lock()
        entries[id]?.inHandler = inHandler
        condition.broadcast()
        condition.unlock()
    }

    /// Forgets connection `id` and closes its socket; under the lock, so shutdown never touches a reused fd.
    func close(_ id: Int) {
        condition.lock()
        if let entry = entries.removeValue(forKey: id) { Socket.closeDescriptor(entry.fd) }
        condition.broadcast()
        condition.unlock()
    }

    /// Sets the stop flag and shuts down every live socket, waking threads blocked in recv/send or a delay.
    /// Returns false if it was already stopped.
    @discardableResult
    func stop() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        if stopped { return false }
        stopped = true
        for entry in entries.values { Socket.shutdownBoth(entry.fd) }
        condition.broadcast()
        return true
    }

    /// Waits until every connection except `excluded` has closed or is parked in a handler, or `deadline` passes.
    func waitUntilIdle(excluding excluded: Int?, deadline: Date) {
        condition.lock()
        defer { condition.unlock() }
        while entries.contains(where: { $0.key != excluded && !$0.value.inHandler }) {
            if !condition.wait(until: deadline) { return }
        }
    }

    /// Sleeps for `duration` unless the server stops first; returns false if it stopped.
    func sleep(for duration: Duration) -> Bool {
        let deadline = Date(timeIntervalSinceNow: duration.seconds)
        condition.lock()
        defer { condition.unlock() }
        while !stopped {
            if !condition.wait(until: deadline) { return !stopped }
        }
        return false
    }
}
