import Baton
import Foundation

/// A path as the file system has it: bytes, not necessarily UTF-8. System calls get the bytes; only
/// what is printed is decoded.
struct RawPath: Sendable {
    /// The path's bytes followed by a NUL, ready for system calls.
    private let terminated: [UInt8]

    init(_ string: String) { terminated = Array(string.utf8) + [0] }
    private init(terminated: [UInt8]) { self.terminated = terminated }

    /// The path's bytes, without the NUL.
    var bytes: ArraySlice<UInt8> { terminated.dropLast() }

    /// The path for display (bytes that are not UTF-8 shown as U+FFFD).
    var display: String { String(decoding: bytes, as: UTF8.self) }

    /// The path of `name` inside this directory.
    func appending(_ name: UnsafeRawBufferPointer) -> RawPath {
        var joined = [UInt8]()
        joined.reserveCapacity(terminated.count + name.count + 1)
        joined.append(contentsOf: bytes)
        if joined.last != UInt8(ascii: "/") { joined.append(UInt8(ascii: "/")) }
        joined.append(contentsOf: name)
        joined.append(0)
        return RawPath(terminated: joined)
    }

    /// The part below a root whose path is `rootLength` bytes long (its trailing `/` included), for
    /// display: `.` for the root itself.
    func relative(droppingFirst rootLength: Int) -> String {
        let bytes = self.bytes
        return bytes.count > rootLength ? String(decoding: bytes.dropFirst(rootLength), as: UTF8.self) : "."
    }

    /// Calls `body` with the path as a NUL-terminated C string.
    func withCString<Result>(_ body: (UnsafePointer<CChar>) -> Result) -> Result {
        terminated.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
        }
    }
}

/// What one directory holds: the files to read and the directories to walk next.
struct Listing: Sendable {
    let directory: RawPath
    let files: [FoundFile]
    let subdirectories: [RawPath]
}

/// A regular file found by a listing, with the size it had then.
struct FoundFile: Sendable {
    let path: RawPath
    let size: Int
}

/// What the audit records for one file read to the end.
struct FileRecord: Sendable {
    /// The path below the audited directory.
    let path: String
    let bytes: Int
    let checksum: UInt64
}

/// What became of one file.
enum FileAudit: Sendable {
    case checksummed(FileRecord)
    case unreadable(path: String, size: Int, reason: String)
}

/// Lists one directory with `lstat`: regular files, subdirectories, and the symbolic links and special
/// files it skips (counted in the ledger). Hidden entries are left out.
final class ListDirectory: ResultOperation<Listing>, @unchecked Sendable {
    let directory: RawPath
    let rootLength: Int
    let ledger: Ledger

    init(_ directory: RawPath, rootLength: Int, ledger: Ledger) {
        self.directory = directory
        self.rootLength = rootLength
        self.ledger = ledger
        super.init()
        name = "list \(directory.display)"
    }

    override func execute() {
        guard let stream = directory.withCString({ opendir($0) }) else {
            let reason = String(cString: strerror(errno))
            ledger.unreadableDirectory(directory.relative(droppingFirst: rootLength), reason: reason)
            return finish(with: Listing(directory: directory, files: [], subdirectories: []))
        }
        defer { closedir(stream) }
        var files = [FoundFile]()
        var subdirectories = [RawPath]()
        var links = 0
        var special = 0
        while let entry = readdir(stream) {
            let path: RawPath? = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                let name = UnsafeRawBufferPointer(rebasing: raw.prefix { $0 != 0 })
                // ".", "..", and hidden entries are left out.
                return name.first == UInt8(ascii: ".") ? nil : directory.appending(name)
            }
            guard let path else { continue }
            var status = stat()
            guard path.withCString({ lstat($0, &status) }) == 0 else {
                files.append(FoundFile(path: path, size: 0))   // reported as unreadable when read
                continue
            }
            switch status.st_mode & S_IFMT {
            case S_IFREG: files.append(FoundFile(path: path, size: Int(status.st_size)))
            case S_IFDIR: subdirectories.append(path)
            case S_IFLNK: links += 1
            default: special += 1
            }
        }
        ledger.listed(files: files, links: links, special: special)
        finish(with: Listing(directory: directory, files: files, subdirectories: subdirectories))
    }
}

/// Reads a file in chunks of at most 1 MiB and checksums it (XXH64) as it goes, so memory stays
/// bounded whatever the file's size; stops between chunks when cancelled.
final class ChecksumFile: ResultOperation<FileAudit>, @unchecked Sendable {
    static let chunkSize = 1 << 20

    let file: FoundFile
    let relativePath: String
    /// Runs just before the file is opened (tests use it to make a file vanish).
    let beforeRead: (@Sendable (ChecksumFile) -> Void)?

    init(_ file: FoundFile, relativePath: String, beforeRead: (@Sendable (ChecksumFile) -> Void)?) {
        self.file = file
        self.relativePath = relativePath
        self.beforeRead = beforeRead
        super.init()
        name = "read \(relativePath)"
    }

    override func execute() {
        beforeRead?(self)
        let descriptor = file.path.withCString { open($0, O_RDONLY | O_NOFOLLOW) }
        guard descriptor >= 0 else { return unreadable(errno) }
        defer { close(descriptor) }
        // A buffer as large as the file (a multiple of 32 bytes, as XXH64 needs), up to a chunk.
        let capacity = min(Self.chunkSize, max(64, (file.size + 32) / 32 * 32))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
        defer { buffer.deallocate() }
        var hash = XXH64()
        var total = 0
        while true {
            if isCancelled { return finish() }
            var filled = 0
            while filled < capacity {
                let count = read(descriptor, buffer.baseAddress! + filled, capacity - filled)
                if count < 0 {
                    if errno == EINTR { continue }
                    return unreadable(errno)
                }
                if count == 0 { break }
                filled += count
            }
            hash.update(UnsafeRawBufferPointer(rebasing: buffer[..<filled]))
            total += filled
            if filled < capacity { break }
        }
        if isCancelled { return finish() }
        finish(with: .checksummed(FileRecord(path: relativePath, bytes: total, checksum: hash.digest)))
    }

    private func unreadable(_ code: Int32) {
        finish(with: .unreadable(path: relativePath, size: file.size, reason: String(cString: strerror(code))))
    }
}
