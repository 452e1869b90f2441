import URLTaskManager

extension URLTaskError.Code {
    /// The request could not have the credential it needs: the token endpoint refused the
    /// refresh (`invalid_grant`: the session is over), answered with an error or with something
    /// that is not a token, there is no refresh token, or the user signed out
    /// (`signOut(of:)`). `URLTaskError.underlying` is the ``OAuth2Error``: its
    /// ``OAuth2Error/requiresSignIn`` says whether only a new sign-in helps. Every request of
    /// the failed refresh receives it, whether its 401 started the refresh or it waited for a
    /// token renewed before it expired. A refresh that failed on the network is not this: its
    /// `URLError` reaches the caller as itself.
    ///
    /// Declared here, by the module that makes it, as a component of yours declares its own
    /// code; its name is the one 0.3 printed (`authenticationFailed`).
    public static let authenticationFailed = URLTaskError.Code(
        "authenticationFailed", summary: "No credential could be had for the request")
}
