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
        // Links are counted and not followed: one to a file (it would count that file twice), one to
        // a directory above (the walk would loop), one dangling.
        try FileManager.default.createSymbolicLink(
            at: directory.appendingPathComponent("a/again.txt"),
            withDestinationURL: directory.appendingPathComponent("file1.txt"))
        try FileManager.default.createSymbolicLink(
            at: directory.appendingPathComponent("a/b/loop"), withDestinationURL: directory)
        try FileManager.default.createSymbolicLink(
            at: directory.appendingPathComponent("a/dangling"),
            withDestinationURL: directory.appendingPathComponent("missing"))
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
        try super.tearDownWithError()
    }

    private var expectedBytes: Int { (0..<4).reduce(0) { $0 + 5 * $1 * 10 + 10 } }

    func testTheAuditReadsEveryFileOnceAndCountsTheLinksItDoesNotFollow() throws {
        let audit = DirectoryAudit(root: directory.path, concurrency: 3)
        XCTAssertTrue(try audit.makeTree().runToOutcome(timeout: testTimeout).isSuccess)
        let counts = audit.ledger.snapshot
        XCTAssertEqual(counts.directories, 4)
        XCTAssertEqual(counts.filesFound, 20)
        XCTAssertEqual(counts.filesRead, 20)
        XCTAssertEqual(counts.links, 3)
        XCTAssertEqual(counts.unreadable, 0)
        XCTAssertEqual(counts.bytesRead, expectedBytes)
        XCTAssertEqual(counts.bytesFound, expectedBytes)
        // Paths are relative to the root, so two copies of a tree give the same manifest.
        XCTAssertEqual(audit.ledger.sortedEntries.first?.path, Array("a/b/c/file0.txt".utf8))
        let again = DirectoryAudit(root: directory.path + "/", concurrency: 1)
        XCTAssertTrue(try again.makeTree().runToOutcome(timeout: testTimeout).isSuccess)
        XCTAssertEqual(again.manifest(), audit.manifest())
        XCTAssertEqual(again.treeChecksum(), audit.treeChecksum())
    }

    func testTheManifestHasOneSortedLineOfChecksumSizeAndPathPerFile() throws {
        let manifest = directory.appendingPathComponent("manifest.txt")
        XCTAssertEqual(runDemo(["baton-demo", directory.path, "--manifest", manifest.path]), 0)
        let lines = try String(contentsOf: manifest, encoding: .utf8).split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 20)
        XCTAssertEqual(lines, lines.sorted { $0.split(separator: " ")[2] < $1.split(separator: " ")[2] })
        let first = lines[0].split(separator: " ")
        XCTAssertEqual(first.count, 3)
        XCTAssertEqual(first[0].count, 16, "a 16-digit hex checksum")
        XCTAssertEqual(first[1], "30")
        XCTAssertEqual(first[2], "a/b/c/file0.txt")
        var hash = XXH64()
        Data(String(repeating: "x", count: 30).utf8).withUnsafeBytes { hash.update($0) }
        XCTAssertEqual(String(first[0]), hex(hash.digest))
    }

    func testTheTraceAndTheGraphDescribeEveryOperationOfTheAudit() throws {
        // Written beside the audited folder, not in it.
        let trace = URL(fileURLWithPath: directory.path + "-trace.json")
        let graph = URL(fileURLWithPath: directory.path + "-graph.dot")
        let mermaid = URL(fileURLWithPath: directory.path + "-graph.mmd")
        defer { for file in [trace, graph, mermaid] { try? FileManager.default.removeItem(at: file) } }
        XCTAssertEqual(runDemo(["baton-demo", directory.path, "--trace", trace.path, "--graph", graph.path]), 0)
        XCTAssertEqual(runDemo(["baton-demo", directory.path, "--graph", mermaid.path]), 0)

        // 4 listings and 20 reads, each a complete span, inside the tree's span.
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: trace)) as? [String: Any]
        let events = try XCTUnwrap(object?["traceEvents"] as? [[String: Any]])
        let spans = events.filter { $0["ph"] as? String == "X" }
        let names = spans.filter { $0["cat"] as? String == "operation" }.compactMap { $0["name"] as? String }
        XCTAssertEqual(names.filter { $0.hasPrefix("ListDirectory") }.count, 4)
        XCTAssertEqual(names.filter { $0.hasPrefix("ChecksumFile \"read ") }.count, 20)
        let tree = try XCTUnwrap(spans.first { $0["cat"] as? String == "composite" })
        let (treeStart, treeEnd) = (tree["ts"] as! Double, tree["ts"] as! Double + (tree["dur"] as! Double))
        for span in spans {
            let start = span["ts"] as! Double
            XCTAssertTrue(treeStart <= start && start + (span["dur"] as! Double) <= treeEnd, "\(span)")
        }

        // One node per operation (the tree's own too); each listing links to what it found.
        let dot = try String(contentsOf: graph, encoding: .utf8)
        let lines = dot.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        XCTAssertEqual(lines.filter { $0.range(of: #"^n\d+ \["#, options: .regularExpression) != nil }.count, 25)
        XCTAssertEqual(lines.filter { $0.contains(" -> ") && $0.contains(#"label="children""#) }.count, 3 + 20)
        let flowchart = try String(contentsOf: mermaid, encoding: .utf8)
        XCTAssertTrue(flowchart.hasPrefix("flowchart LR\n"), flowchart)
        XCTAssertEqual(flowchart.split(separator: "\n").filter { $0.contains("-.->|children|") }.count, 23)
        XCTAssertEqual(runDemo(["baton-demo", directory.path, "--trace"]), 2)
    }

    func testAFileThatCannotBeReadIsReportedAndTheExitStatusSaysSo() throws {
        // The file vanishes between the listing and the read: a real failed open, even as root.
        let vanishing = directory.appendingPathComponent("a/file3.txt").path
        let manifest = directory.appendingPathComponent("manifest.txt")
        let status = runDemo(
            ["baton-demo", directory.path, "--manifest", manifest.path],
            seams: AuditSeams(beforeOpen: { operation in
                if operation.file.path.display == vanishing { try? FileManager.default.removeItem(atPath: vanishing) }
            }))
        XCTAssertEqual(status, 1)
        let text = try String(contentsOf: manifest, encoding: .utf8)
        XCTAssertTrue(text.contains("changed 13 a/file3.txt\n"), text)
    }

    func testNamesThatAreNotUTF8OrStartWithACombiningMarkAreReadAndKept() throws {
        // A directory and a file whose names are not UTF-8 (the system calls get the bytes as they
        // are), and a name starting with a combining mark (paths are cut below the root by bytes).
        let root = Array(directory.path.utf8)
        func make(_ name: [UInt8], directory: Bool) {
            let path = root + name + [0]
            path.withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { cPath in
                    if directory {
                        XCTAssertEqual(mkdir(cPath.baseAddress!, 0o755), 0)
                    } else {
                        let descriptor = open(cPath.baseAddress!, O_WRONLY | O_CREAT, 0o644)
                        XCTAssertGreaterThanOrEqual(descriptor, 0)
                        XCTAssertEqual(write(descriptor, "hello", 5), 5)
                        close(descriptor)
                    }
                }
            }
        }
        make(Array("/odd\u{FE}".utf8.dropLast(2)) + [0xFE], directory: true)
        make(Array("/odd".utf8) + [0xFE] + Array("/inner\u{FF}".utf8.dropLast(2)) + [0xFF], directory: false)
        make(Array("/\u{301}accent".utf8), directory: false)
        let audit = DirectoryAudit(root: directory.path, concurrency: 2)
        XCTAssertTrue(try audit.makeTree().runToOutcome(timeout: testTimeout).isSuccess)
        let counts = audit.ledger.snapshot
        XCTAssertEqual(counts.unreadable, 0, "\(audit.ledger.sortedProblems)")
        XCTAssertEqual(counts.filesRead, 22)
        XCTAssertEqual(counts.directories, 5)
        let paths = audit.ledger.sortedEntries.map(\.path)
        XCTAssertTrue(paths.contains(Array("\u{301}accent".utf8)))
        XCTAssertTrue(paths.contains(Array("odd".utf8) + [0xFE] + Array("/inner".utf8) + [0xFF]))
        // Printed unambiguously: the undecodable bytes escaped, not replaced.
        XCTAssertTrue(paths.map { escapedForDisplay($0) }.contains("odd\\xFE/inner\\xFF"))
    }

    func testLargeFilesAreReadInChunksAndHashAsAWhole() throws {
        var bytes = [UInt8](repeating: 0, count: 2 * ChecksumFile.chunkSize + 12_345)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: index &* 2_654_435_761 >> 7) }
        let file = directory.appendingPathComponent("large.bin")
        try Data(bytes).write(to: file)
        let audit = DirectoryAudit(root: directory.path, concurrency: 2)
        XCTAssertTrue(try audit.makeTree().runToOutcome(timeout: testTimeout).isSuccess)
        let record = try XCTUnwrap(audit.ledger.sortedEntries.first { $0.path == Array("large.bin".utf8) })
        var whole = XXH64()
        bytes.withUnsafeBytes { whole.update($0) }
        XCTAssertEqual(record.size, bytes.count)
        XCTAssertEqual(record.status, .checksum(whole.digest))
    }

    func testXXH64MatchesTheReferenceValues() {
        func digest(_ bytes: [UInt8]) -> String {
            var hash = XXH64()
            bytes.withUnsafeBytes { hash.update($0) }
            return hex(hash.digest)
        }
        // From the reference implementation (Python's xxhash.xxh64(...).hexdigest()).
        XCTAssertEqual(digest([]), "ef46db3751d8e999")
        XCTAssertEqual(digest(Array("a".utf8)), "d24ec4f1a98c6e5b")
        XCTAssertEqual(digest(Array("abc".utf8)), "44bc2cf5ad770999")
        XCTAssertEqual(digest(Array(repeating: (0...255).map(UInt8.init), count: 5).flatMap { $0 }), "afc184ad7938a354")
        XCTAssertEqual(digest(Array(repeating: UInt8(ascii: "x"), count: 31)), "60dd0d01083b99f0")
        XCTAssertEqual(digest(Array(repeating: UInt8(ascii: "y"), count: 32)), "64da1f1d3495ce66")
        XCTAssertEqual(digest(Array(repeating: UInt8(ascii: "z"), count: 33)), "c5241253c64e0268")
        // Fed in pieces of 32 bytes, the same hash as in one piece.
        let pattern = Array(repeating: (0...255).map(UInt8.init), count: 5).flatMap { $0 }
        var pieces = XXH64()
        pattern.withUnsafeBytes { all in
            pieces.update(UnsafeRawBufferPointer(rebasing: all[0..<512]))
            pieces.update(UnsafeRawBufferPointer(rebasing: all[512...]))
        }
        XCTAssertEqual(hex(pieces.digest), "afc184ad7938a354")
    }

    func testCancellingTheAuditFinishesItCancelled() throws {
        let audit = DirectoryAudit(root: directory.path, concurrency: 1)
        let tree = audit.makeTree()
        tree.cancel()
        XCTAssertTrue(try tree.runToOutcome(timeout: testTimeout).isCancelled)
        XCTAssertEqual(audit.ledger.snapshot.filesRead, 0)
    }

    func testOneInterruptCancelsTheAuditAndStillPrintsTheSummary() {
        // The first file read sends the process SIGINT, as a Ctrl-C does: the audit stops and reports.
        let raised = Locked(false)
        let status = runDemo(
            ["baton-demo", directory.path, "-j", "1"],
            seams: AuditSeams(beforeOpen: { operation in
                let first = raised.mutate { raised -> Bool in
                    defer { raised = true }
                    return !raised
                }
                if first {
                    kill(getpid(), SIGINT)
                    // Hold this read until the cancellation has reached it (bounded).
                    XCTAssertTrue(eventually { operation.isCancelled })
                }
            }))
        XCTAssertEqual(status, 130)
        XCTAssertTrue(raised.value)
    }

    func testTheCommandLineRejectsBadArguments() {
        XCTAssertEqual(runDemo(["baton-demo", "/definitely/not/here"]), 2)
        XCTAssertEqual(runDemo(["baton-demo", "--concurrency", "0"]), 2)
        XCTAssertEqual(runDemo(["baton-demo", "--no-such-flag"]), 2)
        XCTAssertEqual(runDemo(["baton-demo", directory.path, directory.path]), 2)
        XCTAssertEqual(runDemo(["baton-demo", "--manifest"]), 2)
        XCTAssertEqual(DemoOptions.parse(["--no-such-flag"]), .failure(UsageError("unknown option --no-such-flag")))
        XCTAssertEqual(
            DemoOptions.parse(["-j", "3", "dir", "--manifest", "m.txt"]),
            .success(DemoOptions(directory: Array("dir".utf8), concurrency: 3, manifest: Array("m.txt".utf8))))
        XCTAssertEqual(DemoOptions.parse(["--help"]), .success(nil))
        XCTAssertEqual(runDemo(["baton-demo", directory.path, "--concurrency", "2"]), 0)
    }

    func testTheProgressLineShowsBytesAndAPercentage() {
        var counts = Ledger.Counts()
        counts.filesFound = 10
        counts.filesRead = 5
        counts.bytesFound = 4 << 20
        counts.bytesRead = 1 << 20
        XCTAssertEqual(progressLine(counts), "5/10 files, 1.0 MiB of 4.0 MiB found so far (25%), 0 unreadable")
    }
}
