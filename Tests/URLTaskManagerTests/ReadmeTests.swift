import XCTest

/// The README's code blocks are compiled as part of `Examples`, between
/// `// README <name>: begin` and `// README <name>: end` markers. This test fails when a marked
/// block and the README drift apart.
final class ReadmeTests: XCTestCase {
    private let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Blocks marked `// README <name>: begin` ... `end` in the examples and the tests.
    private func markedBlocksInSources() throws -> [(file: String, block: String)] {
        var found: [(String, String)] = []
        for folder in ["Sources/Examples", "Tests/URLTaskManagerTests"] {
            let base = root.appendingPathComponent(folder)
            guard let files = FileManager.default.enumerator(atPath: base.path) else { continue }
            for case let file as String in files where file.hasSuffix(".swift") {
                let source = try String(contentsOf: base.appendingPathComponent(file), encoding: .utf8)
                found += markedBlocks(in: source).map { (file, $0) }
            }
        }
        return found
    }

    func testMarkedExampleCodeAppearsInReadme() throws {
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let normalizedReadme = normalize(readme)
        let marked = try markedBlocksInSources()
        for (file, block) in marked {
            XCTAssertTrue(normalizedReadme.contains(normalize(block)), "README lacks this block from \(file):\n\(block)")
        }
        XCTAssertGreaterThanOrEqual(marked.count, 10, "expected the README's blocks to be marked")
    }

    /// The other direction: every Swift block in the README is compiled, because it is (part of)
    /// a marked block of code that builds with the package.
    func testEverySwiftBlockInTheReadmeIsCompiledCode() throws {
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let marked = try markedBlocksInSources().map { normalize($0.block) }
        var inSwift = false
        var lines: [String] = []
        var blocks: [String] = []
        for line in readme.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```swift") {
                inSwift = true
                lines = []
            } else if inSwift, line.hasPrefix("```") {
                inSwift = false
                blocks.append(lines.joined(separator: "\n"))
            } else if inSwift {
                lines.append(String(line))
            }
        }
        XCTAssertGreaterThanOrEqual(blocks.count, 10)
        for block in blocks {
            // A README block may add the imports a marked block inside a function cannot have.
            let normalized = normalize(block.split(separator: "\n").filter { !$0.hasPrefix("import ") }.joined(separator: "\n"))
            XCTAssertTrue(marked.contains { $0.contains(normalized) }, "this README block is not compiled anywhere:\n\(block)")
        }
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
