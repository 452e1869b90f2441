import XCTest

/// The README's code blocks are compiled as part of `Examples`, between
/// `// README <name>: begin` and `// README <name>: end` markers. This test fails when a marked
/// block and the README drift apart.
final class ReadmeTests: XCTestCase {
    private let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    func testMarkedExampleCodeAppearsInReadme() throws {
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let normalizedReadme = normalize(readme)
        let examples = root.appendingPathComponent("Sources/Examples")
        var checked = 0
        for file in try FileManager.default.contentsOfDirectory(atPath: examples.path) where file.hasSuffix(".swift") {
            let source = try String(contentsOf: examples.appendingPathComponent(file), encoding: .utf8)
            for block in markedBlocks(in: source) {
                XCTAssertTrue(normalizedReadme.contains(normalize(block)), "README lacks this block from \(file):\n\(block)")
                checked += 1
            }
        }
        XCTAssertGreaterThanOrEqual(checked, 3, "expected the quick start and interceptor blocks to be marked")
    }

    private func markedBlocks(in source: String) -> [String] {
        var blocks: [String] = []
        var current: [String]?
        for line in source.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("// README "), trimmed.hasSuffix(": begin") {
                current = []
            } else if trimmed.hasPrefix("// README "), trimmed.hasSuffix(": end") {
                if let lines = current { blocks.append(lines.joined(separator: "\n")) }
                current = nil
            } else {
                current?.append(String(line))
            }
        }
        return blocks
    }

    /// Compares code ignoring indentation and blank lines.
    private func normalize(_ text: String) -> String {
        text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: "\n")
    }
}
