import Foundation

/// A FIFO async mutex: lets one interception of a given interceptor run at a time.
///
/// Used for interceptors that ask for it (``URLTaskInterceptor/interceptsOneAtATime``) so
/// that the `currentBatchCount` each call sees includes the tasks held by the calls before it.
final class SerialGate: @unchecked Sendable {  // `busy` and `waiters` are guarded by `lock`.
    private let lock = NSLock()
    private var busy = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let acquired: Bool = lock.withLock {
                if busy {
                    waiters.append(continuation)
                    return false
                }
                busy = true
                return true
            }
            if acquired { continuation.resume() }
        }
    }

    func release() {
        let next: CheckedContinuation<Void, Never>? = lock.withLock {
            if waiters.isEmpty {
                busy = false
                return nil
            }
            return waiters.removeFirst()
        }
        next?.resume()
    }
}
