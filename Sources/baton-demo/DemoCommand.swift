import Baton
import Dispatch
import Foundation

let usage = """
    usage: baton-demo [DIRECTORY] [--concurrency N] [--manifest FILE] [--trace FILE] [--graph FILE]

    Reads every file under DIRECTORY (default: the current directory) in chunks of at most 1 MiB,
    N files at a time (default 4), checksums each (XXH64) and prints a summary.
      --concurrency N, -j N   how many operations run at once (at least 1)
      --manifest FILE         writes one line per file, sorted by path: checksum, size, path
      --trace FILE            records the run and writes it as a Chrome trace (open it in Perfetto)
      --graph FILE            records the run and writes its graph: Graphviz DOT, or Mermaid if FILE
                              ends in .mmd (the most recent 100,000 operations of a larger run)
    Symbolic links are counted, not followed; hidden entries and special files are skipped.
    Exit status: 0 every file read, 1 some could not be read, 2 usage error, 130 interrupted.
    """

/// What the command line asked for.
struct DemoOptions: Equatable {
    var directory = "."
    var concurrency = 4
    var manifest: String?
    var trace: String?
    var graph: String?

    /// Parses the arguments (without the program name); a usage error says what was wrong.
    static func parse(_ arguments: [String]) -> Result<DemoOptions?, UsageError> {
        var options = DemoOptions()
        var directory: String?
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            switch argument {
            case "--help", "-h":
                return .success(nil)
            case "--concurrency", "-j":
                guard let value = iterator.next().flatMap(Int.init), value > 0 else {
                    return .failure(UsageError("--concurrency needs a positive number"))
                }
                options.concurrency = value
            case "--manifest":
                guard let file = iterator.next(), !file.isEmpty else {
                    return .failure(UsageError("--manifest needs a file name"))
                }
                options.manifest = file
            case "--trace", "--graph":
                guard let file = iterator.next(), !file.isEmpty else {
                    return .failure(UsageError("\(argument) needs a file name"))
                }
                if argument == "--trace" { options.trace = file } else { options.graph = file }
            default:
                if argument.hasPrefix("-") && argument != "-" { return .failure(UsageError("unknown option \(argument)")) }
                if directory != nil { return .failure(UsageError("one directory only (got \(directory!) and \(argument))")) }
                directory = argument
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
/// signal and timer handlers below run on other queues. `beforeRead` is a test seam.
func runDemo(_ commandLine: [String], beforeRead: (@Sendable (ChecksumFile) -> Void)? = nil) -> Int32 {
    let options: DemoOptions
    switch DemoOptions.parse(Array(commandLine.dropFirst())) {
    case .success(nil):
        print(usage)
        return 0
    case .success(let parsed?):
        options = parsed
    case .failure(let error):
        standardError("baton-demo: \(error.message)\n\(usage)\n")
        return 2
    }
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: options.directory, isDirectory: &isDirectory), isDirectory.boolValue else {
        standardError("baton-demo: \(options.directory) is not a directory\n")
        return 2
    }

    let audit = DirectoryAudit(root: options.directory, concurrency: options.concurrency, beforeRead: beforeRead)
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

    // Ctrl-C cancels the tree, and the summary below is printed once it has stopped; a second one
    // quits at once.
    let interrupts = InterruptWatch.start { count in
        if count > 1 { exit(130) }
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
    // From here on a Ctrl-C quits as usual (the manifest is written atomically: never half a file).
    interrupts.stop()
    ticker?.cancel()
    if ticker != nil { standardError("\r\u{1B}[K") }

    let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
    let counts = audit.ledger.snapshot
    print(
        """
        Audited \(options.directory)
          directories:    \(counts.directories)
          files:          \(counts.filesRead) read of \(counts.filesFound) found
          bytes:          \(counts.bytesRead) (\(formatted(bytes: counts.bytesRead)))
          unreadable:     \(counts.unreadable)
          not followed:   \(counts.links) symbolic links, \(counts.special) special files
          tree checksum:  \(hex(audit.treeChecksum()))
          outcome:        \(ending.outcome.map { "\($0)" } ?? "unfinished")
          time:           \(String(format: "%.3f", seconds)) s, \(options.concurrency) at a time
          peak memory:    \(String(format: "%.1f", peakMemoryMebibytes())) MiB
        """)
    let problems = audit.ledger.sortedProblems
    for problem in problems.prefix(10) { print("  unreadable: \(problem.path): \(problem.reason)") }
    if problems.count > 10 { print("  … and \(problems.count - 10) more") }

    var status: Int32 = counts.unreadable > 0 ? 1 : 0
    if let manifest = options.manifest {
        do {
            try Data(audit.manifest().utf8).write(to: URL(fileURLWithPath: manifest), options: .atomic)
            print("Manifest: \(manifest) (\(counts.filesRead + counts.unreadable) lines)")
        } catch {
            standardError("baton-demo: cannot write the manifest \(manifest): \(error.localizedDescription)\n")
            status = 1
        }
    }
    if let recorder {
        let records = recorder.records
        let dropped = recorder.droppedCount
        print("Recorded: \(records.count) operations" + (dropped > 0 ? " (the \(dropped) oldest dropped)" : ""))
        var exports: [(file: String, format: FlightRecorder.ExportFormat)] = []
        if let trace = options.trace { exports.append((trace, .chromeTrace)) }
        if let graph = options.graph { exports.append((graph, graph.hasSuffix(".mmd") ? .mermaid : .graphviz)) }
        for export in exports {
            do {
                try recorder.write(export.format, to: URL(fileURLWithPath: export.file))
                print("\(export.format == .chromeTrace ? "Trace" : "Graph"): \(export.file)")
            } catch {
                standardError("baton-demo: cannot write \(export.file): \(error.localizedDescription)\n")
                status = 1
            }
        }
    }
    if ending.outcome?.isCancelled == true {
        print("Interrupted: the \(counts.filesRead) files above were read to the end; the rest were not, or not completely.")
        return 130
    }
    return status
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

/// This process's peak resident memory so far, in MiB.
func peakMemoryMebibytes() -> Double {
    var usage = rusage()
    #if canImport(Darwin)
    guard getrusage(RUSAGE_SELF, &usage) == 0 else { return .nan }
    return Double(usage.ru_maxrss) / 1_048_576   // bytes
    #else
    guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return .nan }
    return Double(usage.ru_maxrss) / 1024   // KiB
    #endif
}

func standardError(_ text: String) {
    FileHandle.standardError.write(Data(text.utf8))
}

/// The tree's outcome, handed from its finish callback to the thread that prints the summary.
final class Ending: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Outcome<Void>?
    func set(_ outcome: Outcome<Void>) { lock.withLock { stored = outcome } }
    var outcome: Outcome<Void>? { lock.withLock { stored } }
}

/// Turns SIGINT into calls of a closure, on a thread of its own: the signal handler only writes a
/// byte to a pipe (all a handler may safely do), and the thread reads it.
final class InterruptWatch: Sendable {
    /// The pipe's write end, for the handler (set before the handler is installed).
    nonisolated(unsafe) private static var writeEnd: Int32 = -1
    private let writeEnd: Int32
    private let previous: (@convention(c) (Int32) -> Void)?

    private init(writeEnd: Int32, previous: (@convention(c) (Int32) -> Void)?) {
        self.writeEnd = writeEnd
        self.previous = previous
    }

    /// Installs the handler; `onInterrupt` is given the number of Ctrl-Cs so far.
    static func start(_ onInterrupt: @escaping @Sendable (Int) -> Void) -> InterruptWatch {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { return InterruptWatch(writeEnd: -1, previous: nil) }
        let readEnd = ends[0]
        Thread {
            var byte: UInt8 = 0
            var count = 0
            while read(readEnd, &byte, 1) == 1 {
                count += 1
                onInterrupt(count)
            }
            close(readEnd)
        }.start()
        writeEnd = ends[1]
        let previous = signal(SIGINT) { _ in
            let saved = errno
            var byte: UInt8 = 1
            _ = write(InterruptWatch.writeEnd, &byte, 1)
            errno = saved
        }
        return InterruptWatch(writeEnd: ends[1], previous: previous)
    }

    /// Puts the previous handler back and ends the thread. Call it once.
    func stop() {
        guard writeEnd >= 0 else { return }
        signal(SIGINT, previous)
        Self.writeEnd = -1
        close(writeEnd)
    }
}
