import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest

/// Large bodies arrive intact through a manager, and a delegate-driven 100 MB response streams
/// through the bridge without being buffered.
final class LargeBodyParityTests: XCTestCase {
    private static let megabyte = 1 << 20
    private static let hundredMegabytes = 100 << 20

    private var harness: ParityHarness!

    override func setUpWithError() throws {
        harness = try ParityHarness()
        harness.route("/1mb") { _, _ in ServerResponse(body: .generated(length: Self.megabyte)) }
        harness.route("/1mb-chunked") { _, _ in ServerResponse(body: .generated(length: Self.megabyte, chunkSize: 16 * 1024, chunked: true))
        }
        harness.route("/100mb") { _, _ in
            ServerResponse(
                headers: ["Content-Type": "application/octet-stream"],
                body: .generated(length: Self.hundredMegabytes, chunkSize: 256 * 1024))
        }
    }

    override func tearDown() {
        harness.shutdown()
        harness = nil
    }

    /// Completion-handler and async tasks need the whole body in one piece (corelibs keeps only
    /// the last chunk otherwise): a chunked 1 MB body must not lose its first 1008 KB.
    func testOneMegabyte() async throws {
        let expected = GeneratedBody.sha256(length: Self.megabyte)
        for path in ["/1mb", "/1mb-chunked"] {
            let async = try await harness.both { client in await client.asyncData(URLRequest(url: client.url(path))) }
            XCTAssertParity(async, "1 MB \(path), async data(for:)")
            XCTAssertEqual(async.manager.bodyLength, Self.megabyte)
            XCTAssertEqual(async.manager.bodySHA256, expected)

            let completion = try await harness.both { client in try await client.completionData(URLRequest(url: client.url(path))) }
            XCTAssertParity(completion, "1 MB \(path), completion handler")
            XCTAssertEqual(completion.manager.bodySHA256, expected)
        }
    }

    /// 100 MB to a delegate that hashes incrementally (never holding the body).
    func testHundredMegabytesToDelegate() async throws {
        let result = try await harness.both { client in
            let delegate = RecordingDelegate(handling: .hashOnly)
            let (outcome, record, _) = try await client.delegateTask(delegate, timeout: .seconds(60)) {
                $0.dataTask(with: client.url("/100mb"))
            }
            XCTAssertGreaterThan(record.chunkCount, 100, "\(client.side): streamed, not delivered in one piece")
            return outcome
        }
        XCTAssertParity(result, "100 MB, delegate hashing incrementally")
        XCTAssertEqual(result.manager.bodyLength, Self.hundredMegabytes)
        // GeneratedBody.sha256(length:) computed with the fast hasher (see FastSHA256).
        let expectedSHA = FastSHA256.generatedBody(length: Self.hundredMegabytes)
        XCTAssertEqual(result.plain.bodySHA256, expectedSHA)
        XCTAssertEqual(result.manager.bodySHA256, expectedSHA)
    }

    /// The bridge streams a delegate-driven 100 MB response: the manager's peak resident set
    /// stays within 32 MB of a plain session's for the same download.
    func testHundredMegabytesStreamsWithoutBuffering() async throws {
        XCTAssertTrue(MemoryProbe.resetPeak(), "cannot reset VmHWM on this machine")
        var peaks: [Side: (base: Int, peak: Int)] = [:]
        for side in Side.allCases {
            let figures = try await harness.run(side) { client in
                let delegate = RecordingDelegate(handling: .spotCheckOnly)
                let session = client.makeSession(delegate: delegate)
                // Warm up (connection, queues, first allocations) before measuring.
                try await client.barrier(session)
                MemoryProbe.resetPeak()
                let base = MemoryProbe.residentKiB ?? 0
                let task = session.dataTask(with: client.url("/100mb"))
                task.resume()
                try await delegate.completion(of: task, timeout: .seconds(60))
                let peak = MemoryProbe.peakKiB ?? 0
                let record = delegate.record(for: task)
                XCTAssertNil(record.error, "\(side)")
                XCTAssertEqual(record.byteCount, Self.hundredMegabytes, "\(side)")
                XCTAssertNil(record.firstMismatch, "\(side): byte \(record.firstMismatch ?? -1) differs from the generated pattern")
                XCTAssertGreaterThan(record.chunkCount, 100, "\(side)")
                return (base, peak)
            }
            peaks[side] = figures
        }
        let plain = peaks[.plain]!
        let manager = peaks[.manager]!
        let plainGrowth = (plain.peak - plain.base) / 1024
        let managerGrowth = (manager.peak - manager.base) / 1024
        print(
            "MEMORY| 100 MB delegate download: plain peak \(plain.peak / 1024) MB (base \(plain.base / 1024) MB, +\(plainGrowth) MB); "
                + "manager peak \(manager.peak / 1024) MB (base \(manager.base / 1024) MB, +\(managerGrowth) MB)")
        ParityLog.record("100 MB delegate download, peak RSS growth", plain: "+\(plainGrowth) MB", manager: "+\(managerGrowth) MB")
        XCTAssertLessThanOrEqual(manager.peak, plain.peak + 32 * 1024, "the manager buffered the body")
        XCTAssertLessThan(managerGrowth, 64, "a 100 MB body must stream, not be held")
    }
}
