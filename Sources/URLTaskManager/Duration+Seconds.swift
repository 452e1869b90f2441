extension Duration {
    /// The duration in seconds, for the `Date` and `TimeInterval` arithmetic of expiry times
    /// and back-off.
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
