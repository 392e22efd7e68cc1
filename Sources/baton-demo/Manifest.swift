import Foundation

/// One line of the manifest: a file read to the end, or an entry the audit could not read.
///
/// The format, one line per entry, sorted by the path's bytes:
///
///     CHECKSUM SIZE PATH
///
/// CHECKSUM is the file's XXH64 as 16 lower-case hex digits, or a word for an entry that was not
/// read: `unreadable` (opening or reading failed), `changed` (the entry changed while it was being
/// audited: replaced, grown or shrunk), `skipped` (a directory on a pseudo-file system such as procfs).
/// SIZE is the size in bytes (as listed, for an entry that was not read). PATH is below the audited
/// directory, as raw bytes. As `sha256sum` does, a line whose path holds a backslash, a newline or a
/// carriage return starts with a backslash, and those characters are written `\\`, `\n` and `\r`, so
/// no name can forge a line.
struct ManifestEntry: Sendable, Equatable {
    enum Status: Sendable, Equatable {
        case checksum(UInt64)
        case unreadable
        case changed
        case skipped

        var field: String {
            switch self {
            case .checksum(let value): hex(value)
            case .unreadable: "unreadable"
            case .changed: "changed"
            case .skipped: "skipped"
            }
        }
    }

    /// The path below the audited directory, as bytes: a slice of the full path the listing made, so
    /// recording a file allocates nothing.
    let pathBytes: ArraySlice<UInt8>
    let status: Status
    let size: Int

    init(pathBytes: ArraySlice<UInt8>, status: Status, size: Int) {
        self.pathBytes = pathBytes
        self.status = status
        self.size = size
    }

    init(path: [UInt8], status: Status, size: Int) {
        self.init(pathBytes: path[...], status: status, size: size)
    }

    /// The path below the audited directory, as bytes.
    var path: [UInt8] { Array(pathBytes) }

    /// The entry's line, newline included.
    var line: [UInt8] {
        var line: [UInt8] = []
        append(to: &line)
        return line
    }

    /// Appends the entry's line, newline included, to `bytes` (digit by digit: a manifest of a
    /// million lines is written without a string per line).
    func append(to bytes: inout [UInt8]) {
        let escapes = pathBytes.contains { $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") }
        if escapes { bytes.append(UInt8(ascii: "\\")) }
        if case .checksum(let value) = status {
            for shift in stride(from: 60, through: 0, by: -4) { bytes.append(hexDigits[Int(value >> UInt64(shift) & 0xF)]) }
        } else {
            bytes += status.field.utf8
        }
        bytes.append(UInt8(ascii: " "))
        appendDecimal(size, to: &bytes)
        bytes.append(UInt8(ascii: " "))
        guard escapes else {
            bytes += pathBytes
            bytes.append(UInt8(ascii: "\n"))
            return
        }
        for byte in pathBytes {
            switch byte {
            case UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case UInt8(ascii: "\n"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case UInt8(ascii: "\r"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\n"))
    }

    /// Orders entries by their paths' bytes.
    static func byPath(_ one: ManifestEntry, _ other: ManifestEntry) -> Bool {
        precedes(one.pathBytes, other.pathBytes)
    }
}

/// A manifest that cannot be read back, naming the line.
struct ManifestError: Error, Equatable, CustomStringConvertible {
    let line: Int
    let reason: String
    var description: String { "line \(line): \(reason)" }
}

enum Manifest {
    /// Reads a manifest's bytes back into entries, sorted by path.
    static func parse(_ bytes: [UInt8]) throws(ManifestError) -> [ManifestEntry] {
        var numbered: [(entry: ManifestEntry, line: Int)] = []
        var lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        if lines.last?.isEmpty == true { lines.removeLast() }
        for (index, line) in lines.enumerated() {
            numbered.append((try parse(line: line, number: index + 1), index + 1))
        }
        // Sorted by path, then by line: a path listed twice names its second line.
        numbered.sort {
            ManifestEntry.byPath($0.entry, $1.entry) || ($0.entry.pathBytes == $1.entry.pathBytes && $0.line < $1.line)
        }
        for (one, next) in zip(numbered, numbered.dropFirst()) where one.entry.pathBytes == next.entry.pathBytes {
            throw ManifestError(
                line: next.line,
                reason: "the path \(escapedForDisplay(one.entry.pathBytes)) is listed twice (first on line \(one.line))")
        }
        return numbered.map(\.entry)
    }

    private static func parse(line: ArraySlice<UInt8>, number: Int) throws(ManifestError) -> ManifestEntry {
        var rest = line
        let escaped = rest.first == UInt8(ascii: "\\")
        if escaped { rest = rest.dropFirst() }
        let fields = rest.split(separator: UInt8(ascii: " "), maxSplits: 2, omittingEmptySubsequences: false)
        guard fields.count == 3, !fields[2].isEmpty else {
            throw ManifestError(line: number, reason: "expected CHECKSUM SIZE PATH")
        }
        let status: ManifestEntry.Status
        switch String(decoding: fields[0], as: UTF8.self) {
        case "unreadable": status = .unreadable
        case "changed": status = .changed
        case "skipped": status = .skipped
        case let word:
            guard word.utf8.count == 16, word.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }),
                let value = UInt64(word, radix: 16)
            else { throw ManifestError(line: number, reason: "\(escapedForDisplay(fields[0])) is not a checksum") }
            status = .checksum(value)
        }
        guard fields[1].allSatisfy({ (0x30...0x39).contains($0) }), let size = Int(String(decoding: fields[1], as: UTF8.self))
        else { throw ManifestError(line: number, reason: "\(escapedForDisplay(fields[1])) is not a size") }
        guard escaped else { return ManifestEntry(path: Array(fields[2]), status: status, size: size) }
        var path: [UInt8] = []
        var bytes = fields[2].makeIterator()
        while let byte = bytes.next() {
            guard byte == UInt8(ascii: "\\") else {
                path.append(byte)
                continue
            }
            switch bytes.next() {
            case UInt8(ascii: "\\"): path.append(UInt8(ascii: "\\"))
            case UInt8(ascii: "n"): path.append(UInt8(ascii: "\n"))
            case UInt8(ascii: "r"): path.append(UInt8(ascii: "\r"))
            default: throw ManifestError(line: number, reason: "a backslash not followed by \\, n or r")
            }
        }
        return ManifestEntry(path: path, status: status, size: size)
    }

    /// Writes `entries` (sorted by path) as manifest lines to `sink`, in pieces, and returns the
    /// tree checksum: the XXH64 of the manifest's bytes. Memory stays bounded by one piece.
    static func write(_ entries: [ManifestEntry], to sink: (UnsafeRawBufferPointer) throws -> Void) rethrows -> UInt64 {
        let piece = 1 << 16   // a multiple of 32, as XXH64 wants of every piece but the last
        var hash = XXH64()
        var pending = [UInt8]()
        pending.reserveCapacity(piece + 4096)
        for entry in entries {
            entry.append(to: &pending)
            guard pending.count >= piece else { continue }
            let whole = pending.count / 32 * 32
            try pending.withUnsafeBytes { bytes in
                let ready = UnsafeRawBufferPointer(rebasing: bytes[..<whole])
                hash.update(ready)
                try sink(ready)
            }
            pending.removeFirst(whole)
        }
        try pending.withUnsafeBytes { bytes in
            hash.update(bytes)
            try sink(bytes)
        }
        return hash.digest
    }

    /// What a check of the audit against a manifest found: paths whose entry is the same, differs,
    /// was in the manifest only, or is in the audit only.
    struct Comparison: Equatable {
        var unchanged = 0
        var changed: [[UInt8]] = []
        var missing: [[UInt8]] = []
        var new: [[UInt8]] = []

        var differs: Bool { !(changed.isEmpty && missing.isEmpty && new.isEmpty) }
    }

    /// Compares two lists of entries, each sorted by path, in one pass.
    static func compare(expected: [ManifestEntry], actual: [ManifestEntry]) -> Comparison {
        var comparison = Comparison()
        var (old, now) = (expected[...], actual[...])
        while let one = old.first, let other = now.first {
            if one.pathBytes == other.pathBytes {
                if one == other { comparison.unchanged += 1 } else { comparison.changed.append(one.path) }
                old = old.dropFirst()
                now = now.dropFirst()
            } else if precedes(one.pathBytes, other.pathBytes) {
                comparison.missing.append(one.path)
                old = old.dropFirst()
            } else {
                comparison.new.append(other.path)
                now = now.dropFirst()
            }
        }
        comparison.missing += old.map(\.path)
        comparison.new += now.map(\.path)
        return comparison
    }
}

private let hexDigits = Array("0123456789abcdef".utf8)

/// Appends `value`'s decimal digits (`value` ≥ 0).
private func appendDecimal(_ value: Int, to bytes: inout [UInt8]) {
    var power = 1
    while value / power >= 10 { power *= 10 }
    while power > 0 {
        bytes.append(UInt8(ascii: "0") + UInt8(value / power % 10))
        power /= 10
    }
}

/// Whether `one` sorts before `other`, byte by byte (`memcmp`, then the shorter first): the order of
/// the manifest, and many times faster than a generic lexicographic comparison.
func precedes(_ one: ArraySlice<UInt8>, _ other: ArraySlice<UInt8>) -> Bool {
    let common = min(one.count, other.count)
    guard common > 0 else { return one.count < other.count }
    let order = one.withUnsafeBytes { one in
        other.withUnsafeBytes { other in memcmp(one.baseAddress!, other.baseAddress!, common) }
    }
    return order != 0 ? order < 0 : one.count < other.count
}
