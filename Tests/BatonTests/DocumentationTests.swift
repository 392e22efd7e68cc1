import Foundation
import XCTest

/// What can be checked about the guides without building them. `.ci/docs.py pages` (run by `.ci/run`)
/// builds and runs every page's Swift blocks and compares what they print with the page.
final class DocumentationTests: BatonTestCase {
    private let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    private func read(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    private func blocks(in text: String, language: String) -> [String] {
        var blocks = [String]()
        var current: [Substring]?
        var inside = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if !inside, line.hasPrefix("```") {
                inside = true
                current = line == "```\(language)" ? [] : nil
            } else if inside, line == "```" {
                inside = false
                if let current { blocks.append(current.joined(separator: "\n")) }
            } else {
                current?.append(line)
            }
        }
        return blocks
    }

    private func pages() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("Docs").path)
            .filter { $0.hasSuffix(".md") }.sorted().map { "Docs/\($0)" } + ["README.md"]
    }

    /// The page shows the file the plugin writes, byte for byte (the golden file that
    /// `TemplateTests` and `.ci/scaffold-check` compare the plugin's output with).
    func testTheTemplatesPageShowsTheGeneratedFileAsItIs() throws {
        let golden = try read("Tests/BatonTests/Templates/Golden/transform-skipOnFailureOrCancellation.swift.golden")
        let shown = blocks(in: try read("Docs/Templates.md"), language: "swift")
        XCTAssertTrue(shown.contains { $0 + "\n" == golden }, "Docs/Templates.md does not show the transform template's output")
    }

    /// A reader has the repository, not the material it was designed from.
    func testNoPageRefersToMaterialOutsideTheRepository() throws {
        let banned = ["baton-swift/baton", "DESIGN.md", "shared/", "design card", "every seed"]
        for page in try pages() + ["CHANGELOG.md", "CONTRIBUTING.md"] {
            let text = try read(page)
            for phrase in banned {
                XCTAssertFalse(text.localizedCaseInsensitiveContains(phrase), "\(page) mentions \(phrase)")
            }
        }
    }

    /// Each page is one program: if it runs Swift, it imports what it uses in its first block, and
    /// it never mixes top-level `await` with blocking waits (which the compiler refuses in `async` code).
    func testEveryPageIsOneProgram() throws {
        var pagesWithSwift = 0
        for page in try pages() {
            let swift = blocks(in: try read(page), language: "swift")
            guard let first = swift.first else { continue }
            pagesWithSwift += 1
            XCTAssertTrue(
                first.contains("import Baton") && first.contains("import Foundation"),
                "\(page): the first Swift block does not import Baton and Foundation")
            let program = swift.joined(separator: "\n")
            let awaitsAtTopLevel = program.split(separator: "\n").contains {
                $0.hasPrefix("let ") && $0.contains("= try await ") || $0.hasPrefix("try await ")
            }
            let blockingCalls = [
                "waitUntilFinished()", "wait(timeout:", ".run(on: serial, timeout:", "run(timeout:",
                "waitUntilAllOperationsAreFinished",
            ]
            if awaitsAtTopLevel {
                let blockingAtTopLevel = program.split(separator: "\n").filter { line in
                    !line.hasPrefix(" ") && blockingCalls.contains { line.contains($0) }
                }
                XCTAssertEqual(blockingAtTopLevel, [], "\(page) awaits at top level and also blocks there")
            }
            XCTAssertFalse(blocks(in: try read(page), language: "output").isEmpty, "\(page) runs Swift but shows no ```output")
        }
        XCTAssertGreaterThanOrEqual(pagesWithSwift, 8, "the guides' Swift blocks were not found")
    }
}
