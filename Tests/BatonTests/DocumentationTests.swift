import Foundation
import XCTest

/// Every Swift example in README.md and Docs/ must be compiled: this test finds each ```swift block
/// in the example sources (Tests/BatonTests/Documentation/) or among the
/// templates' golden files, which `.ci/scaffold-check` compiles as the plugin writes them.
final class DocumentationTests: BatonTestCase {
    private let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Lines without their indentation, blank lines dropped: examples are indented differently in
    /// test functions than in the guides.
    private func normalized(_ text: String) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty }
            .joined(separator: "\n")
    }

    private func swiftBlocks(in text: String) -> [String] {
        var blocks = [String]()
        var current: [Substring]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if current == nil, trimmed == "```swift" {
                current = []
            } else if current != nil, trimmed == "```" {
                blocks.append(current!.joined(separator: "\n"))
                current = nil
            } else {
                current?.append(line)
            }
        }
        return blocks
    }

    private func sources(in folder: String, suffix: String = ".swift") throws -> [String] {
        let directory = root.appendingPathComponent(folder)
        return try FileManager.default.contentsOfDirectory(atPath: directory.path)
            .filter { $0.hasSuffix(suffix) }
            .map { try String(contentsOf: directory.appendingPathComponent($0), encoding: .utf8) }
    }

    func testEverySwiftExampleInTheDocsIsCompiled() throws {
        let examples = try sources(in: "Tests/BatonTests/Documentation")
        let golden = try sources(in: "Tests/BatonTests/Templates/Golden", suffix: ".swift.golden")
        let compiled = (examples + golden).map(normalized)
        let guides =
            try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("Docs").path)
            .filter { $0.hasSuffix(".md") }
            .map { "Docs/\($0)" } + ["README.md"]
        var checked = 0
        for guide in guides {
            let text = try String(contentsOf: root.appendingPathComponent(guide), encoding: .utf8)
            for block in swiftBlocks(in: text) {
                let example = normalized(block)
                checked += 1
                XCTAssertTrue(
                    compiled.contains { $0.contains(example) },
                    "\(guide): this example is not compiled anywhere:\n\(block)")
            }
        }
        XCTAssertGreaterThanOrEqual(checked, 15, "the guides' examples were not found")
    }
}
