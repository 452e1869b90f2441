import Foundation

/// Why a ``FleetCredential``'s refresh failed when neither the token endpoint nor the fleet's
/// sign-in state explains it: the fleet's coordination itself gave up.
///
/// A refresh the token endpoint refused fails with the endpoint's `OAuth2Error` (`requiresSignIn`),
/// one the endpoint could not answer with its `URLError`, whichever process met it; this error is
/// for what only a fleet can run into, so an app's handler for authentication failures does not
/// mistake it for one. Through a manager's refresh reactor it reaches a caller as a `URLTaskError`
/// coded `reactorFailed` with this as its underlying error.
public struct FleetCredentialError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong.
    public enum Kind: Sendable, Equatable {
        /// The lease changed hands ``FleetCredentialError/rounds`` times without any holder
        /// writing a new credential (holders dying, or failing in ways that write nothing).
        case leaseRoundsExhausted
    }

    /// What went wrong.
    public var kind: Kind
    /// The fleet credential's key prefix: which fleet gave up.
    public var keyPrefix: String
    /// The rounds it waited (``FleetCredential/Configuration/maximumLeaseRounds``).
    public var rounds: Int

    /// The error for `kind` in the fleet under `keyPrefix`.
    public init(kind: Kind, keyPrefix: String, rounds: Int) {
        self.kind = kind
        self.keyPrefix = keyPrefix
        self.rounds = rounds
    }

    /// Names the fleet and says what to look at.
    public var description: String {
        switch kind {
        case .leaseRoundsExhausted:
            "the fleet credential \(keyPrefix): its refresh lease changed hands \(rounds) times without a new credential "
                + "(are its holders dying or timing out? see FleetCredential.Configuration.maximumLeaseRounds and leaseTimeToLive)"
        }
    }
}
