import Foundation
import URLTaskManager

/// The life of one authorization code attempt, as far as its exchange goes: a code is
/// exchanged at most once (RFC 6749 §4.1.2: a server seeing a code twice should revoke what it
/// issued for it). Pure: no locks, no I/O.
struct AuthorizationAttemptStateMachine {
    private enum State {
        case unused
        /// A token request was sent for it (it may still be running, or have failed).
        case exchanged
    }

    /// What an exchange asked for does.
    enum ExchangeAction: Equatable {
        /// Send the token request.
        case send
        /// Refuse: the attempt was exchanged already.
        case refuse
    }

    private var state = State.unused

    /// `exchange(code:for:)` was called for the attempt.
    mutating func exchangeRequested() -> ExchangeAction {
        switch state {
        case .unused:
            state = .exchanged
            return .send
        case .exchanged:
            return .refuse
        }
    }
}

/// An attempt's ``AuthorizationAttemptStateMachine``, shared by the copies of its
/// `OAuth2AuthorizationRequest`.
final class AuthorizationAttemptStorage: Sendable {
    private let machine = LockedState(AuthorizationAttemptStateMachine())

    /// Whether the exchange may send its token request (only the first may).
    func exchangeRequested() -> Bool {
        machine.withLock { $0.exchangeRequested() } == .send
    }
}
