import Foundation

/// Waits until `isReleased()` holds, re-checking it every few milliseconds until `timeout`.
///
/// Deallocation of the library's internal objects (an inner session lets go of its delegate on
/// its own queue, curl closes its sockets when its handle is freed) and the library's internal
/// counts (tasks held in a batch, events collected by a reader task) have no event a test can
/// subscribe to; this is the wait in the suite that re-checks a condition instead of awaiting an
/// event, and it fails the test at the deadline instead of hanging it.
package func waitUntil(_ what: String, timeout: Duration = .seconds(10), _ isReleased: () -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while !isReleased() {
        guard ContinuousClock.now < deadline else { throw WaitTimedOut(what: what, after: timeout) }
        try await Task.sleep(for: .milliseconds(5))
    }
}

/// Open file descriptors of this process (Linux: the entries of `/proc/self/fd`).
package enum OpenDescriptors {
    package static var count: Int? {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")).map(\.count)
    }
}
