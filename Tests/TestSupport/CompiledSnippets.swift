import Foundation

/// Code shown in the README and in the DocC articles is compiled: it lives in `Sources/Examples`
/// (or the tests) between `// <marker> <name>: begin` and `// <marker> <name>: end` lines, and
/// `ReadmeTests` and `DocCArticleTests` check that the documents and the marked blocks agree.
package enum CompiledSnippets {
    /// The package's root folder.
    package static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Blocks marked `// <marker> <name>: begin` ... `end` in the examples, the test targets,
    /// and the packages that depend on this one (`Tests/Installation`, built by
    /// `scripts/check-installation.sh`; `Tests/Migration`, built by `scripts/check-migration.sh`).
    package static func markedBlocks(marker: String) throws -> [(file: String, block: String)] {
        var found: [(String, String)] = []
        for folder in [
            "Sources/Examples", "Tests/URLTaskManagerTests", "Tests/URLTaskResilienceTests", "Tests/URLTaskOAuth2Tests",
            "Tests/TestSupport",
            "Tests/ContractTests", "Tests/LoopbackServerTests", "Tests/Installation", "Tests/Migration",
        ] {
            let base = root.appendingPathComponent(folder)
            guard let files = FileManager.default.enumerator(atPath: base.path) else { continue }
            for case let file as String in files where file.hasSuffix(".swift") {
                let source = try String(contentsOf: base.appendingPathComponent(file), encoding: .utf8)
                found += markedBlocks(in: source, marker: marker).map { (file, $0) }
            }
        }
        return found
    }

    package static func markedBlocks(in source: String, marker: String) -> [String] {
        var blocks: [String] = []
        var current: [String]?
        for line in source.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("// \(marker) "), trimmed.hasSuffix(": begin") {
                current = []
            } else if trimmed.hasPrefix("// \(marker) "), trimmed.hasSuffix(": end") {
                if let lines = current { blocks.append(lines.joined(separator: "\n")) }
                current = nil
            } else {
                current?.append(String(line))
            }
        }
        return blocks
    }

    /// The contents of every ```` ```swift ```` block in a Markdown document.
    package static func swiftBlocks(inMarkdown markdown: String) -> [String] {
        var inSwift = false
        var lines: [String] = []
        var blocks: [String] = []
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
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
        return blocks
    }

    /// A document's block without its leading imports (and the `#if canImport` around them),
    /// which a marked block inside a function cannot have, and without a manifest's
    /// `// swift-tools-version` line, which must be the first line of its file.
    package static func droppingImports(_ block: String) -> String {
        var lines = block.split(separator: "\n", omittingEmptySubsequences: false)[...]
        while let first = lines.first?.trimmingCharacters(in: .whitespaces),
            first.isEmpty || first.hasPrefix("import ") || first.hasPrefix("#if canImport(") || first == "#endif"
                || first.hasPrefix("// swift-tools-version:")
        {
            lines = lines.dropFirst()
        }
        return lines.joined(separator: "\n")
    }

    /// Compares code ignoring indentation and blank lines.
    package static func normalize(_ text: String) -> String {
        text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: "\n")
    }
}
