import Baton
import Foundation

/// What one directory holds: the files to read and the directories to walk next.
struct Listing: Sendable {
    let directory: RawPath
    let files: [FoundFile]
    let subdirectories: [FoundDirectory]

    static func empty(_ directory: RawPath) -> Listing { Listing(directory: directory, files: [], subdirectories: []) }
}

/// A regular file found by a listing: the size it had then, which file it was and which version of
/// it, and whether it is a mount point (a file bind-mounted from elsewhere, maybe from procfs).
struct FoundFile: Sendable {
    let path: RawPath
    let size: Int
    let identity: FileIdentity
    let version: FileVersion
    let isMountPoint: Bool
}

/// A directory to list: which directory a listing saw there (nil for the audited directory itself,
/// which may be reached through symbolic links).
struct FoundDirectory: Sendable {
    let path: RawPath
    let identity: FileIdentity?
}

/// What every operation of one audit shares (one reference per operation, not four).
final class AuditContext: Sendable {
    /// The length of the audited directory's path, its trailing `/` included: paths are cut there.
    let rootLength: Int
    let ledger: Ledger
    let watch: ReadWatch
    let seams: AuditSeams

    init(rootLength: Int, ledger: Ledger, watch: ReadWatch, seams: AuditSeams) {
        self.rootLength = rootLength
        self.ledger = ledger
        self.watch = watch
        self.seams = seams
    }
}

/// Test seams: code that runs at the moments a hostile tree changes under the audit.
struct AuditSeams: Sendable {
    /// Just before a directory is opened to be listed.
    var beforeList: (@Sendable (ListDirectory) -> Void)?
    /// Just before a file is opened.
    var beforeOpen: (@Sendable (ChecksumFile) -> Void)?
    /// Just after a file was opened and found to be the file that was listed, with its descriptor.
    var afterOpen: (@Sendable (ChecksumFile, Int32) -> Void)?
    /// Reads in place of read(2) (a test makes a read that ignores signals, as a stalled FUSE does).
    var read: (@Sendable (Int32, UnsafeMutableRawPointer, Int) -> Int)?

    init(
        beforeList: (@Sendable (ListDirectory) -> Void)? = nil, beforeOpen: (@Sendable (ChecksumFile) -> Void)? = nil,
        afterOpen: (@Sendable (ChecksumFile, Int32) -> Void)? = nil,
        read: (@Sendable (Int32, UnsafeMutableRawPointer, Int) -> Int)? = nil
    ) {
        self.beforeList = beforeList
        self.beforeOpen = beforeOpen
        self.afterOpen = afterOpen
        self.read = read
    }
}

/// Lists one directory: regular files, subdirectories, and the symbolic links and special files it
/// skips (counted in the ledger). Hidden entries are left out. The directory is opened without
/// following a symbolic link and without blocking, and must still be the directory its parent listed;
/// a directory on a pseudo-file system is skipped (`PseudoFileSystem`). Entries are examined relative
/// to the open directory (`fstatat`), so depth never matters.
final class ListDirectory: ResultOperation<Listing>, @unchecked Sendable {
    let directory: FoundDirectory
    let context: AuditContext

    init(_ directory: FoundDirectory, context: AuditContext) {
        self.directory = directory
        self.context = context
        super.init()
        name = "list \(directory.path.display)"
    }

    override func execute() {
        context.seams.beforeList?(self)
        if isCancelled { return finish(with: .empty(directory.path)) }
        // Every call that can block (an automount, a stalled mount) is watched: a cancel or the
        // deadline interrupts it, and one that ignores the interrupt is abandoned.
        context.watch.watching(for: self, abandon: { [self] stop in finishAbandoned(stop) }) { reader in list(with: reader) }
    }

    /// What listing the open directory came to.
    private enum Result {
        case listed(Listing, links: Int, special: Int, problems: [Ledger.Problem], error: Int32)
        case notListed(ManifestEntry.Status, String)
    }

    private func list(with reader: FileReader) {
        let path = directory.path
        let follow = directory.identity == nil ? 0 : O_NOFOLLOW
        var descriptor: Int32 = -1
        switch reader.call({
            descriptor = path.open(O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC | follow)
            return Int(descriptor)
        }) {
        case .value: break
        case .failed(let failure) where failure == ELOOP || failure == ENOTDIR:
            return skip(.changed, "replaced while auditing")
        case .failed(let failure): return skip(.unreadable, String(cString: strerror(failure)))
        case .stopped(let stop): return finishStopped(stop, "opening it")
        case .abandoned:
            // The open may have succeeded as the watch gave up on it.
            if descriptor >= 0 { close(descriptor) }
            return
        }
        switch reader.span({ list(descriptor, reader) }) {
        case .finished(_, stop: let stop?), .refused(let stop): finishStopped(stop, "listing it")
        case .finished(.notListed(let status, let reason), stop: nil): skip(status, reason)
        case .finished(.listed(let listing, let links, let special, let problems, let error), stop: nil):
            let rootLength = context.rootLength
            for problem in problems { context.ledger.record(problem.entry, problem.reason) }
            if error != 0 {
                let entry = ManifestEntry(pathBytes: path.relative(droppingFirst: rootLength), status: .unreadable, size: 0)
                context.ledger.record(entry, "listing stopped: " + String(cString: strerror(error)))
            }
            context.ledger.listed(files: listing.files, links: links, special: special)
            finish(with: listing)
        case .abandoned: return
        }
    }

    /// Lists the open directory (and closes it).
    private func list(_ descriptor: Int32, _ reader: FileReader) -> Result {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            defer { close(descriptor) }
            return .notListed(.unreadable, String(cString: strerror(errno)))
        }
        if let expected = directory.identity, FileIdentity(status) != expected {
            close(descriptor)
            return .notListed(.changed, "replaced while auditing")
        }
        if let fileSystem = PseudoFileSystem.name(of: descriptor) {
            close(descriptor)
            return .notListed(.skipped, "on \(fileSystem), a pseudo-file system (its files are not read)")
        }
        guard let stream = fdopendir(descriptor) else {
            defer { close(descriptor) }
            return .notListed(.unreadable, String(cString: strerror(errno)))
        }
        defer { closedir(stream) }
        let (path, rootLength, device) = (directory.path, context.rootLength, status.st_dev)
        let listed = dirfd(stream)
        var files = [FoundFile]()
        var subdirectories = [FoundDirectory]()
        var problems = [Ledger.Problem]()
        var links = 0
        var special = 0
        var count = 0
        while true {
            errno = 0
            guard let entry = readdir(stream) else { break }
            count += 1
            if count % 64 == 0 { reader.progress() }
            withUnsafeBytes(of: entry.pointee.d_name) { raw in
                let name = UnsafeRawBufferPointer(rebasing: raw.prefix { $0 != 0 })
                // ".", "..", and hidden entries are left out.
                guard name.first != UInt8(ascii: ".") else { return }
                let entryPath = path.appending(name)
                var status = stat()
                guard fstatat(listed, raw.baseAddress!.assumingMemoryBound(to: CChar.self), &status, AT_SYMLINK_NOFOLLOW) == 0
                else {
                    let entry = ManifestEntry(
                        pathBytes: entryPath.relative(droppingFirst: rootLength), status: .unreadable, size: 0)
                    problems.append(Ledger.Problem(entry: entry, reason: String(cString: strerror(errno))))
                    return
                }
                switch status.st_mode & S_IFMT {
                case S_IFREG:
                    files.append(
                        FoundFile(
                            path: entryPath, size: Int(status.st_size), identity: FileIdentity(status),
                            version: FileVersion(status),
                            isMountPoint: status.st_dev != device))
                case S_IFDIR: subdirectories.append(FoundDirectory(path: entryPath, identity: FileIdentity(status)))
                case S_IFLNK: links += 1
                default: special += 1
                }
            }
        }
        let listing = Listing(directory: path, files: files, subdirectories: subdirectories)
        return .listed(listing, links: links, special: special, problems: problems, error: errno)
    }

    /// Calls had to stop: cancelled, the operation finishes cancelled; stalled, the directory is
    /// reported.
    private func finishStopped(_ stop: ReadState<pthread_t>.Stop, _ what: String) {
        switch stop {
        case .cancelled: finish(with: .empty(directory.path))
        case .stalled: skip(.unreadable, "\(what) blocked for more than \(context.watch.deadline) s")
        }
    }

    /// The watch gave up on a call that ignored its interrupt (run on the watch's thread, once).
    private func finishAbandoned(_ stop: ReadState<pthread_t>.Stop) {
        finishStopped(stop, "a call listing it")
    }

    /// Reports the directory as not listed and finishes with nothing in it.
    private func skip(_ status: ManifestEntry.Status, _ reason: String) {
        let path = directory.path.relative(droppingFirst: context.rootLength)
        context.ledger.record(ManifestEntry(pathBytes: path, status: status, size: 0), reason)
        finish(with: .empty(directory.path))
    }
}

/// Reads a file in chunks of at most 1 MiB and checksums it (XXH64) as it goes, so memory stays
/// bounded whatever the file's size.
///
/// Nothing can make it block or read what it must not: the file is opened without blocking and
/// without following a symbolic link, and must still be the regular file that was listed (same
/// device and inode), or it is reported as changed and not read. It reads at most the size the file
/// had when opened and one chunk more: a file that grows (or shrinks) meanwhile is reported as
/// changed, so a file someone keeps writing cannot keep it reading. Each read(2) can be interrupted
/// (`FileReader`): a cancel stops it within the watch's tick, and one that blocks past the watch's
/// deadline is reported as stalled.
final class ChecksumFile: ResultOperation<FileAudit>, @unchecked Sendable {
    static let chunkSize = 1 << 20

    let file: FoundFile
    let context: AuditContext

    /// The path below the audited directory (a slice of the file's path).
    var relativePath: ArraySlice<UInt8> { file.path.relative(droppingFirst: context.rootLength) }

    init(_ file: FoundFile, context: AuditContext) {
        self.file = file
        self.context = context
        super.init()
        name = "read \(escapedForDisplay(relativePath))"
    }

    override func execute() {
        context.seams.beforeOpen?(self)
        if isCancelled { return finish() }
        // The reader exists only while the file is audited: a tree of a million files holds a million
        // of these operations.
        context.watch.watching(for: self, abandon: { [self] stop in finishAbandoned(stop) }) { reader in audit(with: reader) }
    }

    private func audit(with reader: FileReader) {
        // Opening and examining can block too (a stalled mount): one watched call. A descriptor it
        // opened is closed whatever the call came to (an abandoned call may still have opened one).
        var descriptor: Int32 = -1
        var status = stat()
        defer { if descriptor >= 0 { close(descriptor) } }
        let opened = reader.call {
            if descriptor < 0 { descriptor = file.path.open(O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY) }
            return descriptor < 0 ? -1 : Int(fstat(descriptor, &status))
        }
        switch opened {
        case .value: break
        case .failed(ELOOP): return report(.changed, "replaced by a symbolic link while auditing")
        case .failed(ENOENT): return report(.changed, "removed while auditing")
        case .failed(let failure): return unreadable(failure)
        case .stopped(let stop): return finishStopped(stop, "opening it")
        case .abandoned: return
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            return report(.changed, "replaced by \(kind(of: status)) while auditing")
        }
        guard FileIdentity(status) == file.identity else { return report(.changed, "replaced by another file while auditing") }
        guard FileVersion(status) == file.version && Int(status.st_size) == file.size else {
            return report(.changed, "modified while auditing")
        }
        // A file bind-mounted from a pseudo-file system (a container's view of procfs): not read.
        if file.isMountPoint, let fileSystem = PseudoFileSystem.name(of: descriptor) {
            return report(.skipped, "on \(fileSystem), a pseudo-file system (its files are not read)")
        }
        context.seams.afterOpen?(self, descriptor)
        read(descriptor, size: Int(status.st_size), with: reader)
    }

    /// Calls had to stop: cancelled, the operation finishes cancelled; stalled, the file is reported.
    private func finishStopped(_ stop: ReadState<pthread_t>.Stop, _ what: String) {
        switch stop {
        case .cancelled: finish()
        case .stalled: report(.unreadable, "\(what) blocked for more than \(context.watch.deadline) s")
        }
    }

    /// The watch gave up on a call that ignored its interrupt (run on the watch's thread, once).
    private func finishAbandoned(_ stop: ReadState<pthread_t>.Stop) {
        finishStopped(stop, "a call reading it")
    }

    /// Reads the file to its end, which must come at `size` bytes.
    ///
    /// A short read that reaches `size` is the end (on a regular file, a read returns fewer bytes
    /// than asked only at the end): the usual read that returns 0 to show it is not needed, which
    /// makes up for the `fstat` of the open. The descriptor keeps `O_NONBLOCK`, which regular files
    /// on local file systems ignore; a file system that honours it (a read fails with `EAGAIN`) gets
    /// it cleared and the read again, so tiny files pay no `fcntl`.
    private func read(_ descriptor: Int32, size: Int, with reader: FileReader) {
        // A buffer larger than the file (a multiple of 32 bytes, as XXH64 needs), up to a chunk.
        let capacity = min(Self.chunkSize, max(64, (size + 32) / 32 * 32))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
        defer { buffer.deallocate() }
        var hash = XXH64()
        var total = 0
        var ended = false
        while !ended {
            if isCancelled { return finish() }
            var filled = 0
            while filled < capacity && !ended {
                let wanted = capacity - filled
                let (read, target) = (context.seams.read ?? systemRead, buffer.baseAddress! + filled)
                switch reader.call({ read(descriptor, target, wanted) }) {
                case .value(let count):
                    filled += count
                    ended = count == 0 || (count < wanted && total + filled == size)
                case .failed(let failure) where failure == EAGAIN || failure == EWOULDBLOCK:
                    guard fcntl(descriptor, F_SETFL, 0) == 0 else { return unreadable(errno) }
                case .failed(let failure): return unreadable(failure)
                case .stopped(let stop): return finishStopped(stop, "a read")
                case .abandoned: return
                }
            }
            total += filled
            if total > size { return report(.changed, "grew while being read") }
            hash.update(UnsafeRawBufferPointer(rebasing: buffer[..<filled]))
        }
        if total < size { return report(.changed, "shrank while being read") }
        finish(
            with: FileAudit(
                entry: ManifestEntry(pathBytes: relativePath, status: .checksum(hash.digest), size: total), problem: nil))
    }

    private func unreadable(_ code: Int32) {
        report(.unreadable, String(cString: strerror(code)))
    }

    private func report(_ status: ManifestEntry.Status, _ reason: String) {
        finish(with: FileAudit(entry: ManifestEntry(pathBytes: relativePath, status: status, size: file.size), problem: reason))
    }
}

/// What became of one file: its manifest entry and, if it was not checksummed, why.
struct FileAudit: Sendable {
    let entry: ManifestEntry
    let problem: String?
}

/// What a file's status says it is, in words.
func kind(of status: stat) -> String {
    switch status.st_mode & S_IFMT {
    case S_IFIFO: "a FIFO"
    case S_IFCHR: "a character device"
    case S_IFBLK: "a block device"
    case S_IFSOCK: "a socket"
    case S_IFDIR: "a directory"
    case S_IFLNK: "a symbolic link"
    default: "a special file"
    }
}
