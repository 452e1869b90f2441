import Foundation
import URLTaskManager

/// What an ``OAuth2Authenticator`` remembers of failed refreshes, without I/O: whether a new
/// refresh may start, and when the failure hook is told.
///
/// ```
///  healthy ─failed (temporary)─> backingOff(until) ─failed─> backingOff(later)
///     ^  ^                            │   │
///     │  └───────succeeded────────────┘   └─failed (requires sign-in)─> rejected
///     └──────────credential replaced (sign-in, sign-out) from any state ──┘
/// ```
/// A failure episode runs from the first failed refresh to the next success or credential
/// change. Within it, a refresh that needs to start while the back-off runs does not: the task
/// fails with the episode's latest error instead, without a token request (an endpoint that
/// fails fast would otherwise get one request per arriving task). After the back-off, the next
/// task that needs a token tries once more. `rejected` (the server refused the refresh token,
/// ``OAuth2Error/requiresSignIn``) lasts until the credential changes. The hook hears of the
/// first failure of an episode, and again only when the episode turns into a rejection (the
/// moment to ask the user to sign in).
struct RefreshFailureStateMachine {
    private enum State {
        case healthy
        /// Requests that need a refresh fail with `error` until `until`.
        case backingOff(error: any Error, until: ContinuousClock.Instant)
        /// Every request fails with `error` until the credential changes.
        case rejected(error: any Error)
    }

    /// Whether a refresh may start now.
    enum RefreshDecision {
        case start
        /// Fail with the error of the failure that is still standing.
        case fail(any Error)
    }

    /// What to do about a failed refresh.
    enum FailureAction {
        /// Call the failure hook with this error.
        case report(any Error)
        /// The hook already heard of this episode.
        case none
    }

    private var state = State.healthy
    private let backoff: Duration

    /// - Parameter backoff: How long after a temporary failure no new refresh starts.
    init(backoff: Duration) {
        self.backoff = backoff
    }

    /// The error every request fails with until a sign-in, if the refresh token was refused.
    var rejection: (any Error)? {
        if case .rejected(let error) = state { return error }
        return nil
    }

    /// A task needs a refresh at `now`.
    func mayStartRefresh(at now: ContinuousClock.Instant) -> RefreshDecision {
        switch state {
        case .healthy: return .start
        case .backingOff(let error, let until): return now < until ? .fail(error) : .start
        case .rejected(let error): return .fail(error)
        }
    }

    /// The refresh of the current credential failed at `now`; `requiresSignIn` says the server
    /// refused the grant itself.
    mutating func refreshFailed(_ error: any Error, requiresSignIn: Bool, at now: ContinuousClock.Instant) -> FailureAction {
        switch state {
        case .healthy:
            state = requiresSignIn ? .rejected(error: error) : .backingOff(error: error, until: now + backoff)
            return .report(error)
        case .backingOff:
            if requiresSignIn {
                state = .rejected(error: error)
                return .report(error)
            }
            state = .backingOff(error: error, until: now + backoff)
            return .none
        case .rejected:
            // No refresh starts while rejected: a late failure changes nothing.
            return .none
        }
    }

    /// A refresh succeeded: the episode is over.
    mutating func refreshSucceeded() {
        state = .healthy
    }

    /// The credential was replaced (sign-in, sign-out): whatever failed belonged to the old one.
    mutating func credentialReplaced() {
        state = .healthy
    }
}
