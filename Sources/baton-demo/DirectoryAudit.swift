import Baton
import Foundation

/// The counts the audit keeps while it runs, safe from any thread.
final class Ledger: @unchecked Sendable {
    private let lock = NSLock()
    private var records: [FileRecord] = []
    private var failures: [String] = []
    private var found = 0
    private var directories = 0

    func add(_ record: FileRecord) { lock.withLock { records.append(record) } }
    func fail(_ message: String) { lock.withLock { failures.append(message) } }
    func discovered(files: Int) { lock.withLock { found += files; directories += 1 } }

    /// A consistent copy of the counts.
    var snapshot: (records: [FileRecord], failures: [String], found: Int, directories: Int) {
        lock.withLock { (records, failures, found, directories) }
    }
}

/// Walks a directory tree with a `TreeOperation`; for each directory, a group of bounded
/// concurrency runs one chain per file: read → checksum → record.
struct DirectoryAudit {
    let root: URL
    let concurrency: Int
    let ledger = Ledger()

    /// Builds the operation tree. Its root lists `root`; a recursive node lists every subdirectory;
    /// under each listing, a group checksums the files.
    func makeTree() -> TreeOperation<URL> {
        let top = TreeNode<URL, Listing>("directory") { ListDirectory($0) }
        let subdirectories = TreeNode<Listing, Listing>("directory", items: { $0.subdirectories }) { ListDirectory($0) }
        let files = TreeNode<Listing, Int>("files") { [ledger, concurrency] listing in
            ledger.discovered(files: listing.files.count)
            return FileGroup(listing: listing, concurrency: concurrency, ledger: ledger)
        }
        top.addChild(subdirectories)
        top.addChild(files)
        subdirectories.addChild(subdirectories)
        subdirectories.addChild(files)
        // One directory's group at a time: the group's own limit is the audit's concurrency.
        return TreeOperation(root: top, input: root, maxConcurrentOperationCount: 1)
    }
}

/// Checksums the files of one directory, `concurrency` at a time; a file that fails is recorded in the
/// ledger and the others go on. Its output is the number of files recorded.
final class FileGroup: ResultOperation<Int>, @unchecked Sendable {
    private let group: GroupOperation
    private let ledger: Ledger

    init(listing: Listing, concurrency: Int, ledger: Ledger) {
        self.ledger = ledger
        let chains = listing.files.map { file in
            SequenceOperation<FileRecord>(operations: [ReadFile(file), Checksum(), Record(file, in: ledger)])
        }
        group = GroupOperation(operations: chains, maxConcurrentOperationCount: concurrency)
        super.init()
        name = "files of \(listing.directory.lastPathComponent)"
    }

    override func execute() {
        group.onFinish { [self, ledger] _ in
            for error in group.errors { ledger.fail("\(error)") }
            let recorded = group.children.filter { ($0 as? SequenceOperation<FileRecord>)?.output != nil }.count
            if isCancelled { finish() } else { finish(with: recorded) }
        }
        group.start()
    }

    override func didCancel() {
        group.cancel()
    }
}
