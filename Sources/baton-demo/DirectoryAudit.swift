import Baton
import Foundation

/// What the audit has counted so far, safe from any thread.
final class Ledger: @unchecked Sendable {
    /// The counts, without the records (cheap to take while the audit runs).
    struct Counts: Sendable {
        var directories = 0
        var filesFound = 0
        var bytesFound = 0
        var filesRead = 0
        var bytesRead = 0
        var links = 0
        var special = 0
        var unreadable = 0
    }

    private let lock = NSLock()
    private var counts = Counts()
    private var records: [FileRecord] = []
    private var problems: [(path: String, size: Int, reason: String)] = []

    func listed(files: [FoundFile], links: Int, special: Int) {
        lock.withLock {
            counts.directories += 1
            counts.filesFound += files.count
            counts.bytesFound += files.reduce(0) { $0 + $1.size }
            counts.links += links
            counts.special += special
        }
    }

    func unreadableDirectory(_ path: String, reason: String) {
        lock.withLock {
            counts.unreadable += 1
            problems.append((path, 0, reason))
        }
    }

    func record(_ audit: FileAudit) {
        lock.withLock {
            switch audit {
            case .checksummed(let record):
                counts.filesRead += 1
                counts.bytesRead += record.bytes
                records.append(record)
            case .unreadable(let path, let size, let reason):
                counts.unreadable += 1
                problems.append((path, size, reason))
            }
        }
    }

    var snapshot: Counts { lock.withLock { counts } }

    /// Every file read, sorted by path.
    var sortedRecords: [FileRecord] { lock.withLock { records }.sorted { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) } }

    /// Every file or directory that could not be read, sorted by path.
    var sortedProblems: [(path: String, size: Int, reason: String)] {
        lock.withLock { problems }.sorted { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }
    }
}

/// Walks a directory tree with a `TreeOperation`: one node lists the root, a recursive node lists every
/// subdirectory, and under each listing one operation per file reads and checksums it. The tree runs
/// `concurrency` operations at a time; each file's outcome is recorded by the node's `onFinish`
/// callback, after which the tree lets go of it, so memory stays bounded by what is in flight.
struct DirectoryAudit: Sendable {
    /// The directory as given (paths in records and the manifest are relative to it).
    let root: String
    let concurrency: Int
    let ledger = Ledger()
    /// Runs just before each file is opened (a test seam).
    var beforeRead: (@Sendable (ChecksumFile) -> Void)?

    init(root: String, concurrency: Int, beforeRead: (@Sendable (ChecksumFile) -> Void)? = nil) {
        self.root = root
        self.concurrency = concurrency
        self.beforeRead = beforeRead
    }

    /// Builds the operation tree.
    func makeTree() -> TreeOperation<RawPath> {
        let ledger = ledger
        let beforeRead = beforeRead
        // Paths are cut below the root by bytes (a name may start with a combining mark, or not be UTF-8).
        let rootLength = root.utf8.count + (root.hasSuffix("/") ? 0 : 1)
        let top = TreeNode<RawPath, Listing>("directory") { ListDirectory($0, rootLength: rootLength, ledger: ledger) }
        let subdirectories = TreeNode<Listing, Listing>("directory", items: { $0.subdirectories }) {
            ListDirectory($0, rootLength: rootLength, ledger: ledger)
        }
        let files = TreeNode<Listing, FileAudit>("file", items: { $0.files }) { file in
            ChecksumFile(file, relativePath: file.path.relative(droppingFirst: rootLength), beforeRead: beforeRead)
        }
        files.onFinish { outcome in
            if case .succeeded(let audit) = outcome { ledger.record(audit) }
        }
        top.addChild(subdirectories)
        top.addChild(files)
        subdirectories.addChild(subdirectories)
        subdirectories.addChild(files)
        return TreeOperation(root: top, input: RawPath(root), maxConcurrentOperationCount: concurrency)
    }

    /// One line per file, sorted by path: the checksum (16 hex digits, or `unreadable`), the size in
    /// bytes, and the path below the root.
    func manifest() -> String {
        var lines = ledger.sortedRecords.map { ManifestLine(path: $0.path, text: "\(hex($0.checksum)) \($0.bytes) \($0.path)") }
        lines += ledger.sortedProblems.map { ManifestLine(path: $0.path, text: "unreadable \($0.size) \($0.path)") }
        lines.sort { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }
        return lines.map { $0.text + "\n" }.joined()
    }

    /// One checksum for the whole tree: the files' checksums combined in path order.
    func treeChecksum() -> UInt64 {
        ledger.sortedRecords.reduce(UInt64(0)) { $0 &* 31 &+ $1.checksum }
    }
}

private struct ManifestLine {
    let path: String
    let text: String
}

/// Sixteen lower-case hex digits.
func hex(_ value: UInt64) -> String {
    let digits = String(value, radix: 16)
    return String(repeating: "0", count: 16 - digits.count) + digits
}
