import Foundation
import XCTest
@testable import Baton
@testable import baton_demo

/// The demo's job, on a directory made for the test.
final class DemoTests: BatonTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        try super.setUpWithError()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-demo-\(UUID().uuidString)")
        let nested = directory.appendingPathComponent("a/b/c")
        try FileManager.default.createDirectory(at: nested, withIntermediateDirectories: true)
        for (index, folder) in ["", "a", "a/b", "a/b/c"].enumerated() {
            for file in 0..<5 {
                let url = directory.appendingPathComponent(folder).appendingPathComponent("file\(file).txt")
                try Data(String(repeating: "x", count: index * 10 + file).utf8).write(to: url)
            }
        }
        // Unreadable (as root, permissions do not stop a read, but a dangling link does).
        try FileManager.default.createSymbolicLink(at: directory.appendingPathComponent("a/dangling"),
                                                   withDestinationURL: directory.appendingPathComponent("missing"))
        // A link to a directory above: not followed, so the walk cannot loop.
        try FileManager.default.createSymbolicLink(at: directory.appendingPathComponent("a/b/loop"), withDestinationURL: directory)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
        try super.tearDownWithError()
    }

    func testTheAuditChecksumsEveryFileAndReportsTheUnreadableOne() throws {
        let audit = DirectoryAudit(root: directory, concurrency: 3)
        let tree = audit.makeTree()
        XCTAssertTrue(try tree.runToOutcome(timeout: testTimeout).isSuccess)
        let counts = audit.ledger.snapshot
        XCTAssertEqual(counts.directories, 4)
        XCTAssertEqual(counts.found, 21)
        XCTAssertEqual(counts.records.count, 20)
        XCTAssertEqual(counts.failures.count, 1)
        XCTAssertTrue(counts.failures[0].contains("dangling"))
        XCTAssertEqual(counts.records.reduce(0) { $0 + $1.bytes }, (0..<4).reduce(0) { $0 + 5 * $1 * 10 + 10 })
        // The same tree gives the same checksums.
        let again = DirectoryAudit(root: directory, concurrency: 1)
        XCTAssertTrue(try again.makeTree().runToOutcome(timeout: testTimeout).isSuccess)
        XCTAssertEqual(Set(again.ledger.snapshot.records.map { "\($0.path) \($0.checksum)" }),
                       Set(counts.records.map { "\($0.path) \($0.checksum)" }))
    }

    func testCancellingTheAuditFinishesItCancelled() throws {
        let audit = DirectoryAudit(root: directory, concurrency: 1)
        let tree = audit.makeTree()
        tree.cancel()
        XCTAssertTrue(try tree.runToOutcome(timeout: testTimeout).isCancelled)
        XCTAssertEqual(audit.ledger.snapshot.records.count, 0)
    }

    func testTheCommandLineRejectsBadArguments() {
        XCTAssertEqual(runDemo(["baton-demo", "/definitely/not/here"]), 2)
        XCTAssertEqual(runDemo(["baton-demo", "--concurrency", "0"]), 2)
        XCTAssertEqual(runDemo(["baton-demo", directory.path, "--concurrency", "2"]), 0)
    }
}
