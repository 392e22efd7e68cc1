import Baton
import Dispatch
import Foundation

/// Runs the audit with the command line's arguments and returns the exit status.
///
/// A plain function, not top-level code: `main.swift`'s top level is main-actor isolated, and the
/// signal and timer handlers below run on other queues.
func runDemo(_ commandLine: [String]) -> Int32 {
    var arguments = commandLine.dropFirst().makeIterator()
    var directory = FileManager.default.currentDirectoryPath
    var concurrency = 4
    while let argument = arguments.next() {
        switch argument {
        case "--concurrency", "-j":
            guard let value = arguments.next().flatMap(Int.init), value > 0 else {
                FileHandle.standardError.write(Data("baton-demo: --concurrency needs a positive number\n".utf8))
                return 2
            }
            concurrency = value
        case "--help", "-h":
            print("usage: baton-demo [DIRECTORY] [--concurrency N]   (default: the current directory, 4)")
            return 0
        default:
            directory = argument
        }
    }

    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
        FileHandle.standardError.write(Data("baton-demo: \(directory) is not a directory\n".utf8))
        return 2
    }

    let audit = DirectoryAudit(root: URL(fileURLWithPath: directory).standardizedFileURL, concurrency: concurrency)
    let tree = audit.makeTree()
    let started = DispatchTime.now()
    let done = DispatchSemaphore(value: 0)
    tree.whenFinishedForDemo { done.signal() }

    // Ctrl-C cancels the tree; the second one quits at once.
    signal(SIGINT, SIG_IGN)
    let interrupts = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
    let interrupted = InterruptCount()
    interrupts.setEventHandler {
        if interrupted.increment() > 1 { exit(130) }
        FileHandle.standardError.write(Data("\nbaton-demo: cancelling…\n".utf8))
        tree.cancel()
    }
    interrupts.resume()

    // The live progress line.
    let ticker = DispatchSource.makeTimerSource(queue: .global())
    ticker.schedule(deadline: .now(), repeating: .milliseconds(200))
    ticker.setEventHandler {
        let counts = audit.ledger.snapshot
        let line = "\r\(counts.records.count)/\(counts.found) files checksummed, \(counts.failures.count) unreadable, \(counts.directories) directories   "
        FileHandle.standardError.write(Data(line.utf8))
    }
    ticker.resume()

    OperationQueue().addOperation(tree)
    done.wait()
    ticker.cancel()

    let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
    let counts = audit.ledger.snapshot
    let bytes = counts.records.reduce(0) { $0 + $1.bytes }
    let combined = counts.records.sorted { $0.path < $1.path }.reduce(UInt64(0)) { $0 &* 31 &+ $1.checksum }
    FileHandle.standardError.write(Data("\n".utf8))
    print("""
        Audited \(audit.root.path)
          directories:    \(counts.directories)
          files:          \(counts.records.count) checksummed of \(counts.found) found
          bytes:          \(bytes)
          unreadable:     \(counts.failures.count)
          tree checksum:  \(String(combined, radix: 16))
          outcome:        \(tree.outcome.map { "\($0)" } ?? "unfinished")
          time:           \(String(format: "%.3f", seconds)) s with \(concurrency) files at a time
        """)
    for failure in counts.failures.prefix(10) { print("  unreadable: \(failure)") }
    if counts.failures.count > 10 { print("  … and \(counts.failures.count - 10) more") }
    if tree.outcome?.isCancelled == true {
        print("Cancelled: the \(counts.records.count) files above were finished; the rest were not started or were stopped.")
        return 130
    }
    return 0
}

/// Counts Ctrl-C presses.
final class InterruptCount: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() -> Int { lock.withLock { count += 1; return count } }
}

extension TreeOperation {
    /// Calls `body` once the tree has finished (its outcome observers run just before).
    func whenFinishedForDemo(_ body: @escaping @Sendable () -> Void) {
        let previous = completionBlock
        completionBlock = {
            previous?()
            body()
        }
    }
}
