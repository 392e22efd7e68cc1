import Baton
import Foundation

/// What the audit has counted so far, safe from any thread.
final class Ledger: Sendable {
    /// The counts, without the entries (cheap to take while the audit runs).
    struct Counts: Sendable {
        var directories = 0
        var filesFound = 0
        var bytesFound = 0
        var filesRead = 0
        var bytesRead = 0
        var links = 0
        var special = 0
        var unreadable = 0
        var changed = 0
        var skipped = 0
    }

    /// An entry that was not checksummed, and why.
    struct Problem: Sendable {
        let entry: ManifestEntry
        let reason: String
    }

    /// What the ledger holds, behind its one lock.
    private struct Books {
        var counts = Counts()
        var entries: [ManifestEntry] = []
        var problems: [Problem] = []
    }

    private let books = Mutex(Books())

    func listed(files: [FoundFile], links: Int, special: Int) {
        let bytes = files.reduce(0) { $0 + $1.size }
        books.withLock {
            $0.counts.directories += 1
            $0.counts.filesFound += files.count
            $0.counts.bytesFound += bytes
            $0.counts.links += links
            $0.counts.special += special
        }
    }

    /// Records an entry: checksummed, or not (with the reason).
    func record(_ entry: ManifestEntry, _ problem: String? = nil) {
        books.withLock {
            $0.entries.append(entry)
            switch entry.status {
            case .checksum:
                $0.counts.filesRead += 1
                $0.counts.bytesRead += entry.size
            case .unreadable: $0.counts.unreadable += 1
            case .changed: $0.counts.changed += 1
            case .skipped: $0.counts.skipped += 1
            }
            if let problem { $0.problems.append(Problem(entry: entry, reason: problem)) }
        }
    }

    var snapshot: Counts { books.withLock { $0.counts } }

    /// Every entry, sorted by path: the manifest's lines.
    var sortedEntries: [ManifestEntry] { books.withLock { $0.entries }.sorted(by: ManifestEntry.byPath) }

    /// Every entry that was not checksummed, sorted by path.
    var sortedProblems: [Problem] { books.withLock { $0.problems }.sorted { ManifestEntry.byPath($0.entry, $1.entry) } }
}

/// Walks a directory tree with a `TreeOperation`: one node lists the root, a recursive node lists every
/// subdirectory, and under each listing one operation per file reads and checksums it. The tree runs
/// `concurrency` operations at a time; each file's outcome is recorded by the node's `onFinish`
/// callback, after which the tree lets go of it, so memory stays bounded by what is in flight.
struct DirectoryAudit: Sendable {
    /// The directory as given, as bytes (paths in the manifest are relative to it).
    let root: [UInt8]
    let concurrency: Int
    let ledger = Ledger()
    /// Watches the file reads in progress: a read(2) that blocks longer than its deadline is stopped.
    let watch: ReadWatch
    let seams: AuditSeams

    init(root: String, concurrency: Int, readDeadline: Double = 30, readGrace: Double = 1, seams: AuditSeams = AuditSeams()) {
        self.init(
            root: Array(root.utf8), concurrency: concurrency, readDeadline: readDeadline, readGrace: readGrace, seams: seams)
    }

    /// `readGrace`: how long a call told to stop may take to return before it is abandoned.
    init(root: [UInt8], concurrency: Int, readDeadline: Double = 30, readGrace: Double = 1, seams: AuditSeams = AuditSeams()) {
        self.root = root
        self.concurrency = concurrency
        self.watch = ReadWatch(deadline: readDeadline, grace: readGrace)
        self.seams = seams
    }

    /// Builds the operation tree.
    func makeTree() -> TreeOperation<FoundDirectory> {
        // Paths are cut below the root by bytes (a name may start with a combining mark, or not be UTF-8).
        let rootLength = root.count + (root.last == UInt8(ascii: "/") ? 0 : 1)
        let context = AuditContext(rootLength: rootLength, ledger: ledger, watch: watch, seams: seams)
        let ledger = ledger
        let top = TreeNode<FoundDirectory, Listing>("directory") { ListDirectory($0, context: context) }
        let subdirectories = TreeNode<Listing, Listing>("directory", items: { $0.subdirectories }) {
            ListDirectory($0, context: context)
        }
        let files = TreeNode<Listing, FileAudit>("file", items: { $0.files }) { ChecksumFile($0, context: context) }
        files.onFinish { outcome in
            if case .succeeded(let audit) = outcome { ledger.record(audit.entry, audit.problem) }
        }
        top.addChild(subdirectories)
        top.addChild(files)
        subdirectories.addChild(subdirectories)
        subdirectories.addChild(files)
        return TreeOperation(
            root: top, input: FoundDirectory(path: RawPath(bytes: root), identity: nil), maxConcurrentOperationCount: concurrency)
    }

    /// The manifest's bytes (see `ManifestEntry` for the format).
    func manifest() -> [UInt8] {
        var bytes: [UInt8] = []
        _ = Manifest.write(ledger.sortedEntries) { bytes += $0 }
        return bytes
    }

    /// One checksum for the whole tree: the XXH64 of its manifest, so it covers every path, size and
    /// file checksum, and two runs over an unchanged tree print the same one.
    func treeChecksum() -> UInt64 {
        Manifest.write(ledger.sortedEntries) { _ in }
    }
}

/// Sixteen lower-case hex digits.
func hex(_ value: UInt64) -> String {
    let digits = String(value, radix: 16)
    return String(repeating: "0", count: 16 - digits.count) + digits
}
