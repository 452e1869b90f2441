import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Runs the ``ConnectionSlotsStateMachine`` of one manager under a lock and hands freed slots
/// to the tasks that wait for them.
final class ConnectionSlots: @unchecked Sendable {  // `machine` and `waiting` are guarded by `lock`.
    private let lock = NSLock()
    private var machine: ConnectionSlotsStateMachine
    private var waiting: [URLTask.ID: TaskRun] = [:]

    init(limit: Int) {
        machine = ConnectionSlotsStateMachine(limit: limit)
    }

    /// The key requests share slots under: scheme, host and port, as URLSession pools connections.
    static func host(of request: URLRequest) -> String {
        guard let url = request.url else { return "" }
        let scheme = url.scheme?.lowercased() ?? ""
        let port = url.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : 0)
        return "\(scheme)://\(url.host?.lowercased() ?? ""):\(port)"
    }

    /// Returns `true` if `run` may send now; otherwise it gets ``TaskRun/connectionGranted(host:)`` later.
    func acquire(_ run: TaskRun, host: String) -> Bool {
        lock.withLock {
            switch machine.acquire(run.id, host: host) {
            case .send:
                return true
            case .wait:
                waiting[run.id] = run
                return false
            }
        }
    }

    func release(host: String) {
        let next: TaskRun? = lock.withLock {
            machine.release(host: host).flatMap { waiting.removeValue(forKey: $0) }
        }
        // Off the caller's thread: it may be the transport's delegate queue.
        if let next { DispatchQueue.global().async { next.connectionGranted(host: host) } }
    }

    func remove(_ run: TaskRun, host: String) {
        lock.withLock {
            if machine.remove(run.id, host: host) { waiting[run.id] = nil }
        }
    }

    /// Hosts with a request in flight: 0 once every transfer ended and gave its slot back.
    var busyHosts: Int { lock.withLock { machine.busyHosts } }
    /// Tasks waiting for a slot.
    var waitingCount: Int { lock.withLock { waiting.count } }
}
