extension ServerResponse {
    /// How a response cut short by `dropAfterBodyBytes` ends the connection; the two look different
    /// to clients, and retry logic often treats them differently.
    public enum DropStyle: Sendable {
        /// Reset (RST, via `SO_LINGER` 0): the client sees "connection reset by peer", which URLSession
        /// reports as `URLError.networkConnectionLost` (-1005). Bytes still in flight may be discarded.
        case reset
        /// Orderly close (FIN) mid-message: the client receives every byte sent, then end of stream.
        /// URLSession on Linux reports `NSURLErrorUnknown` (-1) "transfer closed with N bytes remaining".
        case close
    }
}
