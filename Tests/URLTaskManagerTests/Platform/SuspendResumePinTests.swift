import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

#if canImport(FoundationNetworking)
/// Pins why the bridge does not pause a transfer whose reader falls behind: on this
/// toolchain `suspend()` then `resume()` in the middle of a body closes the connection and
/// sends the request again, so the delegate receives the start of the body twice (a plain
/// session, no manager involved). The day this test fails, corelibs pauses transfers in place
/// and the bridge can apply flow control to a slow delegate (see the Linux notes).
final class SuspendResumePinTests: XCTestCase {
    func testSuspendAndResumeMidBodyResendTheRequest() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        // 6.4 MB in 64 KB chunks, 1 ms apart: the body is still arriving when the task pauses.
        let pieces = (0..<100).map { Data(GeneratedBody.bytes(offset: $0 * 65_536, count: 65_536)) }
        server.route("/paced") { _ in ServerResponse(body: .chunked(pieces, chunkDelay: .milliseconds(1))) }
        let delegate = RecordingDelegate(
            handling: .spotCheckOnly,
            onFirstData: { task in
                DispatchQueue.global().async {
                    task.suspend()
                    task.resume()
                }
            })
        let session = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        let task = session.dataTask(with: server.url("/paced"))
        task.resume()
        try await delegate.completion(of: task, timeout: .seconds(30))
        let record = delegate.record(for: task)
        if ParityLog.isVerbose {
            print(
                "PIN| suspend()+resume() mid-body: \(server.requestCount(path: "/paced")) requests, \(record.byteCount) of 6553600 bytes delivered"
            )
        }
        XCTAssertGreaterThan(
            server.requestCount(path: "/paced"), 1,
            "corelibs no longer resends a suspended request: pausing a transfer may now be safe for flow control")
    }
}
#endif
