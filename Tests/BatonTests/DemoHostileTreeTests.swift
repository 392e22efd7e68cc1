import CBatonDemo
import Foundation
import XCTest

@testable import Baton
@testable import baton_demo

/// The demo on trees that fight back: entries swapped while it runs, files that never end, names that
/// are not text, depth past PATH_MAX, pseudo-file systems, a read that blocks, a Ctrl-C meanwhile.
final class DemoHostileTreeTests: BatonTestCase {
    private var root: [UInt8] = []
    private var rootPath: String { String(decoding: root, as: UTF8.self) }
    /// Descriptors the test holds open (FIFO writers, pipes), closed at the end.
    private let held = Locked<[Int32]>([])

    override func setUpWithError() throws {
        try super.setUpWithError()
        root = Array(
            FileManager.default.temporaryDirectory.appendingPathComponent("baton-hostile-\(UUID().uuidString)").path.utf8)
        XCTAssertEqual(call(root) { mkdir($0, 0o755) }, 0)
    }

    override func tearDownWithError() throws {
        for descriptor in held.value { close(descriptor) }
        removeTree(root)
        try super.tearDownWithError()
    }

    // MARK: - The fixture

    /// Names a user's tree can hold: each is a regular file with its own content.
    private static let hostileNames: [[UInt8]] = [
        Array("new\nline".utf8), Array("back\\slash".utf8), Array("tab\there".utf8), Array("-leading-dash".utf8),
        Array("carriage\rreturn".utf8), Array("e\u{301}-composed".utf8), Array("\u{301}-leading-mark".utf8),
        // Two names that a lossy decoding prints alike ("bad\u{FFFD}").
        Array("bad".utf8) + [0xFE], Array("bad".utf8) + [0xFF],
        Array("escape\u{1B}[31m".utf8),
    ]

    private func path(_ name: [UInt8]) -> [UInt8] { root + [UInt8(ascii: "/")] + name }

    private func makeFile(_ name: [UInt8], _ content: String) { writeFile(path(name), content) }

    /// A FIFO whose writer stays open (so a reader would wait forever), with `pending` bytes in it.
    private func makeFIFOWithWriter(_ name: [UInt8], pending: Int) -> Int32 {
        XCTAssertEqual(call(path(name)) { mkfifo($0, 0o644) }, 0)
        // O_RDWR opens a FIFO at once on Linux, and holds both ends.
        let descriptor = call(path(name)) { open($0, O_RDWR | O_NONBLOCK) }
        XCTAssertGreaterThanOrEqual(descriptor, 0)
        held.mutate { $0.append(descriptor) }
        let bytes = [UInt8](repeating: 0x42, count: pending)
        XCTAssertEqual(write(descriptor, bytes, pending), pending)
        return descriptor
    }

    /// A chain of `levels` directories, each name 20 bytes, with a file at the bottom: its path is
    /// longer than PATH_MAX, so it can only be made (and read) relative to directory descriptors.
    private func makeDeepDirectory(levels: Int) -> Int {
        var directory = call(root) { open($0, O_RDONLY | O_DIRECTORY) }
        var length = root.count
        for level in 0..<levels {
            let name = "level-\(String(level + 1000))-abcdefghi"
            XCTAssertEqual(mkdirat(directory, name, 0o755), 0)
            let next = openat(directory, name, O_RDONLY | O_DIRECTORY)
            close(directory)
            directory = next
            length += 1 + name.utf8.count
        }
        let file = openat(directory, "bottom.txt", O_WRONLY | O_CREAT, 0o644)
        XCTAssertEqual(write(file, "deep", 4), 4)
        close(file)
        close(directory)
        return length + "/bottom.txt".utf8.count
    }

    private func audit(_ seams: AuditSeams = AuditSeams(), readDeadline: Double = 30) throws -> DirectoryAudit {
        let audit = DirectoryAudit(root: rootPath, concurrency: 3, readDeadline: readDeadline, seams: seams)
        XCTAssertTrue(try audit.makeTree().runToOutcome(timeout: testTimeout).isSuccess)
        return audit
    }

    private func entry(_ audit: DirectoryAudit, _ name: [UInt8]) -> ManifestEntry? {
        audit.ledger.sortedEntries.first { $0.path == name }
    }

    private func problem(_ audit: DirectoryAudit, _ name: [UInt8]) -> Ledger.Problem? {
        audit.ledger.sortedProblems.first { $0.entry.path == name }
    }

    // MARK: - The whole fixture, through the command

    func testAHostileTreeIsAuditedReportedAndItsManifestRoundTripsThroughCheck() throws {
        for (index, name) in Self.hostileNames.enumerated() { makeFile(name, "content \(index)") }
        let fifo = makeFIFOWithWriter(Array("endless".utf8), pending: 4096)
        let deepLength = makeDeepDirectory(levels: 300)
        XCTAssertGreaterThan(deepLength - root.count, Int(PATH_MAX))
        XCTAssertEqual(call(path(Array("locked".utf8))) { mkdir($0, 0o755) }, 0)
        makeFile(Array("locked/inside.txt".utf8), "locked in")
        XCTAssertEqual(call(path(Array("locked".utf8))) { chmod($0, 0) }, 0)
        defer { _ = call(path(Array("locked".utf8))) { chmod($0, 0o755) } }

        let manifests = FileManager.default.temporaryDirectory.appendingPathComponent("baton-hostile-manifests-\(UUID())")
        try FileManager.default.createDirectory(at: manifests, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: manifests) }
        let (one, two) = (manifests.appendingPathComponent("one").path, manifests.appendingPathComponent("two").path)

        // Root reads a directory without permission; anyone else cannot.
        let locked = geteuid() != 0
        var first = ""
        let firstStatus = runDemo(["baton-demo", rootPath, "--manifest", one, "-j", "4"]) { first += $0 }
        XCTAssertEqual(firstStatus, locked ? 1 : 0, first)
        var second = ""
        XCTAssertEqual(runDemo(["baton-demo", rootPath, "--manifest", two, "-j", "1"]) { second += $0 }, firstStatus)

        // Two runs, the same tree checksum and the same manifest, byte for byte.
        let checksumLine = { (text: String) in text.split(separator: "\n").first { $0.contains("tree checksum:") } }
        XCTAssertNotNil(checksumLine(first))
        XCTAssertEqual(checksumLine(first), checksumLine(second))
        let manifest = try Data(contentsOf: URL(fileURLWithPath: one))
        XCTAssertEqual(manifest, try Data(contentsOf: URL(fileURLWithPath: two)))

        // One line per name, none forged: the manifest reads back to exactly the audit's entries.
        let entries = try Manifest.parse(Array(manifest))
        let files = 10 + 1 + (locked ? 0 : 1)
        XCTAssertEqual(entries.count, files + (locked ? 1 : 0), String(decoding: manifest, as: UTF8.self))
        for name in Self.hostileNames {
            XCTAssertEqual(entries.first { $0.path == name }?.status.isChecksum, true, escapedForDisplay(name))
        }
        let lines = String(decoding: manifest, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        XCTAssertEqual(lines.count, entries.count + 1)
        XCTAssertTrue(lines.contains("\\\(entries.first { $0.path == Array("new\nline".utf8) }!.status.field) 9 new\\nline"))
        XCTAssertTrue(lines.contains { $0.hasPrefix("\\") && $0.hasSuffix(" back\\\\slash") })
        let deep = try XCTUnwrap(entries.first { $0.path.count > Int(PATH_MAX) })
        XCTAssertEqual(deep.size, 4)
        XCTAssertTrue(escapedForDisplay(deep.path).hasSuffix("/bottom.txt"))
        if locked { XCTAssertEqual(entries.first { $0.path == Array("locked".utf8) }?.status, .unreadable) }

        // Printed unambiguously: the two "bad" names differ, nothing moves the cursor, the FIFO and
        // its writer are untouched: still 4096 bytes waiting.
        XCTAssertFalse(first.contains("\u{1B}"), first)
        var pending = [UInt8](repeating: 0, count: 8192)
        XCTAssertEqual(read(fifo, &pending, pending.count), 4096)
        XCTAssertTrue(first.contains("1 special files (FIFOs, devices, sockets)"), first)

        // The loop closes: the unchanged tree checks clean; a change, a removal and an addition are
        // each reported, by name.
        var check = ""
        XCTAssertEqual(runDemo(["baton-demo", rootPath, "--check", one]) { check += $0 }, locked ? 1 : 0, check)
        XCTAssertTrue(check.contains("\(files + (locked ? 1 : 0)) unchanged, 0 changed, 0 missing, 0 new"), check)
        makeFile(Array("tab\there".utf8), "changed content")
        XCTAssertEqual(call(path(Array("-leading-dash".utf8))) { unlink($0) }, 0)
        makeFile(Array("bad".utf8) + [0xFD], "new")
        check = ""
        XCTAssertEqual(runDemo(["baton-demo", rootPath, "--check", one]) { check += $0 }, 1, check)
        XCTAssertTrue(check.contains("1 changed, 1 missing, 1 new"), check)
        XCTAssertTrue(check.contains("  changed: tab\\there\n"), check)
        XCTAssertTrue(check.contains("  missing: -leading-dash\n"), check)
        XCTAssertTrue(check.contains("  new: bad\\xFD\n"), check)
    }

    func testAManifestThatCannotBeReadBackIsAUsageErrorNamingTheLine() throws {
        let manifest = FileManager.default.temporaryDirectory.appendingPathComponent("baton-bad-manifest-\(UUID())")
        defer { try? FileManager.default.removeItem(at: manifest) }
        try Data("0123456789abcdef 3 fine\nnot-a-checksum 3 name\n".utf8).write(to: manifest)
        XCTAssertEqual(runDemo(["baton-demo", rootPath, "--check", manifest.path]) { _ in }, 2)
        XCTAssertThrowsError(try Manifest.parse(Array("0123456789abcdef 3 fine\nnot-a-checksum 3 name\n".utf8))) {
            XCTAssertEqual($0 as? ManifestError, ManifestError(line: 2, reason: "not-a-checksum is not a checksum"))
        }
        XCTAssertThrowsError(try Manifest.parse(Array("\\0123456789abcdef 3 a\\tb\n".utf8))) {
            XCTAssertEqual(($0 as? ManifestError)?.line, 1)
        }
        XCTAssertThrowsError(try Manifest.parse(Array("0123456789abcdef x name\n".utf8)))
        XCTAssertThrowsError(try Manifest.parse(Array("0123456789abcdef 3\n".utf8)))
        XCTAssertThrowsError(try Manifest.parse(Array("skipped 0 a\nskipped 0 b\nunreadable 0 a\n".utf8))) {
            XCTAssertEqual($0 as? ManifestError, ManifestError(line: 3, reason: "the path a is listed twice (first on line 1)"))
        }
        XCTAssertEqual(runDemo(["baton-demo", rootPath, "--check", manifest.path + "-missing"]) { _ in }, 2)
    }

    // MARK: - Changes while the audit runs

    func testAFileSwappedForAFIFOAfterItWasListedIsReportedChangedAndNeverOpenedForReading() throws {
        makeFile(Array("swapped.txt".utf8), "a regular file when listed")
        let swapped = path(Array("swapped.txt".utf8))
        let audit = try audit(
            AuditSeams(beforeOpen: { operation in
                guard Array(operation.file.path.bytes) == swapped else { return }
                _ = call(swapped) { unlink($0) }
                _ = call(swapped) { mkfifo($0, 0o644) }
            }))
        XCTAssertEqual(entry(audit, Array("swapped.txt".utf8))?.status, .changed)
        XCTAssertEqual(problem(audit, Array("swapped.txt".utf8))?.reason, "replaced by a FIFO while auditing")
        XCTAssertEqual(audit.ledger.snapshot.changed, 1)
    }

    func testAFileReplacedByAnotherOrByALinkIsReportedChanged() throws {
        makeFile(Array("replaced.txt".utf8), "one")
        makeFile(Array("linked.txt".utf8), "two")
        let (replaced, linked) = (path(Array("replaced.txt".utf8)), path(Array("linked.txt".utf8)))
        let audit = try audit(
            AuditSeams(beforeOpen: { operation in
                let bytes = Array(operation.file.path.bytes)
                if bytes == replaced {
                    // Written beside it, then renamed over it (as editors save): a new inode.
                    writeFile(replaced + Array(".new".utf8), "another file, same name")
                    _ = call(replaced + Array(".new".utf8)) { source in call(replaced) { rename(source, $0) } }
                } else if bytes == linked {
                    _ = call(linked) { unlink($0) }
                    _ = call(linked) { symlink("/etc/hostname", $0) }
                }
            }))
        XCTAssertEqual(problem(audit, Array("replaced.txt".utf8))?.reason, "replaced by another file while auditing")
        XCTAssertEqual(problem(audit, Array("linked.txt".utf8))?.reason, "replaced by a symbolic link while auditing")
    }

    func testAFileRemovedAndRecreatedOrModifiedBetweenListingAndOpenIsReportedChanged() throws {
        makeFile(Array("recreated.txt".utf8), "nine byte")
        makeFile(Array("appended.txt".utf8), "nine byte")
        makeFile(Array("vanished.txt".utf8), "nine byte")
        let (recreated, appended, vanished) = (
            path(Array("recreated.txt".utf8)), path(Array("appended.txt".utf8)), path(Array("vanished.txt".utf8))
        )
        let audit = try audit(
            AuditSeams(beforeOpen: { operation in
                let bytes = Array(operation.file.path.bytes)
                if bytes == recreated {
                    // File systems reuse a freed inode number at once: only its change time tells.
                    _ = call(recreated) { unlink($0) }
                    writeFile(recreated, "another content, other size")
                } else if bytes == appended {
                    let appender = call(appended) { open($0, O_WRONLY | O_APPEND) }
                    _ = write(appender, "+", 1)
                    close(appender)
                } else if bytes == vanished {
                    _ = call(vanished) { unlink($0) }
                }
            }))
        XCTAssertEqual(entry(audit, Array("recreated.txt".utf8))?.status, .changed)
        XCTAssertEqual(entry(audit, Array("recreated.txt".utf8))?.size, 9, "the size as listed")
        XCTAssertEqual(problem(audit, Array("appended.txt".utf8))?.reason, "modified while auditing")
        XCTAssertEqual(problem(audit, Array("vanished.txt".utf8))?.reason, "removed while auditing")
        XCTAssertEqual(audit.ledger.snapshot.filesRead, 0)
    }

    func testAFileThatGrowsOrShrinksWhileReadIsReportedChangedAndItsReadEnds() throws {
        makeFile(Array("growing.log".utf8), "twelve bytes")
        makeFile(Array("shrinking.log".utf8), "twelve bytes")
        let audit = try audit(
            AuditSeams(afterOpen: { operation, descriptor in
                if Array(operation.relativePath) == Array("growing.log".utf8) {
                    // Another writer appends after the open: a file that never ends if read to its end.
                    let appender = call(operation.file.path.bytes + [0]) { open($0, O_WRONLY | O_APPEND) }
                    _ = write(appender, "and more", 8)
                    close(appender)
                } else if Array(operation.relativePath) == Array("shrinking.log".utf8) {
                    _ = call(operation.file.path.bytes + [0]) { truncate($0, 4) }
                }
            }))
        XCTAssertEqual(problem(audit, Array("growing.log".utf8))?.reason, "grew while being read")
        XCTAssertEqual(problem(audit, Array("shrinking.log".utf8))?.reason, "shrank while being read")
    }

    func testADirectoryThatVanishesOrIsReplacedBeforeItIsListedIsReported() throws {
        for name in ["gone", "moved", "kept"] {
            XCTAssertEqual(call(path(Array(name.utf8))) { mkdir($0, 0o755) }, 0)
            makeFile(Array("\(name)/file.txt".utf8), name)
        }
        let (gone, moved) = (path(Array("gone".utf8)), path(Array("moved".utf8)))
        let audit = try audit(
            AuditSeams(beforeList: { operation in
                let bytes = Array(operation.directory.path.bytes)
                if bytes == gone { removeTree(gone) }
                if bytes == moved {
                    // Replaced by a link to a directory outside the tree: the walk must not follow it.
                    removeTree(moved)
                    _ = call(moved) { symlink("/", $0) }
                }
            }))
        XCTAssertEqual(problem(audit, Array("gone".utf8))?.reason, String(cString: strerror(ENOENT)))
        XCTAssertEqual(entry(audit, Array("moved".utf8))?.status, .changed)
        XCTAssertEqual(entry(audit, Array("kept/file.txt".utf8))?.size, 4)
        XCTAssertEqual(audit.ledger.snapshot.filesRead, 1)
    }

    // MARK: - Pseudo-file systems

    func testProcAndSysAreSkippedWithTheirFileSystemsNameAndNothingIsRead() throws {
        for (directory, fileSystem) in [("/proc", "procfs"), ("/sys", "sysfs")] {
            guard FileManager.default.fileExists(atPath: directory + "/self") || directory == "/sys" else { continue }
            guard FileManager.default.fileExists(atPath: directory) else { continue }
            let audit = DirectoryAudit(root: directory, concurrency: 2)
            XCTAssertTrue(try audit.makeTree().runToOutcome(timeout: testTimeout).isSuccess)
            let counts = audit.ledger.snapshot
            XCTAssertEqual(counts.filesRead, 0)
            XCTAssertEqual(counts.skipped, 1)
            XCTAssertEqual(audit.ledger.sortedEntries, [ManifestEntry(path: Array(".".utf8), status: .skipped, size: 0)])
            XCTAssertEqual(
                audit.ledger.sortedProblems.first?.reason, "on \(fileSystem), a pseudo-file system (its files are not read)")
        }
    }

    // MARK: - Reads that block

    /// Makes the file's descriptor a pipe whose writer stays open and silent: its read blocks in the
    /// kernel, as a read from a stalled mount does.
    private static func blockReads(_ descriptor: Int32, holding held: Locked<[Int32]>) {
        var ends: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ends), 0)
        XCTAssertEqual(dup2(ends[0], descriptor), descriptor)
        close(ends[0])
        held.mutate { $0.append(ends[1]) }
    }

    /// Whether thread `thread` of this process is blocked in read(2) on `descriptor` (Linux).
    private static func isBlockedInRead(thread: Int64, descriptor: Int32) -> Bool {
        guard let text = try? String(contentsOfFile: "/proc/self/task/\(thread)/syscall", encoding: .utf8) else { return false }
        let fields = text.split(separator: " ")
        return fields.count > 1 && fields[0] == "\(baton_demo_read_syscall_number())"
            && fields[1] == "0x\(String(descriptor, radix: 16))"
    }

    func testOneReadThatBlocksPastTheDeadlineIsReportedAndTheAuditGoesOn() throws {
        makeFile(Array("stalled.dat".utf8), "never read")
        makeFile(Array("fine.dat".utf8), "read")
        let held = held
        let audit = try audit(
            AuditSeams(afterOpen: { operation, descriptor in
                if Array(operation.relativePath) == Array("stalled.dat".utf8) { Self.blockReads(descriptor, holding: held) }
            }),
            readDeadline: 1)
        XCTAssertEqual(problem(audit, Array("stalled.dat".utf8))?.reason, "a read blocked for more than 1.0 s")
        XCTAssertEqual(entry(audit, Array("stalled.dat".utf8))?.status, .unreadable)
        XCTAssertEqual(entry(audit, Array("fine.dat".utf8))?.size, 4)
    }

    /// A read that ignores signals (as one on a FUSE mount whose server stopped answering does).
    private final class DeafRead: Sendable {
        let release = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let returned = DispatchSemaphore(value: 0)
        func read(_: Int32, _: UnsafeMutableRawPointer, _: Int) -> Int {
            entered.signal()
            release.wait()   // retries on EINTR: a signal does not end it
            returned.signal()
            errno = EIO
            return -1
        }
    }

    func testAReadThatIgnoresItsInterruptIsAbandonedAndTheAuditEnds() throws {
        makeFile(Array("deaf.dat".utf8), "never read")
        makeFile(Array("fine.dat".utf8), "read")
        let deaf = DeafRead()
        let audit = DirectoryAudit(
            root: rootPath, concurrency: 2, readDeadline: 1,
            seams: AuditSeams(read: { descriptor, buffer, count in
                // Only the one file's reads are deaf.
                var status = stat()
                fstat(descriptor, &status)
                return status.st_size == 10 ? deaf.read(descriptor, buffer, count) : Foundation.read(descriptor, buffer, count)
            }))
        let tree = audit.makeTree()
        XCTAssertTrue(try tree.runToOutcome(timeout: testTimeout).isSuccess)
        XCTAssertEqual(problem(audit, Array("deaf.dat".utf8))?.reason, "a call reading it blocked for more than 1.0 s")
        XCTAssertEqual(entry(audit, Array("fine.dat".utf8))?.size, 4)
        // When the call returns at last, the operation does nothing more: its outcome stays.
        deaf.release.signal()
        XCTAssertEqual(deaf.returned.wait(timeout: .now() + testTimeout), .success)
        XCTAssertEqual(audit.ledger.snapshot.unreadable, 1)
        XCTAssertEqual(audit.ledger.sortedEntries.count, 2)
    }

    func testCancellingDuringAReadThatIgnoresItsInterruptStillEndsTheAudit() throws {
        makeFile(Array("deaf.dat".utf8), "never read")
        let deaf = DeafRead()
        let audit = DirectoryAudit(
            root: rootPath, concurrency: 1, readDeadline: 3_600, seams: AuditSeams(read: { deaf.read($0, $1, $2) }))
        let tree = audit.makeTree()
        let queue = OperationQueue()
        queue.addOperation(tree)
        XCTAssertEqual(deaf.entered.wait(timeout: .now() + testTimeout), .success)
        tree.cancel()
        XCTAssertTrue(try tree.waitToOutcome().isCancelled)
        deaf.release.signal()
        XCTAssertEqual(deaf.returned.wait(timeout: .now() + testTimeout), .success)
        XCTAssertEqual(audit.ledger.snapshot.filesRead, 0)
    }

    /// The watch decides under its lock and finishes an abandoned operation on its own thread, while
    /// the operation's thread may return from its call at that very moment, and a cancel may arrive
    /// from a third: every file must still be recorded exactly once, and nothing finished twice.
    func testAbandonmentsRacingReturnsAndCancelsRecordEveryFileOnceAndFinishNothingTwice() throws {
        let files = 24
        for index in 0..<files { makeFile(Array("f\(index).dat".utf8), String(repeating: "x", count: index + 1)) }
        for trial in 0..<30 {
            // Every third file's read ignores signals until the trial releases it (or its own gate
            // opens, at a different point of each trial): the abandonment races the return.
            let release = DispatchSemaphore(value: 0)
            let firstDeaf = Gate()
            let deafReturned = Locked(0)
            let deafEntered = Locked(0)
            let audit = DirectoryAudit(
                root: rootPath, concurrency: 4, readDeadline: 0.02, readGrace: 0.02,
                seams: AuditSeams(read: { descriptor, buffer, count in
                    var status = stat()
                    fstat(descriptor, &status)
                    guard (Int(status.st_size) - 1) % 3 == 0 else { return systemRead(descriptor, buffer, count) }
                    let entered = deafEntered.mutate { value -> Int in
                        value += 1
                        return value
                    }
                    if entered == 1 { firstDeaf.open() }
                    // Some return at once after entering (racing their abandonment), the rest wait.
                    if (entered + trial) % 4 != 0 { release.wait() }
                    deafReturned.mutate { $0 += 1 }
                    errno = EIO
                    return -1
                }))
            let tree = audit.makeTree()
            OperationQueue().addOperation(tree)
            if trial % 2 == 1 {
                XCTAssertTrue(firstDeaf.wait())
                tree.cancel()
            }
            let outcome = try tree.waitToOutcome(timeout: bulkTimeout)
            // Release every read still held, and wait for each to come back.
            let entered = deafEntered.value
            for _ in 0..<entered { release.signal() }
            XCTAssertTrue(eventually { deafReturned.value == entered })
            let paths = audit.ledger.sortedEntries.map(\.path)
            XCTAssertEqual(Set(paths).count, paths.count, "a file recorded twice, trial \(trial)")
            if trial % 2 == 0 {
                XCTAssertTrue(outcome.isSuccess, "trial \(trial): \(outcome)")
                XCTAssertEqual(paths.count, files, "trial \(trial)")
            }
            let kinds = diagnostics.allKinds
            XCTAssertFalse(kinds.contains(.finishedTwice) || kinds.contains(.internalInconsistency), "\(kinds)")
        }
    }

    func testCtrlCDuringABlockedReadInterruptsItAndPrintsTheSummary() throws {
        guard baton_demo_read_syscall_number() >= 0 else { throw XCTSkip("needs /proc/self/task/*/syscall") }
        makeFile(Array("blocked.dat".utf8), "never read")
        let interrupted = Gate()
        let held = held
        var output = ""
        let status = runDemo(
            ["baton-demo", rootPath, "-j", "1"],
            seams: AuditSeams(afterOpen: { operation, descriptor in
                Self.blockReads(descriptor, holding: held)
                let reader = baton_demo_thread_id()
                // Once this thread is blocked inside read(2) (seen by the kernel), Ctrl-C.
                Thread {
                    XCTAssertTrue(eventually { Self.isBlockedInRead(thread: reader, descriptor: descriptor) })
                    kill(getpid(), SIGINT)
                    interrupted.open()
                }.start()
            }),
            output: { output += $0 })
        XCTAssertTrue(interrupted.wait(timeout: testTimeout))
        XCTAssertEqual(status, 130, output)
        XCTAssertTrue(output.contains("outcome:        cancelled"), output)
        XCTAssertTrue(output.contains("Interrupted: the 0 files above were read to the end"), output)
        // Stopped by the cancellation, not by the read deadline (which would report it unreadable).
        XCTAssertTrue(output.contains("unreadable:     0\n"), output)
    }

    // MARK: - The command line

    func testArgumentsAreBytesAndArePrintedEscaped() throws {
        // A directory and a manifest whose names are not UTF-8, and a manifest name with an escape
        // sequence and a newline: audited, written under those very bytes, printed escaped.
        let directory = root + Array("/odd".utf8) + [0xFF]
        XCTAssertEqual(call(directory) { mkdir($0, 0o755) }, 0)
        writeFile(directory + Array("/inside.txt".utf8), "inside")
        let manifest = root + Array("/manifest".utf8) + [0xFE]
        var output = ""
        XCTAssertEqual(
            runDemo(arguments: [Array("baton-demo".utf8), directory, Array("--manifest".utf8), manifest]) { output += $0 }, 0)
        XCTAssertTrue(output.contains("odd\\xFF"), output)
        XCTAssertTrue(output.contains("manifest\\xFE"), output)
        let written = try readWholeFile(RawPath(bytes: manifest))
        XCTAssertEqual(try Manifest.parse(written).map(\.path), [Array("inside.txt".utf8)])

        let hostile = root + Array("/m\u{1B}[2J\nFAKE".utf8)
        output = ""
        XCTAssertEqual(
            runDemo(arguments: [Array("baton-demo".utf8), directory, Array("--manifest".utf8), hostile]) { output += $0 }, 0)
        XCTAssertFalse(output.contains("\u{1B}"), output)
        XCTAssertTrue(output.contains("m\\x1B[2J\\nFAKE"), output)
        XCTAssertNoThrow(try readWholeFile(RawPath(bytes: hostile)))
    }

    func testAReadTimeoutOutOfRangeIsAUsageError() {
        for value in ["0", "-1", "nan", "inf", "1e11", "31536001"] {
            XCTAssertEqual(
                DemoOptions.parse(["--read-timeout", value]),
                .failure(UsageError("--read-timeout needs a number of seconds above 0, up to a year (31536000)")), value)
        }
        XCTAssertEqual(DemoOptions.parse(["--read-timeout", "31536000"]).map { $0?.readTimeout }, .success(31_536_000))
        XCTAssertEqual(runDemo(["baton-demo", rootPath, "--read-timeout", "1e11"]) { _ in }, 2)
    }

    // MARK: - Pure parts

    func testNamesPrintUnambiguouslyAndCannotMoveTheCursor() {
        XCTAssertEqual(escapedForDisplay(Array("plain/name.txt".utf8)), "plain/name.txt")
        XCTAssertEqual(escapedForDisplay(Array("new\nline\ttab\rcr".utf8)), "new\\nline\\ttab\\rcr")
        XCTAssertEqual(escapedForDisplay(Array("back\\slash".utf8)), "back\\\\slash")
        XCTAssertEqual(escapedForDisplay(Array("bad".utf8) + [0xFE]), "bad\\xFE")
        XCTAssertNotEqual(escapedForDisplay(Array("bad".utf8) + [0xFE]), escapedForDisplay(Array("bad".utf8) + [0xFF]))
        XCTAssertEqual(escapedForDisplay(Array("\u{1B}[31m\u{7F}".utf8)), "\\x1B[31m\\x7F")
        XCTAssertEqual(escapedForDisplay(Array("\u{85}".utf8)), "\\u{85}")
        XCTAssertEqual(escapedForDisplay(Array("\u{301}é日本🙂".utf8)), "\u{301}é日本🙂")
        // Overlong, surrogate, truncated and out-of-range encodings are bytes, not characters.
        XCTAssertEqual(escapedForDisplay([0xC0, 0xAF]), "\\xC0\\xAF")
        XCTAssertEqual(escapedForDisplay([0xED, 0xA0, 0x80]), "\\xED\\xA0\\x80")
        XCTAssertEqual(escapedForDisplay([0xE6, 0x97]), "\\xE6\\x97")
        XCTAssertEqual(escapedForDisplay([0xF4, 0x90, 0x80, 0x80]), "\\xF4\\x90\\x80\\x80")
        // A backslash in a name cannot be confused with an escape.
        XCTAssertNotEqual(escapedForDisplay(Array("a\\xFE".utf8)), escapedForDisplay(Array("a".utf8) + [0xFE]))
    }

    func testEveryManifestLineReadsBackAsTheEntryItWasAndTheChecksumCoversPaths() throws {
        var random = SeededRandom(seed: 21)
        let alphabet: [UInt8] = Array("ab\\\n\r \t/-".utf8) + [0x00 + 1, 0x7F, 0xC3, 0xA9, 0xFE, 0xFF]
        var entries: [ManifestEntry] = []
        var seen = Set<[UInt8]>()
        for index in 0..<2_000 {
            let name = (0..<(1 + Int(random.next() % UInt64(12)))).map { _ in
                alphabet[Int(random.next() % UInt64(alphabet.count))]
            }
            guard seen.insert(name).inserted else { continue }
            let statuses: [ManifestEntry.Status] = [.checksum(random.next()), .unreadable, .changed, .skipped]
            entries.append(ManifestEntry(path: name, status: statuses[index % 4], size: Int(random.next() % UInt64(1 << 40))))
        }
        entries.sort(by: ManifestEntry.byPath)
        var bytes: [UInt8] = []
        let checksum = Manifest.write(entries) { bytes += $0 }
        XCTAssertEqual(try Manifest.parse(bytes), entries)
        XCTAssertEqual(bytes.filter { $0 == UInt8(ascii: "\n") }.count, entries.count, "one line per entry")
        var whole = XXH64()
        bytes.withUnsafeBytes { whole.update($0) }
        XCTAssertEqual(checksum, whole.digest, "the tree checksum is the manifest's XXH64")
        // Renaming one file changes the tree checksum, as changing its content does.
        var renamed = entries
        renamed[0] = ManifestEntry(path: renamed[0].path + [0x41], status: renamed[0].status, size: renamed[0].size)
        XCTAssertNotEqual(Manifest.write(renamed) { _ in }, checksum)
    }

    func testComparingManifestsFindsChangedMissingAndNewPathsInOnePass() {
        func entry(_ name: String, _ size: Int) -> ManifestEntry {
            ManifestEntry(path: Array(name.utf8), status: .checksum(UInt64(size)), size: size)
        }
        let comparison = Manifest.compare(
            expected: [entry("a", 1), entry("b", 2), entry("c", 3), entry("e", 5)],
            actual: [entry("a", 1), entry("b", 20), entry("d", 4), entry("e", 5), entry("f", 6)])
        XCTAssertEqual(comparison.unchanged, 2)
        XCTAssertEqual(comparison.changed, [Array("b".utf8)])
        XCTAssertEqual(comparison.missing, [Array("c".utf8)])
        XCTAssertEqual(comparison.new, [Array("d".utf8), Array("f".utf8)])
        XCTAssertFalse(Manifest.compare(expected: [entry("a", 1)], actual: [entry("a", 1)]).differs)
    }

    func testPeakMemoryIsTheProcesssOwnHighWaterMark() {
        XCTAssertEqual(peakMemory(fromStatus: "Name:\tx\nVmPeak:\t  9000 kB\nVmHWM:\t    2048 kB\nVmRSS:\t1 kB\n"), 2)
        XCTAssertNil(peakMemory(fromStatus: "Name:\tx\n"))
        // The kernel pads the number to 8 characters: a larger one follows the tab directly.
        XCTAssertEqual(peakMemory(fromStatus: "VmHWM:\t12582912 kB\n"), 12_288)
        #if os(Linux)
        let peak = peakMemoryMebibytes()
        XCTAssertTrue(peak > 0 && peak.isFinite, "\(peak)")
        #endif
    }

    /// Every order of the events one operation's watched calls can meet, from its thread and the
    /// watch's, up to a depth: a stop is never lost and the first reason wins; a stopped reader starts
    /// no call; a call is interrupted only while it must stop, again on every tick; it is abandoned only
    /// after an interrupt it outlived by the grace period, and then never again touched.
    func testTheReadStateKeepsItsPromisesInEveryOrderOfEvents() {
        enum Event: CaseIterable { case begin, end, progress, cancel, tick, lateTick, graceTick, staleTick }
        typealias State = ReadState<Int>
        struct Node {
            var state = State()
            var now: UInt64 = 1_000
            var interrupted = false   // the call in progress has been interrupted at least once
        }
        let (deadline, grace): (UInt64, UInt64) = (100, 1_000)
        var frontier = [Node()]
        var (explored, abandons, stalls) = (0, 0, 0)
        for _ in 0..<7 {
            var next: [Node] = []
            for node in frontier {
                for event in Event.allCases {
                    var node = node
                    let (inCall, stopped, abandoned) = (node.state.call != nil, node.state.stop, node.state.abandoned)
                    switch event {
                    case .begin:
                        guard !inCall else { continue }   // one thread makes the calls: none inside another
                        XCTAssertEqual(node.state.beginCall(on: 7, at: node.now), stopped == nil && !abandoned)
                        node.interrupted = false
                    case .end:
                        guard inCall else { continue }
                        XCTAssertEqual(node.state.endCall(), stopped)
                        XCTAssertNil(node.state.call)
                    case .progress:
                        node.now += 10
                        node.state.progress(at: node.now)
                    case .cancel:
                        XCTAssertEqual(node.state.request(.cancelled), inCall && !abandoned ? 7 : nil)
                        XCTAssertEqual(node.state.stop, stopped ?? .cancelled, "the first reason wins")
                    case .staleTick:
                        // A tick whose clock was read before the call began (it takes the lock later).
                        guard let since = node.state.call?.since else { continue }
                        let before = node.state
                        switch node.state.tick(at: since - 1, deadline: deadline, grace: grace) {
                        case .abandon: XCTFail("abandoned by a stale tick")
                        case .interrupt: node.interrupted = true   // a call told to stop is interrupted
                        case .nothing: break
                        }
                        XCTAssertEqual(node.state.stop, before.stop, "stopped by a stale tick")
                    case .tick, .lateTick, .graceTick:
                        let (since, wasInterrupted) = (node.state.call?.since, node.interrupted)
                        node.now += event == .tick ? 10 : event == .lateTick ? deadline + 1 : grace + 1
                        let action = node.state.tick(at: node.now, deadline: deadline, grace: grace)
                        switch action {
                        case .nothing:
                            XCTAssertTrue(!inCall || abandoned || node.state.stop == nil)
                        case .interrupt(let thread):
                            XCTAssertEqual(thread, 7)
                            XCTAssertTrue(inCall && !abandoned && node.state.stop != nil)
                            node.interrupted = true
                        case .abandon(let stop):
                            XCTAssertTrue(wasInterrupted, "abandoned without an interrupt first")
                            XCTAssertEqual(event, .graceTick, "abandoned before the grace period")
                            XCTAssertEqual(stop, node.state.stop)
                            XCTAssertTrue(node.state.abandoned)
                            abandons += 1
                        }
                        if stopped == nil && node.state.stop == .stalled {
                            XCTAssertGreaterThan(node.now - (since ?? node.now), deadline, "stalled before the deadline")
                            stalls += 1
                        }
                        if let since, stopped == nil, !abandoned, node.now - since > deadline {
                            XCTAssertEqual(node.state.stop, .stalled, "a call past its deadline not stopped")
                        }
                        if wasInterrupted && event == .graceTick && inCall && !abandoned, case .interrupt = action {
                            XCTFail("a call interrupted and outlived by the grace period was not abandoned")
                        }
                    }
                    if abandoned { XCTAssertTrue(node.state.abandoned, "abandoned is for good") }
                    if stopped != nil { XCTAssertEqual(node.state.stop, stopped, "a stop is never lost or changed") }
                    explored += 1
                    next.append(node)
                }
            }
            frontier = next
        }
        XCTAssertGreaterThan(explored, 100_000)
        XCTAssertGreaterThan(abandons, 0)
        XCTAssertGreaterThan(stalls, 0)
    }

    // MARK: - Helpers

}

/// Calls `body` with `bytes` as a NUL-terminated C string.
private func call<Result>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> Result) -> Result {
    (bytes.last == 0 ? bytes : bytes + [0]).withUnsafeBufferPointer { buffer in
        buffer.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
    }
}

/// Removes a tree of any depth, relative to directory descriptors (FileManager cannot past PATH_MAX).
private func removeTree(_ bytes: [UInt8]) {
    let parent = call(Array(bytes[..<(bytes.lastIndex(of: UInt8(ascii: "/")) ?? 0)])) { open($0, O_RDONLY | O_DIRECTORY) }
    guard parent >= 0 else { return }
    defer { close(parent) }
    let name = Array(bytes[((bytes.lastIndex(of: UInt8(ascii: "/")) ?? -1) + 1)...])
    removeEntry(name, in: parent)
}

private func removeEntry(_ name: [UInt8], in parent: Int32) {
    var status = stat()
    guard call(name, { fstatat(parent, $0, &status, AT_SYMLINK_NOFOLLOW) }) == 0 else { return }
    guard status.st_mode & S_IFMT == S_IFDIR else {
        _ = call(name) { unlinkat(parent, $0, 0) }
        return
    }
    _ = call(name) { fchmodat(parent, $0, 0o755, 0) }
    let directory = call(name) { openat(parent, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) }
    guard directory >= 0, let stream = fdopendir(directory) else { return }
    var names: [[UInt8]] = []
    while let entry = readdir(stream) {
        let entryName = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
        if entryName != [0x2E] && entryName != [0x2E, 0x2E] { names.append(entryName) }
    }
    for entryName in names { removeEntry(entryName, in: dirfd(stream)) }
    closedir(stream)
    _ = call(name) { unlinkat(parent, $0, AT_REMOVEDIR) }
}

/// Writes `content` to a new file at `path`.
private func writeFile(_ path: [UInt8], _ content: String) {
    let descriptor = call(path) { open($0, O_WRONLY | O_CREAT | O_TRUNC, 0o644) }
    XCTAssertGreaterThanOrEqual(descriptor, 0, escapedForDisplay(path))
    XCTAssertEqual(write(descriptor, content, content.utf8.count), content.utf8.count)
    close(descriptor)
}

extension ManifestEntry.Status {
    fileprivate var isChecksum: Bool {
        if case .checksum = self { return true }
        return false
    }
}
