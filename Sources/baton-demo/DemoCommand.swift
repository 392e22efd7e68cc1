import Baton
import Dispatch
import Foundation

let usage = """
    usage: baton-demo [DIRECTORY] [--concurrency N] [--manifest FILE] [--check FILE]
                      [--read-timeout SECONDS] [--trace FILE] [--graph FILE]

    Reads every file under DIRECTORY (default: the current directory) in chunks of at most 1 MiB,
    N files at a time (default 4), checksums each (XXH64) and prints a summary.
      --concurrency N, -j N   how many operations run at once (at least 1)
      --manifest FILE         writes one line per entry, sorted by the path's bytes:
                                CHECKSUM SIZE PATH
                              CHECKSUM is 16 hex digits, or unreadable, changed (while auditing) or
                              skipped (a pseudo-file system); PATH is raw bytes. As sha256sum does, a
                              line whose path holds \\, a newline or a carriage return starts with \\,
                              and those are written \\\\, \\n and \\r. The tree checksum is the
                              manifest's XXH64.
      --check FILE            compares the tree with a manifest written by --manifest and lists what
                              changed, is missing and is new (exit status 1 if anything differs)
      --read-timeout SECONDS  a read(2) that blocks longer is stopped, the file reported (default 30)
      --trace FILE            records the run and writes it as a Chrome trace (open it in Perfetto)
      --graph FILE            records the run and writes its graph: Graphviz DOT, or Mermaid if FILE
                              ends in .mmd (the most recent 100,000 operations of a larger run)
    Symbolic links are counted, not followed; hidden entries and special files (FIFOs, devices,
    sockets) are skipped, and so are directories on pseudo-file systems (procfs, sysfs, debugfs, …),
    whose reads can block, never end or consume data. A file that is replaced, grows or shrinks while
    it is audited is reported as changed, not read. Names are printed with undecodable bytes and
    control characters escaped (\\xFE, \\n).
    Exit status: 0 every file read (and the check found no difference), 1 some could not be read or
    changed (or the check found differences), 2 usage error or unreadable manifest, 130 interrupted.
    """

/// What the command line asked for. Paths are bytes, as the command line gave them (a directory
/// whose name is not UTF-8 can be audited, and a manifest written under such a name).
struct DemoOptions: Equatable {
    var directory = Array(".".utf8)
    var concurrency = 4
    var manifest: [UInt8]?
    var check: [UInt8]?
    var readTimeout = 30.0
    var trace: [UInt8]?
    var graph: [UInt8]?

    /// Parses the arguments (without the program name); a usage error says what was wrong.
    static func parse(_ arguments: [String]) -> Result<DemoOptions?, UsageError> {
        parse(arguments: arguments.map { Array($0.utf8) })
    }

    /// Parses the arguments' bytes (without the program name).
    static func parse(arguments: [[UInt8]]) -> Result<DemoOptions?, UsageError> {
        var options = DemoOptions()
        var directory: [UInt8]?
        var iterator = arguments.makeIterator()
        while let bytes = iterator.next() {
            let argument = String(decoding: bytes, as: UTF8.self)
            switch argument {
            case "--help", "-h":
                return .success(nil)
            case "--concurrency", "-j":
                guard let value = iterator.next().flatMap({ Int(String(decoding: $0, as: UTF8.self)) }), value > 0 else {
                    return .failure(UsageError("--concurrency needs a positive number"))
                }
                options.concurrency = value
            case "--read-timeout":
                guard let value = iterator.next().flatMap({ Double(String(decoding: $0, as: UTF8.self)) }),
                    value > 0, value <= ReadWatch.longestDeadline
                else {
                    return .failure(UsageError("--read-timeout needs a number of seconds above 0, up to a year (31536000)"))
                }
                options.readTimeout = value
            case "--manifest", "--check", "--trace", "--graph":
                guard let file = iterator.next(), !file.isEmpty, !file.contains(0) else {
                    return .failure(UsageError("\(argument) needs a file name"))
                }
                switch argument {
                case "--manifest": options.manifest = file
                case "--check": options.check = file
                case "--trace": options.trace = file
                default: options.graph = file
                }
            default:
                if bytes.first == UInt8(ascii: "-") && bytes != [UInt8(ascii: "-")] {
                    return .failure(UsageError("unknown option \(escapedForDisplay(bytes))"))
                }
                if let directory {
                    return .failure(
                        UsageError("one directory only (got \(escapedForDisplay(directory)) and \(escapedForDisplay(bytes)))"))
                }
                directory = bytes
            }
        }
        if let directory { options.directory = directory }
        return .success(options)
    }
}

/// A command line the demo cannot run.
struct UsageError: Error, Equatable {
    let message: String
    init(_ message: String) { self.message = message }
}

/// Runs the audit with the command line's arguments and returns the exit status.
///
/// A plain function, not top-level code: `main.swift`'s top level is main-actor isolated, and the
/// signal and timer handlers below run on other queues. `seams` and `output` are for tests.
func runDemo(
    _ commandLine: [String], seams: AuditSeams = AuditSeams(), output: (String) -> Void = { print($0, terminator: "") }
) -> Int32 {
    runDemo(arguments: commandLine.map { Array($0.utf8) }, seams: seams, output: output)
}

/// Runs the audit with the command line's arguments as bytes (see `commandLineBytes()`).
func runDemo(
    arguments commandLine: [[UInt8]], seams: AuditSeams = AuditSeams(),
    output: (String) -> Void = { print($0, terminator: "") }
) -> Int32 {
    let options: DemoOptions
    switch DemoOptions.parse(arguments: Array(commandLine.dropFirst())) {
    case .success(nil):
        output(usage + "\n")
        return 0
    case .success(let parsed?):
        options = parsed
    case .failure(let error):
        standardError("baton-demo: \(error.message)\n\(usage)\n")
        return 2
    }
    var status = stat()
    guard RawPath(bytes: options.directory).withCString({ stat($0, &status) }) == 0, status.st_mode & S_IFMT == S_IFDIR else {
        standardError("baton-demo: \(escapedForDisplay(options.directory)) is not a directory\n")
        return 2
    }
    // A manifest to check against is read first: a bad one is a usage error, before any work.
    var expected: [ManifestEntry]?
    if let check = options.check {
        do {
            expected = try Manifest.parse(try readWholeFile(RawPath(bytes: check)))
        } catch let error as ManifestError {
            standardError("baton-demo: \(escapedForDisplay(check)): \(error)\n")
            return 2
        } catch {
            standardError("baton-demo: cannot read the manifest \(escapedForDisplay(check)): \(error)\n")
            return 2
        }
    }

    let audit = DirectoryAudit(
        root: options.directory, concurrency: options.concurrency, readDeadline: options.readTimeout, seams: seams)
    let tree = audit.makeTree()
    let recorder = options.trace != nil || options.graph != nil ? FlightRecorder() : nil
    recorder?.attach(to: tree)
    let started = DispatchTime.now()
    let done = DispatchSemaphore(value: 0)
    let ending = Ending()
    tree.onFinish { outcome in
        ending.set(outcome)
        done.signal()
    }

    // Ctrl-C cancels the tree (which interrupts the reads in progress), and the summary below is
    // printed once it has stopped; a second one quits at once.
    let interrupts = InterruptWatch.start { count in
        if count > 1 { _exit(130) }
        standardError("\nbaton-demo: cancelling (Ctrl-C again to quit at once)…\n")
        tree.cancel()
    }

    // The live progress line, on a terminal only.
    let ticker = isatty(STDERR_FILENO) == 1 ? DispatchSource.makeTimerSource(queue: .global()) : nil
    ticker?.schedule(deadline: .now(), repeating: .milliseconds(200))
    ticker?.setEventHandler { standardError("\r\u{1B}[K" + progressLine(audit.ledger.snapshot)) }
    ticker?.resume()

    OperationQueue().addOperation(tree)
    done.wait()
    ticker?.cancel()
    if ticker != nil { standardError("\r\u{1B}[K") }

    let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
    let counts = audit.ledger.snapshot
    let interrupted = ending.outcome?.isCancelled == true
    let entries = audit.ledger.sortedEntries
    var exitStatus: Int32 = counts.unreadable + counts.changed > 0 ? 1 : 0
    // The manifest is streamed to a file beside the target and renamed over it, and the tree checksum
    // is computed on the way. An interrupted audit writes none: half a tree would check as changed.
    var treeChecksum: UInt64
    var manifestNote: String?
    if let manifest = options.manifest, !interrupted {
        do {
            treeChecksum = try writeAtomically(RawPath(bytes: manifest)) { sink in try Manifest.write(entries, to: sink) }
            manifestNote = "Manifest: \(escapedForDisplay(manifest)) (\(entries.count) lines)\n"
        } catch {
            standardError("baton-demo: cannot write the manifest \(escapedForDisplay(manifest)): \(error)\n")
            treeChecksum = Manifest.write(entries) { _ in }
            exitStatus = 1
        }
    } else {
        treeChecksum = Manifest.write(entries) { _ in }
    }
    // Until the manifest is written, a Ctrl-C changes nothing (a second one quits, which leaves at
    // most a temporary file, never half a manifest); from here on it quits as usual.
    interrupts.stop()
    output(
        """
        Audited \(escapedForDisplay(options.directory))
          directories:    \(counts.directories)
          files:          \(counts.filesRead) read of \(counts.filesFound) found
          bytes:          \(counts.bytesRead) (\(formatted(bytes: counts.bytesRead)))
          unreadable:     \(counts.unreadable)
          changed:        \(counts.changed) (replaced, removed or modified while audited)
          skipped:        \(counts.skipped) on pseudo-file systems (procfs, sysfs, …)
          not read:       \(counts.links) symbolic links (not followed), \(counts.special) special files (FIFOs, devices, sockets)
          tree checksum:  \(hex(treeChecksum))
          outcome:        \(ending.outcome.map { "\($0)" } ?? "unfinished")
          time:           \(String(format: "%.3f", seconds)) s, \(options.concurrency) at a time
          peak memory:    \(String(format: "%.1f", peakMemoryMebibytes())) MiB

        """)
    let problems = audit.ledger.sortedProblems
    for problem in problems.prefix(10) {
        output("  \(problem.entry.status.field): \(escapedForDisplay(problem.entry.pathBytes)): \(problem.reason)\n")
    }
    if problems.count > 10 { output("  … and \(problems.count - 10) more\n") }
    if let manifestNote { output(manifestNote) }

    if let recorder {
        let records = recorder.records
        let dropped = recorder.droppedCount
        output("Recorded: \(records.count) operations" + (dropped > 0 ? " (the \(dropped) oldest dropped)" : "") + "\n")
        var exports: [(file: [UInt8], format: FlightRecorder.ExportFormat)] = []
        if let trace = options.trace { exports.append((trace, .chromeTrace)) }
        if let graph = options.graph {
            exports.append((graph, graph.suffix(4).elementsEqual(".mmd".utf8) ? .mermaid : .graphviz))
        }
        for export in exports {
            let url = RawPath(bytes: export.file).withCString {
                URL(fileURLWithFileSystemRepresentation: $0, isDirectory: false, relativeTo: nil)
            }
            do {
                try recorder.write(export.format, to: url)
                output("\(export.format == .chromeTrace ? "Trace" : "Graph"): \(escapedForDisplay(export.file))\n")
            } catch {
                standardError("baton-demo: cannot write \(escapedForDisplay(export.file)): \(error.localizedDescription)\n")
                exitStatus = 1
            }
        }
    }
    if interrupted {
        output(
            "Interrupted: the \(counts.filesRead) files above were read to the end; the rest were not, or not completely"
                + (options.manifest != nil || options.check != nil ? " (no manifest written, nothing checked).\n" : ".\n"))
        return 130
    }
    if let expected, let check = options.check {
        let comparison = Manifest.compare(expected: expected, actual: entries)
        output(
            "Check against \(escapedForDisplay(check)): \(comparison.unchanged) unchanged, \(comparison.changed.count) changed, "
                + "\(comparison.missing.count) missing, \(comparison.new.count) new\n")
        for (word, paths) in [("changed", comparison.changed), ("missing", comparison.missing), ("new", comparison.new)] {
            for path in paths { output("  \(word): \(escapedForDisplay(path))\n") }
        }
        if comparison.differs { exitStatus = 1 }
    }
    return exitStatus
}

/// Writes a file through `body`'s sink into a temporary file beside it, then renames it into place,
/// so a reader never sees half of it; returns what `body` returns.
func writeAtomically<Result>(_ path: RawPath, _ body: ((UnsafeRawBufferPointer) throws -> Void) throws -> Result) throws -> Result
{
    let temporary = RawPath(bytes: Array(path.bytes) + Array(".baton-demo-\(getpid())".utf8))
    let descriptor = temporary.open(O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode: 0o644)
    guard descriptor >= 0 else { throw SystemError(errno) }
    do {
        let result = try body { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { throw SystemError(errno) }
                offset += written
            }
        }
        guard close(descriptor) == 0 else { throw SystemError(errno) }
        guard temporary.withCString({ from in path.withCString { rename(from, $0) } }) == 0 else { throw SystemError(errno) }
        return result
    } catch {
        close(descriptor)
        _ = temporary.withCString { unlink($0) }
        throw error
    }
}

/// A system call's failure, described by `strerror`.
struct SystemError: Error, CustomStringConvertible {
    let code: Int32
    init(_ code: Int32) { self.code = code }
    var description: String { String(cString: strerror(code)) }
}

/// A whole file's bytes, read with read(2) to its end (a procfs file's size shows as 0).
func readWholeFile(_ path: RawPath) throws -> [UInt8] {
    let descriptor = path.open(O_RDONLY | O_CLOEXEC | O_NONBLOCK)
    guard descriptor >= 0 else { throw SystemError(errno) }
    defer { close(descriptor) }
    var status = stat()
    guard fstat(descriptor, &status) == 0 else { throw SystemError(errno) }
    guard status.st_mode & S_IFMT == S_IFREG else { throw SystemError(EINVAL) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 1 << 16)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress!, $0.count) }
        if count < 0 && errno == EINTR { continue }
        guard count >= 0 else { throw SystemError(errno) }
        guard count > 0 else { break }
        bytes += buffer[..<count]
    }
    return bytes
}

/// The live progress line: files and bytes read against what the walk has found so far.
func progressLine(_ counts: Ledger.Counts) -> String {
    let percent = counts.bytesFound > 0 ? Double(counts.bytesRead) / Double(counts.bytesFound) * 100 : 0
    return
        "\(counts.filesRead)/\(counts.filesFound) files, \(formatted(bytes: counts.bytesRead)) of \(formatted(bytes: counts.bytesFound)) found so far "
        + "(\(String(format: "%.0f", percent))%), \(counts.unreadable) unreadable"
}

/// Bytes in binary units with one decimal ("1.5 GiB").
func formatted(bytes: Int) -> String {
    var value = Double(bytes)
    for unit in ["bytes", "KiB", "MiB", "GiB"] {
        if value < 1024 { return unit == "bytes" ? "\(bytes) bytes" : String(format: "%.1f %@", value, unit) }
        value /= 1024
    }
    return String(format: "%.1f TiB", value)
}

/// This process's own peak resident memory so far, in MiB: Linux's `VmHWM` (unlike `getrusage`'s
/// `ru_maxrss`, which survives `exec` and so, under `swift run`, reports the SwiftPM driver's peak),
/// the task's `resident_size_max` on Apple platforms.
func peakMemoryMebibytes() -> Double {
    #if canImport(Darwin)
    var info = mach_task_basic_info()
    var count = mach_msg_type_number_t(MemoryLayout<mach_task_basic_info>.size / MemoryLayout<natural_t>.size)
    let result = withUnsafeMutablePointer(to: &info) { pointer in
        pointer.withMemoryRebound(to: integer_t.self, capacity: Int(count)) {
            task_info(task_self_trap(), task_flavor_t(MACH_TASK_BASIC_INFO), $0, &count)
        }
    }
    guard result == KERN_SUCCESS else { return .nan }
    return Double(info.resident_size_max) / 1_048_576   // bytes
    #else
    return peakMemory(fromStatus: processStatus()) ?? .nan
    #endif
}

/// The `VmHWM` line of a Linux `/proc/<pid>/status`, in MiB.
func peakMemory(fromStatus status: String) -> Double? {
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        // "VmHWM:\t  20480 kB": the number is padded to 8 characters, so a large one follows the tab.
        let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
        guard fields.count == 3, fields[2] == "kB", let kibibytes = Double(fields[1]) else { return nil }
        return kibibytes / 1024
    }
    return nil
}

/// `/proc/self/status`, or "" where there is none.
func processStatus() -> String {
    (try? readWholeFile(RawPath("/proc/self/status"))).map { String(decoding: $0, as: UTF8.self) } ?? ""
}

func standardError(_ text: String) {
    FileHandle.standardError.write(Data(text.utf8))
}

/// The tree's outcome, handed from its finish callback to the thread that prints the summary.
final class Ending: Sendable {
    private let stored = Mutex<Outcome<Void>?>(nil)
    func set(_ outcome: Outcome<Void>) { stored.withLock { $0 = outcome } }
    var outcome: Outcome<Void>? { stored.withLock { $0 } }
}

/// Turns SIGINT into calls of a closure, on a thread of its own: the signal handler only writes a
/// byte to a pipe (all a handler may safely do), and the thread reads it. The handler is installed
/// without SA_RESTART, so a Ctrl-C also interrupts the system call the thread it lands on is blocked
/// in (the reads themselves are interrupted by the cancellation: see `FileReader`).
final class InterruptWatch: Sendable {
    /// The pipe's write end, for the handler (set before the handler is installed).
    nonisolated(unsafe) private static var writeEnd: Int32 = -1
    private let writeEnd: Int32
    nonisolated(unsafe) private var previous = sigaction()

    private init(writeEnd: Int32) {
        self.writeEnd = writeEnd
    }

    /// Installs the handler; `onInterrupt` is given the number of Ctrl-Cs so far.
    static func start(_ onInterrupt: @escaping @Sendable (Int) -> Void) -> InterruptWatch {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { return InterruptWatch(writeEnd: -1) }
        let readEnd = ends[0]
        Thread {
            var byte: UInt8 = 0
            var count = 0
            while true {
                let result = read(readEnd, &byte, 1)
                if result < 0 && errno == EINTR { continue }
                guard result == 1 else { break }
                count += 1
                onInterrupt(count)
            }
            close(readEnd)
        }.start()
        writeEnd = ends[1]
        let watch = InterruptWatch(writeEnd: ends[1])
        var action = sigaction()
        #if canImport(Darwin)
        action.__sigaction_u.__sa_handler = InterruptWatch.handle
        #else
        action.__sigaction_handler.sa_handler = InterruptWatch.handle
        #endif
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0   // no SA_RESTART
        sigaction(SIGINT, &action, &watch.previous)
        return watch
    }

    private static let handle: @convention(c) (Int32) -> Void = { _ in
        let saved = errno
        var byte: UInt8 = 1
        _ = write(InterruptWatch.writeEnd, &byte, 1)
        errno = saved
    }

    /// Puts the previous handler back and ends the thread. Call it once.
    func stop() {
        guard writeEnd >= 0 else { return }
        sigaction(SIGINT, &previous, nil)
        Self.writeEnd = -1
        close(writeEnd)
    }
}
