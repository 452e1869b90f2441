extension Duration {
    /// The duration as fractional seconds, for APIs (Date, timeval) that want a Double.
    var seconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}
