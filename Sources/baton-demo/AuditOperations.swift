import Baton
import Foundation

/// What one directory holds: the files to audit and the directories to walk next.
struct Listing: Sendable {
    let directory: URL
    let files: [URL]
    let subdirectories: [URL]
}

/// What the audit records for one file.
struct FileRecord: Sendable {
    let path: String
    let bytes: Int
    let checksum: UInt64
}

/// Lists one directory (hidden entries and `.build` folders left out).
final class ListDirectory: ResultOperation<Listing>, @unchecked Sendable {
    let directory: URL

    init(_ directory: URL) {
        self.directory = directory
        super.init()
        name = "list \(directory.path)"
    }

    override func execute() {
        do {
            let entries = try FileManager.default.contentsOfDirectory(
                at: directory, includingPropertiesForKeys: [.isDirectoryKey, .isSymbolicLinkKey], options: [.skipsHiddenFiles])
            var files = [URL]()
            var subdirectories = [URL]()
            for entry in entries.sorted(by: { $0.path < $1.path }) {
                let values = try? entry.resourceValues(forKeys: [.isDirectoryKey, .isSymbolicLinkKey])
                if values?.isSymbolicLink == true,
                   (try? entry.resolvingSymlinksInPath().resourceValues(forKeys: [.isDirectoryKey]))?.isDirectory == true {
                    continue   // a link to a directory: not followed, so that the walk cannot loop
                }
                if values?.isDirectory == true {
                    if !entry.lastPathComponent.hasPrefix(".build") { subdirectories.append(entry) }
                } else {
                    files.append(entry)
                }
            }
            finish(with: Listing(directory: directory, files: files, subdirectories: subdirectories))
        } catch {
            finish(throwing: error)
        }
    }
}

/// Reads a file.
final class ReadFile: ResultOperation<Data>, @unchecked Sendable {
    let file: URL

    init(_ file: URL) {
        self.file = file
        super.init()
        name = "read \(file.lastPathComponent)"
    }

    override func execute() {
        do {
            let data = try Data(contentsOf: file)
            if isCancelled { finish() } else { finish(with: data) }
        } catch {
            finish(throwing: AuditError.unreadable(path: file.path, reason: (error as NSError).localizedDescription))
        }
    }
}

/// Checksums its input with 64-bit FNV-1a, stopping early when cancelled.
final class Checksum: TransformOperation<Data, (bytes: Int, checksum: UInt64)>, @unchecked Sendable {
    override func execute() {
        guard let data = input else { return finish(throwing: BatonError.missingInput(operation: OperationReference(self))) }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for (index, byte) in data.enumerated() {
            if index % 65_536 == 0 && isCancelled { return finish() }
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        finish(with: (data.count, hash))
    }
}

/// Records a file's checksum in the ledger and passes the record on.
final class Record: TransformOperation<(bytes: Int, checksum: UInt64), FileRecord>, @unchecked Sendable {
    let file: URL
    let ledger: Ledger

    init(_ file: URL, in ledger: Ledger) {
        self.file = file
        self.ledger = ledger
        super.init()
    }

    override func execute() {
        guard let (bytes, checksum) = input else { return finish(throwing: BatonError.missingInput(operation: OperationReference(self))) }
        let record = FileRecord(path: file.path, bytes: bytes, checksum: checksum)
        ledger.add(record)
        finish(with: record)
    }
}

/// Why a file could not be audited.
enum AuditError: Error, CustomStringConvertible {
    case unreadable(path: String, reason: String)

    var description: String {
        switch self {
        case .unreadable(let path, let reason): return "\(path): \(reason)"
        }
    }
}
