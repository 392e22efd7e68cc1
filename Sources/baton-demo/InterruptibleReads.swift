import Dispatch
import Foundation

// A read(2) that blocks (a file on a stalled FUSE or network mount, or anything that was not what it
// seemed) would hold its queue worker, and a Ctrl-C, forever: cancelling an operation does not wake a
// system call. So each file's reads can be interrupted. The reader marks itself "in a call" before
// read(2) and clears the mark after; the watch's timer, seeing the operation cancelled or a call past
// its deadline, marks the reader stopped and
// sends its thread SIGURG, whose handler does nothing and is installed without SA_RESTART, so the
// blocked read returns EINTR and the reader sees why. A signal sent just before the reader enters
// read(2) is handled before the call and would be lost, so the watch sends it again on every tick
// until the reader has left the call.

/// One file's reads: whether one is in progress, on which thread and since when, and whether they
/// must stop. A value with one method per event, so tests can drive it whole.
struct ReadState<Thread> {
    /// Why reads must stop.
    enum Stop: Equatable, Sendable {
        /// The operation was cancelled (Ctrl-C).
        case cancelled
        /// One call took longer than the deadline.
        case stalled
    }

    private(set) var stop: Stop?
    private(set) var call: (thread: Thread, since: UInt64)?

    /// The reader is about to call read(2): false if it must stop instead.
    mutating func beginCall(on thread: Thread, at now: UInt64) -> Bool {
        guard stop == nil else { return false }
        call = (thread, now)
        return true
    }

    /// The reader's call returned: why it must stop, if it must.
    mutating func endCall() -> Stop? {
        call = nil
        return stop
    }

    /// Someone asks the reads to stop (the first reason wins): the thread to interrupt, if one is in
    /// a call.
    mutating func request(_ reason: Stop) -> Thread? {
        if stop == nil { stop = reason }
        return call?.thread
    }

    /// The watch's tick: the thread to interrupt (again), if a call must stop or has outlived
    /// `deadline` nanoseconds.
    mutating func tick(at now: UInt64, deadline: UInt64) -> Thread? {
        guard let call else { return nil }
        if stop == nil && now &- call.since > deadline { stop = .stalled }
        return stop == nil ? nil : call.thread
    }
}

/// Reads one file's descriptor so that a cancel or the watch's deadline can interrupt a blocked call.
/// Its state is guarded by its watch's lock: one lock decides for every read in progress and for the
/// timer that stops them (and a file pays for no lock of its own).
final class FileReader: @unchecked Sendable {
    private let watch: ReadWatch
    /// Guarded by `watch.lock`.
    fileprivate var state = ReadState<pthread_t>()

    fileprivate init(watch: ReadWatch) { self.watch = watch }

    /// What one `read` came to.
    enum Result: Equatable {
        case bytes(Int)
        case failed(Int32)
        case stopped(ReadState<pthread_t>.Stop)
    }

    /// read(2) into `buffer`, retried when a signal interrupts it for no reason of ours.
    func read(_ descriptor: Int32, into buffer: UnsafeMutableRawPointer, count: Int) -> Result {
        call { systemRead(descriptor, buffer, count) }
    }

    /// A system call that may block (read(2), or open(2) on a file system that answers slowly):
    /// `body` returns its result, or -1 with `errno` set; retried when a signal interrupts it for no
    /// reason of ours.
    func call(_ body: () -> Int) -> Result {
        while true {
            let now = DispatchTime.now().uptimeNanoseconds
            let thread = pthread_self()
            let stopped: ReadState<pthread_t>.Stop? = watch.lock.withLock {
                state.beginCall(on: thread, at: now) ? nil : (state.stop ?? .cancelled)
            }
            if let stopped { return .stopped(stopped) }
            let count = body()
            let failure = errno
            let stop = watch.lock.withLock { state.endCall() }
            if count >= 0 { return .bytes(count) }
            if failure != EINTR { return .failed(failure) }
            if let stop { return .stopped(stop) }
        }
    }

    /// Stops the reads: a call in progress is interrupted (and again by the watch until it returns).
    func stop(_ reason: ReadState<pthread_t>.Stop) {
        watch.lock.withLock { stopLocked(reason) }
    }

    /// Why the reads stopped, if they did.
    var stopReason: ReadState<pthread_t>.Stop? { watch.lock.withLock { state.stop } }

    /// Signalled under the lock: the thread cannot have left the call and gone on to other work.
    fileprivate func stopLocked(_ reason: ReadState<pthread_t>.Stop) {
        if let thread = state.request(reason) { InterruptSignal.send(to: thread) }
    }

    fileprivate func tickLocked(at now: UInt64, deadline: UInt64) {
        if let thread = state.tick(at: now, deadline: deadline) { InterruptSignal.send(to: thread) }
    }
}

/// The file reads in progress in one audit, and the timer that enforces their deadline and repeats
/// their interrupts. It looks only at the reads in progress (at most the audit's concurrency).
final class ReadWatch: @unchecked Sendable {
    /// How long one read(2) may block before the file is reported as stalled.
    let deadline: Double
    fileprivate let lock = NSLock()
    private var readers: [ObjectIdentifier: (reader: FileReader, operation: Operation)] = [:]
    private let timer: any DispatchSourceTimer

    init(deadline: Double) {
        self.deadline = deadline
        InterruptSignal.install()
        timer = DispatchSource.makeTimerSource(queue: .global())
        let period = min(0.1, max(0.01, deadline / 4))
        timer.schedule(deadline: .now() + period, repeating: period)
        let nanoseconds = UInt64(deadline * 1e9)
        timer.setEventHandler { [weak self] in self?.tick(deadline: nanoseconds) }
        timer.resume()
    }

    deinit { timer.cancel() }

    /// Calls `body` with a reader that the watch stops when `operation` is cancelled (Baton tells an
    /// operation `didCancel()` only once `execute()` has returned, and these reads run inside it) or
    /// when one of its calls outlives the deadline.
    func watching<Result>(for operation: Operation, _ body: (FileReader) -> Result) -> Result {
        InterruptSignal.unblockOnThisThread()
        let reader = FileReader(watch: self)
        let key = ObjectIdentifier(reader)
        lock.withLock { readers[key] = (reader, operation) }
        defer { _ = lock.withLock { readers.removeValue(forKey: key) } }
        return body(reader)
    }

    private func tick(deadline: UInt64) {
        let now = DispatchTime.now().uptimeNanoseconds
        // Whether an operation is cancelled is asked outside the lock (it takes the operation's own).
        let watched = lock.withLock { readers.values.map { ($0.reader, $0.operation) } }
        let cancelled = watched.filter { $0.1.isCancelled }.map { ObjectIdentifier($0.0) }
        lock.withLock {
            for key in cancelled { readers[key]?.reader.stopLocked(.cancelled) }
            for (reader, _) in readers.values { reader.tickLocked(at: now, deadline: deadline) }
        }
    }
}

/// SIGURG, caught by a handler that does nothing, installed without SA_RESTART: sent to a thread, it
/// makes a blocked system call there return EINTR. (SIGURG's default action is to be ignored, so a
/// stray one harms nothing.)
enum InterruptSignal {
    private static let installation: Void = {
        var action = sigaction()
        #if canImport(Darwin)
        action.__sigaction_u.__sa_handler = { _ in }
        #else
        action.__sigaction_handler.sa_handler = { _ in }
        #endif
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0   // no SA_RESTART: the blocked call returns EINTR
        sigaction(SIGURG, &action, nil)
    }()

    /// Installs the handler (once per process).
    static func install() { installation }

    static func send(to thread: pthread_t) { pthread_kill(thread, SIGURG) }

    /// Lets SIGURG reach the calling thread. Dispatch's worker threads (where `OperationQueue` runs
    /// operations) start with most signals blocked, and a blocked signal interrupts nothing; the
    /// thread keeps it unblocked afterwards, which is harmless, as only the watch sends it.
    static func unblockOnThisThread() {
        // Once per thread (a system call per file costs the audit several per cent on tiny files).
        guard pthread_getspecific(unblocked) == nil else { return }
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGURG)
        pthread_sigmask(SIG_UNBLOCK, &signals, nil)
        pthread_setspecific(unblocked, UnsafeRawPointer(bitPattern: 1))
    }

    /// A thread-specific flag: set once the thread has SIGURG unblocked.
    private static let unblocked: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()
}

/// read(2) (a method named `read` hides it inside `FileReader`).
private func systemRead(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
    read(descriptor, buffer, count)
}
