import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

/// The parity helpers themselves: a broken helper would make parity tests pass vacuously.
final class SupportSelfTests: XCTestCase {
    func testFastSHA256MatchesGeneratedBodyDigest() {
        for length in [0, 1, 63, 64, 65, 1_000_003, 3 << 20] {
            XCTAssertEqual(FastSHA256.generatedBody(length: length), GeneratedBody.sha256(length: length), "length \(length)")
        }
        let data = Data(GeneratedBody.bytes(offset: 5, count: 200_000))
        let fast = FastSHA256()
        fast.update(data.prefix(77))
        fast.update(data.dropFirst(77))
        XCTAssertEqual(fast.hexDigest(), SHA256.hex(data))
        let swift = FastSHA256(forceSwift: true)
        swift.update(data)
        XCTAssertEqual(swift.hexDigest(), SHA256.hex(data))
        #if canImport(FoundationNetworking)
        XCTAssertTrue(FastSHA256.usesOpenSSL, "libcrypto not found: 100 MB tests will be slow")
        #endif
    }

    func testSpotCheckFindsShiftedBytes() {
        let offset = 70_000
        let good = Data(GeneratedBody.bytes(offset: offset, count: 4096))
        XCTAssertNil(RecordingDelegate.firstMismatch(good, offset: offset))
        XCTAssertNotNil(RecordingDelegate.firstMismatch(Data(GeneratedBody.bytes(offset: offset + 1, count: 4096)), offset: offset))
        XCTAssertNotNil(RecordingDelegate.firstMismatch(Data(GeneratedBody.bytes(offset: offset + 65_536, count: 4096)), offset: offset))
    }

    func testSideNormalisation() {
        XCTAssertEqual(Side.plain.normalise("http://h:1/side-plain/a?b=/side-plain"), "http://h:1/{side}/a?b=/{side}")
        XCTAssertEqual(Side.manager.normalise("text/plain; /side-manager/x"), "text/plain; /{side}/x")
        XCTAssertEqual(Side.manager.normalise("/side-plain/x"), "/side-plain/x")
        XCTAssertEqual(Side.methods.normalise("http://h:1/side-methods/a"), "http://h:1/{side}/a")
        XCTAssertEqual(Side.methods.normalise("/side-manager/x"), "/side-manager/x")
        XCTAssertEqual(Side.manager.normalise("/side-methods/x"), "/side-methods/x")
    }

    func testOutcomeCapturesWhatItShould() {
        let response = HTTPURLResponse(
            url: URL(string: "http://h/side-plain/x")!, statusCode: 201, httpVersion: "HTTP/1.1",
            headerFields: ["Date": "now", "X-A": "1", "Location": "/side-plain/y"])
        let outcome = Outcome(side: .plain, data: Data("abc".utf8), response: response, error: nil)
        XCTAssertEqual(outcome.status, 201)
        XCTAssertNil(outcome.header("Date"))
        XCTAssertEqual(outcome.header("x-a"), "1")
        XCTAssertEqual(outcome.header("Location"), "/{side}/y")
        XCTAssertEqual(outcome.url, "http://h/{side}/x")
        XCTAssertEqual(outcome.bodySHA256, SHA256.hex(Data("abc".utf8)))
        let failed = Outcome(side: .manager, data: nil, response: nil, error: URLError(.cancelled))
        XCTAssertTrue(failed.isCancelled)
        XCTAssertNotEqual(failed, Outcome(side: .manager, data: nil, response: nil, error: URLError(.timedOut)))
    }

    func testLatchDeliversAndTimesOut() async throws {
        let latch = Latch<Int>("value")
        DispatchQueue.global().async { latch.fulfill(7) }
        let value = try await latch.wait(timeout: .seconds(5))
        XCTAssertEqual(value, 7)
        XCTAssertFalse(latch.fulfill(8))
        let never = Latch<Void>("never")
        do {
            try await never.wait(timeout: .milliseconds(50))
            XCTFail("should time out")
        } catch is WaitTimedOut {}
    }

    /// VmHWM can be reset between measurements (writing "5" to /proc/self/clear_refs).
    func testPeakMemoryCanBeReset() throws {
        #if os(Linux)
        XCTAssertTrue(MemoryProbe.resetPeak())
        let before = try XCTUnwrap(MemoryProbe.peakKiB)
        let size = 64 << 20
        let block = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 4096)
        for offset in stride(from: 0, to: size, by: 4096) { block.storeBytes(of: 1, toByteOffset: offset, as: UInt8.self) }
        let raised = try XCTUnwrap(MemoryProbe.peakKiB)
        block.deallocate()
        XCTAssertGreaterThanOrEqual(raised - before, 60 * 1024, "touching 64 MB raises the peak")
        XCTAssertTrue(MemoryProbe.resetPeak())
        let reset = try XCTUnwrap(MemoryProbe.peakKiB)
        XCTAssertLessThan(reset, raised - 32 * 1024, "the reset lowers the peak to the current resident set")
        #else
        throw XCTSkip("VmHWM is Linux-only")
        #endif
    }
}
