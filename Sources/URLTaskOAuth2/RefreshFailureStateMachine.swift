import Foundation
import URLTaskManager

/// What an ``OAuth2Authenticator`` remembers of failed refreshes, without I/O: whether a new
/// refresh may start, and when the failure hook is told.
///
/// ```
///  healthy ──refused──> backingOff(until) ──refused, after it──> backingOff(later)
///     │                    │         ^
///     │          could not connect   refused
///     │                    v         │
///     └──could not connect──> unreachable ──could not connect──> unreachable
///
///  healthy, backingOff, unreachable ──failed (requires sign-in)──> rejected
///  backingOff, unreachable ──succeeded──> healthy
///  any state ──credential replaced (sign-in, sign-out)──> healthy
/// ```
/// A failure episode runs from the first failed refresh to the next success or credential
/// change. A refusal (the endpoint answered, but not with a token: a 5xx, a garbage answer, a
/// configuration error, or no answer before the token request's timeout) starts a back-off:
/// while it runs, a refresh that needs to start does not, and the task fails with the
/// episode's latest error instead, without a token request (an endpoint that fails fast would
/// otherwise get one request per arriving task). After the back-off, the next task that needs
/// a token tries once more.
///
/// A token request that could not connect at all (``isUnreachable(_:)``: the endpoint's host
/// refused the connection, could not be resolved, or the device is offline; or the connection
/// was lost or closed before a byte of an answer) is no refusal:
/// the endpoint said nothing, and the first refresh after it comes back must go out. It puts
/// the machine in `unreachable`, which starts no back-off (every task that needs a refresh may
/// try, each try costing a connection attempt that usually fails at once) and fails no task: the
/// authenticator lets the task go with the credential it holds, to meet the outage as any
/// request to an unreachable host does (an `OfflineHold` holds it). An unreachable endpoint
/// ends a back-off that was running: the refusal is no longer the latest news.
///
/// `rejected` (the server refused the refresh token, ``OAuth2Error/requiresSignIn``) lasts
/// until the credential changes. The hook hears of the first failure of an episode (an
/// unreachable endpoint included: once, not once per connection attempt), and again only when
/// the episode turns into a rejection (the moment to ask the user to sign in).
struct RefreshFailureStateMachine {
    private enum State {
        case healthy
        /// Requests that need a refresh fail with `error` until `until`.
        case backingOff(error: any Error, until: ContinuousClock.Instant)
        /// Every request fails with `error` until the credential changes.
        case rejected(error: any Error)
        /// The last refresh could not connect to the token endpoint (`error`): the next one may
        /// start at once, and no task fails for it.
        case unreachable(error: any Error)
    }

    /// The `URLError` codes that say a token request never reached its endpoint: no
    /// connection was made, or it was lost (see ``isUnreachable(_:)``).
    static let unreachableCodes: Set<URLError.Code> = [
        .cannotConnectToHost, .cannotFindHost, .dnsLookupFailed, .notConnectedToInternet, .networkConnectionLost,
    ]

    /// Whether `error` says the token endpoint could not be reached (one of
    /// ``unreachableCodes``), or closed the connection without a byte of an answer (a
    /// `badServerResponse` the token request marked so: ``BoundedDataRequestStateMachine/isUnanswered(_:)``),
    /// rather than that it refused: a connectivity failure, which starts no back-off. A
    /// `timedOut` is not one of them: an endpoint that accepted the connection and then hung is a
    /// refusal, and asking it again at once would hold every request again.
    ///
    /// The closed connection counts as lost, as a reset one (`networkConnectionLost`) does: before
    /// (issue 49), a refresh whose silent token request the endpoint closed, after its waiters
    /// gave up, started a back-off with that `URLError(-1011)`, and the requests made once the
    /// endpoint answered again failed with it, without a token request.
    static func isUnreachable(_ error: any Error) -> Bool {
        guard let error = error as? URLError else { return false }
        return unreachableCodes.contains(error.code) || BoundedDataRequestStateMachine.isUnanswered(error)
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
        case .unreachable: return .start
        }
    }

    /// The refresh of the current credential failed at `now` with `error`; `requiresSignIn`
    /// says the server refused the grant itself. A connectivity failure (``isUnreachable(_:)``)
    /// is taken as ``refreshCouldNotConnect(_:)`` says; anything else is a refusal.
    mutating func refreshFailed(_ error: any Error, requiresSignIn: Bool, at now: ContinuousClock.Instant) -> FailureAction {
        if !requiresSignIn, Self.isUnreachable(error) { return refreshCouldNotConnect(error) }
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
        case .unreachable:
            // The endpoint answers again, with a refusal: the same episode, now backing off.
            state = requiresSignIn ? .rejected(error: error) : .backingOff(error: error, until: now + backoff)
            return requiresSignIn ? .report(error) : .none
        case .rejected:
            // No refresh starts while rejected: a late failure changes nothing.
            return .none
        }
    }

    /// The refresh of the current credential could not connect to the token endpoint
    /// (``isUnreachable(_:)``): no back-off starts, and the next refresh may start at once.
    /// Reported as the first failure of an episode; a back-off that was running ends (the
    /// endpoint's refusal is no longer the latest news, and a refresh must go out as soon as it
    /// answers again); a rejection stands.
    private mutating func refreshCouldNotConnect(_ error: any Error) -> FailureAction {
        switch state {
        case .healthy:
            state = .unreachable(error: error)
            return .report(error)
        case .backingOff, .unreachable:
            state = .unreachable(error: error)
            return .none
        case .rejected:
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
