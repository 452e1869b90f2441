import Foundation

extension Process {
    /// Runs the process with every signal unblocked in it. A child inherits the calling thread's
    /// signal mask, and the concurrency pool's threads block some signals (SIGTERM among them):
    /// spawned from one of them, a child that should die of SIGTERM would ignore it.
    package func runWithEverySignalUnblocked() throws {
        var everything = sigset_t()
        var previous = sigset_t()
        sigemptyset(&everything)
        pthread_sigmask(SIG_SETMASK, &everything, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        try run()
    }
}
