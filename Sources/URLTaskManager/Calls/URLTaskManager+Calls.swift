import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The manager's own door: URLSession's async methods, run through the same interceptors,
/// reactors, sharing, observers and events as every task of ``URLTaskManager/session``, without
/// the outer `URLSessionTask` a custom `URLProtocol` needs.
///
/// Use these in code of your own; use the session for code that takes a `URLSession` (a
/// third-party SDK, swift-openapi-urlsession). What differs between the two doors, and why, is
/// in the "Two ways in" article.
extension URLTaskManager {
    /// Sends `request` through the interceptors and reactors and returns its body and response,
    /// as `URLSession.data(for:)` does.
    ///
    /// Redirects are followed, through the interceptors, as a session without a delegate
    /// follows them; an HTTP authentication challenge is answered from the configuration's
    /// credential storage, as such a session answers it. Errors are the session's: a `URLError`
    /// as a plain session gives it, a ``URLTaskError`` for what a part decided. Cancelling the
    /// calling task cancels the request with `URLError.cancelled`.
    ///
    /// It costs about what a plain `URLSession` costs (no outer task, no `URLProtocol`): see
    /// the README's "Two ways in" for the measured figures.
    public func data(for request: URLRequest) async throws -> (Data, URLResponse) {
        try await pipeline.call(request, body: URLTaskBody(request: request)) { DataCallSink($0) }
    }

    /// Sends a GET of `url` and returns its body and response (see ``data(for:)``): the request
    /// `URLRequest(url:)` makes, as the session's `data(from:)` sends it, which the
    /// configuration's timeouts and cache policy then govern.
    public func data(from url: URL) async throws -> (Data, URLResponse) {
        try await data(for: URLRequest(url: url))
    }

    /// Sends `request` with `bodyData` as its body and returns the answer's body and response,
    /// as `URLSession.upload(for:from:)` does (see ``data(for:)``). `bodyData` replaces any body
    /// the request carries.
    public func upload(for request: URLRequest, from bodyData: Data) async throws -> (Data, URLResponse) {
        try await pipeline.call(request, body: .data(bodyData)) { DataCallSink($0) }
    }

    /// Sends `request` with the contents of `fileURL` as its body, streamed from disk, and returns
    /// the answer's body and response, as `URLSession.upload(for:fromFile:)` does (see
    /// ``data(for:)``).
    public func upload(for request: URLRequest, fromFile fileURL: URL) async throws -> (Data, URLResponse) {
        try await pipeline.call(request, body: .file(fileURL)) { DataCallSink($0) }
    }
}
