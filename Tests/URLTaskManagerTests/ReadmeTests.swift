import XCTest
import TestSupport

/// The README's code blocks are compiled as part of `Examples`, between
/// `// README <name>: begin` and `// README <name>: end` markers. This test fails when a marked
/// block and the README drift apart.
final class ReadmeTests: XCTestCase {
    private let root = CompiledSnippets.root

    /// Blocks marked `// README <name>: begin` ... `end` in the examples and the tests.
    private func markedBlocksInSources() throws -> [(file: String, block: String)] {
        try CompiledSnippets.markedBlocks(marker: "README")
    }

    func testMarkedExampleCodeAppearsInReadme() throws {
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let normalizedReadme = normalize(readme)
        let marked = try markedBlocksInSources()
        for (file, block) in marked {
            XCTAssertTrue(normalizedReadme.contains(normalize(block)), "README lacks this block from \(file):\n\(block)")
        }
        // The README keeps the quick start, the installation manifest and the FAQ's module
        // selector; the other listings live in the DocC articles (`DocCArticleTests`).
        XCTAssertGreaterThanOrEqual(marked.count, 3, "expected the README's blocks to be marked")
    }

    /// The other direction: every Swift block in the README is compiled, because it is (part of)
    /// a marked block of code that builds with the package.
    func testEverySwiftBlockInTheReadmeIsCompiledCode() throws {
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let marked = try markedBlocksInSources().map { normalize($0.block) }
        let blocks = CompiledSnippets.swiftBlocks(inMarkdown: readme)
        XCTAssertGreaterThanOrEqual(blocks.count, 3)
        for block in blocks {
            // A README block may add the imports a marked block inside a function cannot have.
            let normalized = normalize(CompiledSnippets.droppingImports(block))
            XCTAssertTrue(marked.contains { $0.contains(normalized) }, "this README block is not compiled anywhere:\n\(block)")
        }
    }

    /// Compares code ignoring indentation and blank lines.
    private func normalize(_ text: String) -> String {
        CompiledSnippets.normalize(text)
    }
}
