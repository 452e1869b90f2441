import Foundation
import XCTest
@testable import URLTaskManager

/// ``SpillFile`` alone, a real temporary file and no HTTP: a ring of its capacity, so bytes
/// written past its end go on at its start, read back in order, and the file never grows past
/// its capacity however far the offsets go (the state machine keeps at most that much unread).
final class SpillFileTests: XCTestCase {
    private func bytes(_ offset: Int, _ count: Int) -> Data { Data((offset..<offset + count).map { UInt8(truncatingIfNeeded: $0) }) }

    func testWritesAndReadsPastTheEndGoOnAtTheStartAndTheFileStaysWithinItsCapacity() throws {
        let file = SpillFile(capacity: 10)
        defer { file.discard() }
        XCTAssertEqual(try file.write(bytes(0, 6), at: 0), 6)
        XCTAssertEqual(try file.read(at: 0, count: 4), bytes(0, 4))
        // 2 unread (4..<6) and 8 more: 10, the capacity; the write wraps over what was read.
        XCTAssertEqual(try file.write(bytes(6, 8), at: 6), 8)
        XCTAssertEqual(try file.read(at: 4, count: 10), bytes(4, 10), "in order across the file's end")
        for round in 0..<20 {
            let offset = 14 + round * 7
            _ = try file.write(bytes(offset, 7), at: offset)
            XCTAssertEqual(try file.read(at: offset, count: 7), bytes(offset, 7))
        }
        XCTAssertEqual(file.size, 10, "154 bytes went through a file of 10")
    }

    func testADiscardedFileIsClosedAndRefusesMore() {
        let file = SpillFile(capacity: 4)
        XCTAssertNoThrow(try file.write(bytes(0, 4), at: 0))
        file.discard()
        XCTAssertEqual(file.size, 0)
        XCTAssertThrowsError(try file.read(at: 0, count: 1))
        XCTAssertThrowsError(try file.write(bytes(0, 1), at: 0))
    }
}
