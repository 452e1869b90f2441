import Foundation
import XCTest
import TestSupport

/// The DocC articles' Swift listings, in every catalog, are compiled, as the README's are: each
/// one is (part of) a block of `Sources/Examples` or the tests marked `// README <name>: begin`
/// ... `end` or `// DocC <name>: begin` ... `end`. This test fails when an article and the code
/// drift apart.
final class DocCArticleTests: XCTestCase {
    /// The package's DocC catalogs, one per library product.
    private let catalogs = [
        "Sources/URLTaskManager/URLTaskManager.docc", "Sources/URLTaskResilience/URLTaskResilience.docc",
        "Sources/URLTaskOAuth2/URLTaskOAuth2.docc", "Sources/URLTaskRedis/URLTaskRedis.docc", "Sources/LoopbackServer/LoopbackServer.docc",
    ]

    /// Every Markdown file in the catalogs, by its path inside the package.
    private func articles() throws -> [(name: String, text: String)] {
        var found: [(String, String)] = []
        for catalog in catalogs {
            let folder = CompiledSnippets.root.appendingPathComponent(catalog)
            guard let files = FileManager.default.enumerator(atPath: folder.path) else { continue }
            for case let file as String in files where file.hasSuffix(".md") {
                found.append(("\(catalog)/\(file)", try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)))
            }
        }
        return found.sorted { $0.0 < $1.0 }
    }

    func testEachCatalogHasArticles() throws {
        let names = try articles().map(\.name)
        for catalog in catalogs {
            XCTAssertGreaterThanOrEqual(names.filter { $0.hasPrefix(catalog + "/") }.count, 2, "\(catalog) was not found or is empty")
        }
    }

    func testEverySwiftListingInTheArticlesIsCompiledCode() throws {
        let marked = try (CompiledSnippets.markedBlocks(marker: "README") + CompiledSnippets.markedBlocks(marker: "DocC"))
            .map { CompiledSnippets.normalize($0.block) }
        var listings = 0
        for (name, text) in try articles() {
            for block in CompiledSnippets.swiftBlocks(inMarkdown: text) {
                listings += 1
                // A listing may add the imports a marked block inside a function cannot have.
                let normalized = CompiledSnippets.normalize(CompiledSnippets.droppingImports(block))
                XCTAssertFalse(normalized.isEmpty, "\(name) has a Swift listing of imports only")
                XCTAssertTrue(marked.contains { $0.contains(normalized) }, "this listing in \(name) is not compiled anywhere:\n\(block)")
            }
        }
        XCTAssertGreaterThanOrEqual(listings, 10, "expected the articles' listings to be found")
    }

    /// Code marked for the articles is shown in one of them, so it cannot go stale unseen.
    func testMarkedDocCCodeAppearsInAnArticle() throws {
        let articles = try articles().map { CompiledSnippets.normalize($0.text) }
        let marked = try CompiledSnippets.markedBlocks(marker: "DocC")
        for (file, block) in marked {
            let normalized = CompiledSnippets.normalize(block)
            XCTAssertTrue(articles.contains { $0.contains(normalized) }, "no article shows this block from \(file):\n\(block)")
        }
    }

    /// Listings other than Swift are not compiled, so they must not look like Swift code:
    /// a listing without a language is for diagrams and output only.
    func testEveryListingIsSwiftOrMarkedAsSomethingElse() throws {
        for (name, text) in try articles() {
            for line in text.split(separator: "\n") where line.hasPrefix("```") && line.count > 3 {
                let language = line.dropFirst(3)
                XCTAssertTrue(["swift", "sh", "text"].contains(String(language)), "\(name): a listing in \(language)")
            }
        }
    }
}
