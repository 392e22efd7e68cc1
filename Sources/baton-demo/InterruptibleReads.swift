import Baton
import Dispatch
import Foundation

// A system call that blocks (a read or an open on a stalled FUSE or network mount, a listing on a hung
// automount) would hold its queue worker, and a Ctrl-C, forever: cancelling an operation does not wake
// a system call. So every call of the audit that can block is watched. The operation marks itself "in
// a call" before the call and clears the mark after; the watch's timer, seeing the operation cancelled
// or a call past its deadline, marks it stopped and sends its thread SIGURG, whose handler does nothing
// and is installed without SA_RESTART, so the blocked call returns EINTR and the operation sees why. A
// signal sent just before the call is entered is handled before it and would be lost, so the watch
// sends it again on every tick until the call has returned.
//
// Some calls do not return even then: FUSE turns a signal into an INTERRUPT request and waits for a
// server that may never answer. After a grace period the watch abandons such a call: it finishes the
// operation itself (cancelled, or reported as blocked), so the audit ends and prints its summary; the
// thread stays in the kernel until the call returns, and then does nothing more.

/// One operation's watched calls: whether one is in progress, on which thread and since when, whether
/// they must stop, and whether the watch gave up on the one in progress. A value with one method per
/// event, so tests can drive it whole.
struct ReadState<Thread> {
    /// Why calls must stop.
    enum Stop: Equatable, Sendable {
        /// The operation was cancelled (Ctrl-C).
        case cancelled
        /// One call made no progress for longer than the deadline.
        case stalled
    }

    /// What the watch's tick must do.
    enum TickAction {
        case nothing
        /// Send the thread the signal (again).
        case interrupt(Thread)
        /// The call did not return within the grace period after it was told to stop: finish the
        /// operation for it.
        case abandon(Stop)
    }

    private(set) var stop: Stop?
    private(set) var call: (thread: Thread, since: UInt64)?
    /// When the call in progress was first told to stop.
    private(set) var stoppingSince: UInt64?
    /// The watch finished the operation for a call that did not return: the operation must not.
    private(set) var abandoned = false

    /// The operation is about to make a call: false if it must stop instead.
    mutating func beginCall(on thread: Thread, at now: UInt64) -> Bool {
        guard stop == nil && !abandoned else { return false }
        call = (thread, now)
        return true
    }

    /// A long call (a directory's listing) made progress: its deadline starts again.
    mutating func progress(at now: UInt64) {
        if let call { self.call = (call.thread, now) }
    }

    /// The call returned: why calls must stop, if they must.
    mutating func endCall() -> Stop? {
        call = nil
        stoppingSince = nil
        return stop
    }

    /// Someone asks the calls to stop (the first reason wins): the thread to interrupt, if one is in
    /// a call.
    mutating func request(_ reason: Stop) -> Thread? {
        if stop == nil { stop = reason }
        return abandoned ? nil : call?.thread
    }

    /// The watch's tick at `now`: interrupt a call that must stop or has outlived `deadline`
    /// nanoseconds, and abandon one still running `grace` nanoseconds after it was first told to.
    mutating func tick(at now: UInt64, deadline: UInt64, grace: UInt64) -> TickAction {
        guard let call, !abandoned else { return .nothing }
        // `now` was read before the lock was taken: a call that began meanwhile is younger than it.
        if stop == nil && now > call.since && now - call.since > deadline { stop = .stalled }
        guard let stop else { return .nothing }
        let since = stoppingSince ?? now
        stoppingSince = since
        guard now > since && now - since > grace else { return .interrupt(call.thread) }
        abandoned = true
        return .abandon(stop)
    }
}

/// Makes one operation's blocking calls interruptible: a handle on its entry in the watch, whose one
/// lock decides for every call in progress and for the timer that stops them.
final class FileReader: Sendable {
    private let watch: ReadWatch

    fileprivate init(watch: ReadWatch) { self.watch = watch }

    /// What one call came to.
    enum Result: Equatable {
        /// What it returned (a byte count, a descriptor).
        case value(Int)
        case failed(Int32)
        case stopped(ReadState<pthread_t>.Stop)
        /// The watch gave up on the call and finished the operation: do nothing more.
        case abandoned
    }

    /// A system call that may block: `body` returns its result, or -1 with `errno` set; retried when a
    /// signal interrupts it for no reason of ours.
    func call(_ body: () -> Int) -> Result {
        while true {
            if let refused = begin() { return refused }
            let result = body()
            let failure = errno
            let (stop, abandoned) = end()
            if abandoned { return .abandoned }
            if result >= 0 { return .value(result) }
            if failure != EINTR { return .failed(failure) }
            if let stop { return .stopped(stop) }
        }
    }

    /// What a span came to.
    enum SpanOutcome<Value> {
        /// `body` ran; `stop` says whether calls had to stop meanwhile (and why).
        case finished(Value, stop: ReadState<pthread_t>.Stop?)
        /// Calls had to stop before it began: `body` did not run.
        case refused(ReadState<pthread_t>.Stop)
        /// The watch gave up on it and finished the operation: do nothing more.
        case abandoned
    }

    /// Runs `body`, a run of calls watched as one (a directory's listing), which reports its progress
    /// with `progress()`, so its deadline is for a stretch without progress. A call that a signal
    /// interrupts inside it fails with EINTR; `body` simply stops.
    func span<Value>(_ body: () -> Value) -> SpanOutcome<Value> {
        if let refused = begin() {
            guard case .stopped(let stop) = refused else { return .abandoned }
            return .refused(stop)
        }
        let value = body()
        let (stop, abandoned) = end()
        return abandoned ? .abandoned : .finished(value, stop: stop)
    }

    /// Restarts the deadline of the span in progress.
    func progress() {
        let now = DispatchTime.now().uptimeNanoseconds
        watch.update(self) { $0.progress(at: now) }
    }

    private func begin() -> Result? {
        let now = DispatchTime.now().uptimeNanoseconds
        let thread = pthread_self()
        return watch.update(self) { state in
            if state.beginCall(on: thread, at: now) { return nil }
            return state.abandoned ? .abandoned : .stopped(state.stop ?? .cancelled)
        }
    }

    private func end() -> (stop: ReadState<pthread_t>.Stop?, abandoned: Bool) {
        watch.update(self) { state in (state.endCall(), state.abandoned) }
    }
}

/// The watched calls in progress in one audit, and the timer that enforces their deadline, repeats
/// their interrupts and abandons the calls that ignore them. It looks only at the calls in progress
/// (at most the audit's concurrency).
final class ReadWatch: @unchecked Sendable {   // the timer is set once; a dispatch source is thread-safe
    /// How long one call may block before its operation is reported as blocked.
    let deadline: Double
    /// How long a call told to stop may take to return before the watch finishes its operation.
    let grace: Double
    /// Each watched reader's calls, and what the watch needs to stop them: the one state, behind the
    /// one lock.
    private let watched = Mutex<[ObjectIdentifier: Watched]>([:])
    private let timer: any DispatchSourceTimer

    private struct Watched {
        var state = ReadState<pthread_t>()
        let operation: Operation
        let abandon: @Sendable (ReadState<pthread_t>.Stop) -> Void
    }

    /// The longest deadline: a year (a longer one would overflow the clock's nanoseconds).
    static let longestDeadline = 365 * 86_400.0

    init(deadline: Double, grace: Double = 1) {
        self.deadline = min(deadline, Self.longestDeadline)
        self.grace = grace
        InterruptSignal.install()
        timer = DispatchSource.makeTimerSource(queue: .global())
        let period = min(0.1, max(0.01, self.deadline / 4))
        timer.schedule(deadline: .now() + period, repeating: period)
        let (nanoseconds, graceNanoseconds) = (UInt64(self.deadline * 1e9), UInt64(grace * 1e9))
        timer.setEventHandler { [weak self] in self?.tick(deadline: nanoseconds, grace: graceNanoseconds) }
        timer.resume()
    }

    deinit { timer.cancel() }

    /// Calls `body` with a reader whose calls the watch stops when `operation` is cancelled (Baton
    /// tells an operation `didCancel()` only once `execute()` has returned, and these calls run inside
    /// it) or when one of them outlives the deadline. If a call does not return when told to, the
    /// watch calls `abandon` (once, on its own thread) to finish the operation, and the reader's
    /// calls then answer `.abandoned`.
    func watching<Result>(
        for operation: Operation, abandon: @escaping @Sendable (ReadState<pthread_t>.Stop) -> Void,
        _ body: (FileReader) -> Result
    ) -> Result {
        InterruptSignal.unblockOnThisThread()
        let reader = FileReader(watch: self)
        let key = ObjectIdentifier(reader)
        watched.withLock { $0[key] = Watched(operation: operation, abandon: abandon) }
        defer { _ = watched.withLock { $0.removeValue(forKey: key) } }
        return body(reader)
    }

    /// Applies an event to `reader`'s state under the lock; the thread it names, if any, is sent the
    /// signal there, so it cannot have left the call and gone on to other work.
    fileprivate func update<Value>(_ reader: FileReader, _ event: (inout ReadState<pthread_t>) -> Value) -> Value {
        watched.withLock { event(&$0[ObjectIdentifier(reader)]!.state) }
    }

    private func tick(deadline: UInt64, grace: UInt64) {
        let now = DispatchTime.now().uptimeNanoseconds
        // Whether an operation is cancelled is asked outside the lock (it takes the operation's own).
        let operations = watched.withLock { $0.mapValues(\.operation) }
        let cancelled = operations.filter { $0.value.isCancelled }.map(\.key)
        let abandoned = watched.withLock { entries in
            var abandoned: [(@Sendable (ReadState<pthread_t>.Stop) -> Void, ReadState<pthread_t>.Stop)] = []
            for key in Array(entries.keys) {
                if cancelled.contains(key), let thread = entries[key]!.state.request(.cancelled) {
                    InterruptSignal.send(to: thread)
                }
                switch entries[key]!.state.tick(at: now, deadline: deadline, grace: grace) {
                case .nothing: break
                case .interrupt(let thread): InterruptSignal.send(to: thread)
                case .abandon(let stop): abandoned.append((entries[key]!.abandon, stop))
                }
            }
            return abandoned
        }
        // The operations are finished outside the lock.
        for (abandon, stop) in abandoned { abandon(stop) }
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

/// read(2), under a name that a method named `read` does not hide.
func systemRead(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
    read(descriptor, buffer, count)
}
