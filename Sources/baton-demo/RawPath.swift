import Foundation

/// A path as the file system has it: bytes, not necessarily UTF-8. System calls get the bytes, the
/// audit sorts and checksums the bytes, and only what is printed is decoded (and escaped).
struct RawPath: Sendable, Hashable {
    /// The path's bytes followed by a NUL, ready for system calls.
    private let terminated: [UInt8]

    init(_ string: String) { terminated = Array(string.utf8) + [0] }
    init<Bytes: Collection<UInt8>>(bytes: Bytes) { terminated = Array(bytes) + [0] }
    private init(terminated: [UInt8]) { self.terminated = terminated }

    /// The path's bytes, without the NUL.
    var bytes: ArraySlice<UInt8> { terminated.dropLast() }

    /// The path for display: undecodable bytes and control characters escaped (see `escapedForDisplay`).
    var display: String { escapedForDisplay(bytes) }

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

    /// The bytes below a root whose path is `rootLength` bytes long (its trailing `/` included):
    /// `.` for the root itself. A slice of this path's bytes: nothing is copied.
    func relative(droppingFirst rootLength: Int) -> ArraySlice<UInt8> {
        let bytes = self.bytes
        return bytes.count > rootLength ? bytes.dropFirst(rootLength) : [UInt8(ascii: ".")]
    }

    /// Calls `body` with the path as a NUL-terminated C string.
    func withCString<Result>(_ body: (UnsafePointer<CChar>) -> Result) -> Result {
        terminated.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
        }
    }

    /// Opens the path with `open(2)`'s `flags`, however long it is: a path of `PATH_MAX` bytes or
    /// more is opened one piece at a time, each piece relative to a descriptor of the directory
    /// before it (`openat`), so depth never makes a file unreadable. Returns the descriptor, or -1
    /// with `errno` set.
    func open(_ flags: Int32, mode: mode_t = 0) -> Int32 {
        let limit = Int(PATH_MAX) - 1
        var start = terminated.startIndex
        var directory = AT_FDCWD
        defer { if directory != AT_FDCWD { close(directory) } }
        // Every name is at most NAME_MAX bytes, so a piece short enough always ends at a slash.
        while terminated.count - 1 - start > limit {
            guard let slash = terminated[start..<(start + limit)].lastIndex(of: UInt8(ascii: "/")), slash > start else {
                errno = ENAMETOOLONG
                return -1
            }
            let next = openPiece(directory, start, slash, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK)
            if directory != AT_FDCWD { close(directory) }
            directory = next
            guard next >= 0 else {
                directory = AT_FDCWD
                return -1
            }
            start = slash + 1
        }
        return openPiece(directory, start, terminated.count - 1, flags, mode)
    }

    /// `openat(directory, bytes[start..<end], flags)`, with the piece NUL-terminated.
    private func openPiece(_ directory: Int32, _ start: Int, _ end: Int, _ flags: Int32, _ mode: mode_t = 0) -> Int32 {
        if end == terminated.count - 1 {
            return terminated[start...].withUnsafeBufferPointer { piece in
                piece.withMemoryRebound(to: CChar.self) { openat(directory, $0.baseAddress!, flags, mode) }
            }
        }
        let piece = Array(terminated[start..<end]) + [0]
        return piece.withUnsafeBufferPointer { piece in
            piece.withMemoryRebound(to: CChar.self) { openat(directory, $0.baseAddress!, flags, mode) }
        }
    }
}

/// Which file an entry was when it was listed: an opened descriptor must still be that file.
struct FileIdentity: Sendable, Hashable {
    let device: UInt64
    let inode: UInt64

    init(_ status: stat) {
        device = UInt64(truncatingIfNeeded: status.st_dev)
        inode = UInt64(truncatingIfNeeded: status.st_ino)
    }
}

/// Which version of a file a listing saw: its status change time, which any write, truncation,
/// rename or change of owner or mode moves (so a file that was removed and recreated with the same
/// inode number, as file systems reuse them, is a new version).
struct FileVersion: Sendable, Hashable {
    let seconds: Int64
    let nanoseconds: Int64

    init(_ status: stat) {
        #if canImport(Darwin)
        seconds = Int64(status.st_ctimespec.tv_sec)
        nanoseconds = Int64(status.st_ctimespec.tv_nsec)
        #else
        seconds = Int64(status.st_ctim.tv_sec)
        nanoseconds = Int64(status.st_ctim.tv_nsec)
        #endif
    }
}

/// `bytes` for a terminal or a log: valid UTF-8 as it is (combining marks included), but every byte
/// that is not valid UTF-8 as `\xHH`, control characters as `\n`, `\t`, `\r`, `\xHH` or `\u{HH}`, and a
/// backslash as `\\`, so that two different names never print alike and a name cannot move the cursor.
func escapedForDisplay<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> String where Bytes.Index == Int {
    // Most names are printable ASCII: nothing to escape.
    if bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\\") }) {
        return String(decoding: bytes, as: UTF8.self)
    }
    var text = ""
    var index = bytes.startIndex
    while index < bytes.endIndex {
        guard let (scalar, length) = decodeScalar(bytes, at: index) else {
            text += "\\x" + hexByte(bytes[index])
            index += 1
            continue
        }
        switch scalar {
        case "\\": text += "\\\\"
        case "\n": text += "\\n"
        case "\t": text += "\\t"
        case "\r": text += "\\r"
        case _ where scalar.value < 0x20 || scalar.value == 0x7F:
            text += "\\x" + hexByte(UInt8(scalar.value))
        case _ where (0x80...0x9F).contains(scalar.value):   // C1 controls, valid UTF-8 but not printable
            text += "\\u{" + String(scalar.value, radix: 16) + "}"
        default: text.unicodeScalars.append(scalar)
        }
        index += length
    }
    return text
}

/// The Unicode scalar whose UTF-8 encoding starts at `index`, and its length; nil if the bytes there
/// are not a valid (shortest, non-surrogate) encoding.
func decodeScalar<Bytes: Collection<UInt8>>(_ bytes: Bytes, at index: Int) -> (Unicode.Scalar, Int)?
where Bytes.Index == Int {
    let lead = bytes[index]
    let length: Int
    let minimum: UInt32
    var value: UInt32
    switch lead {
    case 0x00...0x7F: return (Unicode.Scalar(lead), 1)
    case 0xC2...0xDF: (length, minimum, value) = (2, 0x80, UInt32(lead & 0x1F))
    case 0xE0...0xEF: (length, minimum, value) = (3, 0x800, UInt32(lead & 0x0F))
    case 0xF0...0xF4: (length, minimum, value) = (4, 0x10000, UInt32(lead & 0x07))
    default: return nil
    }
    guard bytes.endIndex - index >= length else { return nil }
    for offset in 1..<length {
        let byte = bytes[index + offset]
        guard byte & 0xC0 == 0x80 else { return nil }
        value = value << 6 | UInt32(byte & 0x3F)
    }
    guard value >= minimum, let scalar = Unicode.Scalar(value) else { return nil }
    return (scalar, length)
}

/// Two upper-case hex digits.
func hexByte(_ byte: UInt8) -> String {
    let digits = Array("0123456789ABCDEF".utf8)
    return String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0xF)]], as: UTF8.self)
}
