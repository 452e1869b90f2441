import Foundation
import URLTaskManager

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension FileCredentialStore: SharedCredentialStore {
    /// Runs `body` holding an advisory lock (`flock`) on a lock file beside the credential's,
    /// `.<name>.lock`, so that of the authenticators sharing the file, in this process or in
    /// others, one renews the credential at a time.
    ///
    /// The lock is on a file of its own because a save replaces the credential's file (a
    /// rename): a lock on the old file would not be seen by a process opening the new one. The
    /// lock file is created owner-only and never removed (removing it while a holder waits would
    /// let two hold "the" lock); it holds nothing. The kernel releases the lock when its holder
    /// exits or crashes, so a killed process never leaves the others waiting.
    ///
    /// The lock is tried without blocking a thread, again after 1 ms, then after twice as long
    /// each time up to 50 ms, until `timeout`; past it `body` runs without the lock (a holder
    /// stopped in a debugger must not stop every other process), and the authenticator's reading
    /// of the file after a refusal covers that case. A lock file that is not a regular file of
    /// this process's user is refused with a ``FileCredentialStoreError``, as the credential's
    /// own file would be.
    public func withRefreshLock<T: Sendable>(
        waitingAtMost timeout: Duration, _ body: @Sendable () async throws -> T
    ) async throws -> T {
        let descriptor = try openLockFile()
        defer { close(descriptor) }
        let locked = try await lock(descriptor, waitingAtMost: timeout)
        defer { if locked { flock(descriptor, LOCK_UN) } }
        return try await body()
    }

    /// The lock file beside the file a save replaces (the link's target when links are followed,
    /// so every path to the credential shares one lock).
    var lockFile: URL {
        get throws {
            let target = try fileToReplace()
            return target.deletingLastPathComponent().appendingPathComponent(".\(target.lastPathComponent).lock")
        }
    }

    /// Opens (creating it owner-only if need be) the lock file, read-only: `flock` needs no
    /// more, and a read-only descriptor opens whatever the umask took from the mode.
    private func openLockFile() throws -> Int32 {
        let file = try lockFile
        let folder = file.deletingLastPathComponent()
        try makeFolder(folder)
        try checkFolder(folder)
        let descriptor = open(file.path, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            if errno == ELOOP { throw FileCredentialStoreError(path: file.path, kind: .symbolicLink) }
            throw failure("open", file)
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            let error = failure("fstat", file)
            close(descriptor)
            throw error
        }
        let refusal: FileCredentialStoreError.Kind? =
            status.st_mode & S_IFMT != S_IFREG
            ? .notARegularFile : status.st_uid != geteuid() ? .ownedByAnotherUser(uid: UInt32(status.st_uid)) : nil
        if let refusal {
            close(descriptor)
            throw FileCredentialStoreError(path: file.path, kind: refusal)
        }
        return descriptor
    }

    /// Takes the lock on `descriptor`, trying again with growing pauses until `timeout`: `true`
    /// once held, `false` if `timeout` passed first.
    private func lock(_ descriptor: Int32, waitingAtMost timeout: Duration) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        var pause = Duration.milliseconds(1)
        while true {
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return true }
            let code = errno
            guard code == EWOULDBLOCK || code == EINTR else {
                throw FileCredentialStoreError(
                    path: (try? lockFile.path) ?? url.path, kind: .systemCallFailed(operation: "flock", errno: code))
            }
            let now = ContinuousClock.now
            guard now < deadline else { return false }
            try await Task.sleep(for: min(pause, deadline - now))
            pause = min(pause * 2, .milliseconds(50))
        }
    }
}
