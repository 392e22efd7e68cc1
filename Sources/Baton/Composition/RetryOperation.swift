import Dispatch
import Foundation

/// Runs fresh attempts of an operation until one succeeds, up to a total number of attempts.
///
/// ```swift
/// let download = RetryOperation(maximumAttempts: 3, delay: .exponential(initial: .milliseconds(500))) { attempt in
///     Download(url: url)            // a new operation for every attempt
/// }
/// ```
///
/// - `maximumAttempts` is the **total** number of attempts, the first included (`maximumAttempts: 1`
///   never retries).
/// - Each attempt is a new operation from `makeAttempt`, given the attempt number (1, 2, …). It may be
///   any operation: a `RetryOperation<Void>` (or `<any Sendable>`) retries plain `AsyncOperation`s
///   and Foundation operations too, and succeeds with `()` (or the attempt's output). An operation
///   that is not fresh (returned twice, or held by a chain, a composite or a wait) fails the
///   retry with ``BatonError/alreadyEnqueued(operation:)`` (or the error that says why).
/// - `delay` waits between attempts; `shouldRetry` may stop early, given the error and the number of
///   the attempt that failed. Where the wait depends on the error (a server that says when to come
///   back), pass `decide` instead: it returns a ``RetryDecision`` for each failure.
/// - The outcome is the successful attempt's output, or the **last** attempt's error. An attempt that
///   was cancelled (not the retry) ends the retry cancelled.
/// - Cancelling the retry cancels the running attempt, or ends the wait between attempts at once.
/// - ``progress`` counts attempts made against `maximumAttempts`.
/// - A finished attempt is let go once the retry has moved on from it: the retry holds the running
///   attempt only, and nothing during the delay before the next one. Create it with `keepsFinishedChildren: true` to keep every attempt for
///   ``attemptsMade``.
public final class RetryOperation<Output: Sendable>: ResultOperation<Output>, ProgressReporting, @unchecked Sendable {
    /// Its `dependencies` are those added with `addDependency` (see `AsyncOperation.listsOnlyAddedDependencies`).
    override class var listsOnlyAddedDependencies: Bool { true }

    override class var recordsAsComposite: Bool { true }

    /// The total number of attempts allowed.
    public let maximumAttempts: Int
    /// After a failed attempt: whether to try again, and after how long.
    private let decide: @Sendable (any Error, Int) -> RetryDecision
    private let makeAttempt: @Sendable (Int) -> Operation
    private let queue = ChildQueue()
    private let attempts = Mutex(Attempts())

    private enum Phase {
        case attempting
        case waiting
        case done
    }

    /// Whether the retry keeps every attempt it made for ``attemptsMade``.
    public let keepsFinishedChildren: Bool

    private struct Attempts {
        /// The attempt running, until it has finished and the retry has moved on.
        var current: Operation?
        /// The record of the last attempt, when the retry is recorded: the next one's predecessor.
        var lastRecord: Int?
        /// Every attempt, when the retry keeps finished children.
        var made: [Operation] = []
        var count = 0
        /// Where the retry is: running an attempt, waiting before the next one, or done.
        var phase = Phase.attempting
        /// `didCancel()` ran: a failed attempt being handled now must not start a wait.
        var cancelRequested = false
        /// The timer of the wait before the next attempt: cancelled when the retry ends during the
        /// wait, so a long delay keeps nothing alive after the retry.
        var delay: Deadlines.Timer?
        var progress = ProgressCount()
    }

    /// Creates a retry of operations with an output.
    ///
    /// - Parameters:
    ///   - maximumAttempts: The total number of attempts, at least 1; otherwise the operation fails at
    ///     start with ``BatonError/invalidArgument(operation:reason:)``.
    ///   - delay: The wait between attempts. Default: ``RetryDelay/immediate``.
    ///   - shouldRetry: Whether to try again after `error` ended attempt number `attempt`. Default: always.
    ///   - keepsFinishedChildren: Whether ``attemptsMade`` keeps every attempt until the retry is
    ///     freed. Default: `false`, only the running attempt is held.
    ///   - makeAttempt: Makes the operation for attempt number `attempt` (1, 2, …); a new one each time.
    public convenience init(
        maximumAttempts: Int,
        delay: RetryDelay = .immediate,
        shouldRetry: @escaping @Sendable (_ error: any Error, _ attempt: Int) -> Bool = { _, _ in true },
        keepsFinishedChildren: Bool = false,
        makeAttempt: @escaping @Sendable (_ attempt: Int) -> ResultOperation<Output>
    ) {
        self.init(
            maximumAttempts: maximumAttempts, delay: delay, shouldRetry: shouldRetry,
            keepsFinishedChildren: keepsFinishedChildren, attempts: makeAttempt)
    }

    /// Creates a retry whose wait before each new attempt depends on the error that ended the last one
    /// (a server's `Retry-After`, say).
    ///
    /// ```swift
    /// let fetch = RetryOperation(maximumAttempts: 4, decide: { error, attempt in
    ///     (error as? Throttled).map { .retry(after: $0.retryAfter) } ?? .stop
    /// }) { _ in Fetch(url: url) }
    /// ```
    ///
    /// - Parameters:
    ///   - maximumAttempts: The total number of attempts, at least 1; otherwise the operation fails at
    ///     start with ``BatonError/invalidArgument(operation:reason:)``. It caps `decide`: after the
    ///     last attempt the retry ends whatever `decide` would say, and `decide` is not asked.
    ///   - keepsFinishedChildren: Whether ``attemptsMade`` keeps every attempt until the retry is
    ///     freed. Default: `false`, only the running attempt is held.
    ///   - decide: Given the error that ended attempt number `attempt`, retry after a wait (a negative
    ///     one counts as zero) or stop with that error.
    ///   - makeAttempt: Makes the operation for attempt number `attempt` (1, 2, …); a new one each time.
    public convenience init(
        maximumAttempts: Int,
        keepsFinishedChildren: Bool = false,
        decide: @escaping @Sendable (_ error: any Error, _ attempt: Int) -> RetryDecision,
        makeAttempt: @escaping @Sendable (_ attempt: Int) -> ResultOperation<Output>
    ) {
        self.init(
            maximumAttempts: maximumAttempts, keepsFinishedChildren: keepsFinishedChildren, decide: decide,
            attempts: makeAttempt)
    }

    convenience init(
        maximumAttempts: Int,
        delay: RetryDelay,
        shouldRetry: @escaping @Sendable (_ error: any Error, _ attempt: Int) -> Bool,
        keepsFinishedChildren: Bool,
        attempts makeAttempt: @escaping @Sendable (_ attempt: Int) -> Operation
    ) {
        self.init(
            maximumAttempts: maximumAttempts, keepsFinishedChildren: keepsFinishedChildren,
            decide: { error, attempt in
                shouldRetry(error, attempt) ? .retry(after: delay.delay(beforeAttempt: attempt + 1)) : .stop
            },
            attempts: makeAttempt)
    }

    init(
        maximumAttempts: Int,
        keepsFinishedChildren: Bool,
        decide: @escaping @Sendable (_ error: any Error, _ attempt: Int) -> RetryDecision,
        attempts makeAttempt: @escaping @Sendable (_ attempt: Int) -> Operation
    ) {
        self.maximumAttempts = maximumAttempts
        self.keepsFinishedChildren = keepsFinishedChildren
        self.decide = decide
        self.makeAttempt = makeAttempt
        super.init()
        cancelsChildrenAlongsideExecute()
        queue.owner = self
        self.attempts.withLock { $0.progress.total = Int64(max(maximumAttempts, 0)) }
    }

    deinit {
        Trampoline.dispose(
            attempts.withLock { attempts in
                defer { attempts = Attempts() }
                return attempts
            })
    }

    /// The number of attempts made so far: the number of the attempt running or last run.
    public var attemptCount: Int { attempts.withLock { $0.count } }

    /// The attempts the retry holds, in order: every attempt made so far when it keeps finished
    /// children; otherwise only the one running (none once the retry has ended).
    public var attemptsMade: [Operation] {
        let (made, current) = attempts.withLock { ($0.made, $0.current) }
        if keepsFinishedChildren { return made }
        return current.flatMap { $0.isFinished ? nil : [$0] } ?? []
    }

    /// Attempts made against the total allowed. Each read returns a new `Progress` made from one
    /// consistent count.
    public var progress: Progress { attempts.withLock { $0.progress }.snapshot() }

    /// Starts the first attempt.
    public override func execute() {
        launch(attempt: 1)
    }

    /// Cancels the running attempt, or ends the wait between attempts.
    public override func didCancel() {
        let (current, waiting) = attempts.withLock { attempts in
            attempts.cancelRequested = true
            return (attempts.current, attempts.phase == .waiting)
        }
        if waiting {
            end { $0.finish() }
        } else if let current, !current.isFinished {
            current.cancelHeld()
        }
    }

    override func preflightFailure(_ state: State) -> (any Error)? {
        if let failure = super.preflightFailure(state) { return failure }
        return maximumAttempts >= 1
            ? nil
            : BatonError.invalidArgument(
                operation: reference, reason: "maximumAttempts must be at least 1, got \(maximumAttempts)")
    }

    private func launch(attempt number: Int) {
        let operation = makeAttempt(number)
        do {
            try operation.claim()
        } catch {
            // The factory returned an operation that is not fresh (the same one twice, say).
            return end { $0.conclude(.failed(error)) }
        }
        // Whether the attempt goes ahead, and the record of the attempt before it.
        let (launched, previous) = attempts.withLock { attempts -> (Bool, Int?) in
            guard attempts.phase != .done else { return (false, nil) }
            attempts.phase = .attempting
            attempts.current = operation
            attempts.count = number
            if keepsFinishedChildren { attempts.made.append(operation) }
            attempts.progress.completed = Int64(number)
            return (true, attempts.lastRecord)
        }
        guard launched else { return operation.retire() }
        operation.observeCompletion { self.attemptFinished(operation, number: number) }
        if isCancelled { operation.cancelHeld() }
        if let recording {
            let record = recording.adopt(
                operation,
                FlightRecorder.Placement(
                    parent: recording.id, position: number - 1, predecessor: previous,
                    link: number > 1 ? .retry : nil, attempt: number))
            attempts.withLock { $0.lastRecord = record }
        }
        queue.launch(operation)
    }

    private enum AfterFailure { case wait, stop, endCancelled }

    private func attemptFinished(_ operation: Operation, number: Int) {
        switch operation.outcome(as: Output.self) {
        case .succeeded(let output):
            end { $0.conclude(.succeeded(output)) }
        case .cancelled:
            end { retry in
                retry.cancel()
                retry.finish()
            }
        case .failed(let error):
            guard !isCancelled, number < maximumAttempts, case .retry(let wait) = decide(error, number) else {
                return end { $0.conclude(.failed(error)) }
            }
            guard wait > .zero else { return launch(attempt: number + 1) }
            // One decision with `didCancel()`: a cancel that arrived while `decide` ran (or just
            // before) ends the retry now instead of serving the delay.
            let next: AfterFailure = attempts.withLock { attempts in
                guard attempts.phase != .done else { return .stop }
                if attempts.cancelRequested { return .endCancelled }
                attempts.phase = .waiting
                // The failed attempt is let go during the delay (it is in `made` when the retry keeps
                // finished children).
                attempts.current = nil
                return .wait
            }
            switch next {
            case .stop: return
            case .endCancelled: return end { $0.finish() }
            case .wait: break
            }
            let delay = Deadlines.after(wait) { [weak self] in
                guard let self else { return }
                let due = self.attempts.withLock { attempts -> Bool in
                    guard attempts.phase == .waiting else { return false }
                    attempts.delay = nil
                    return true
                }
                if due { self.launch(attempt: number + 1) }
            }
            // Kept for `end` to cancel, unless this wait is over already (the retry ended, or the
            // timer fired and the next attempt started).
            let kept = attempts.withLock { attempts -> Bool in
                guard attempts.phase == .waiting, attempts.count == number else { return false }
                attempts.delay = delay
                return true
            }
            if !kept { delay.cancel() }
        }
    }

    /// Ends the retry once, whichever of an attempt, a cancellation or a timer gets here first.
    private func end(_ finishing: (RetryOperation<Output>) -> Void) {
        let (first, last, delay) = attempts.withLock { attempts -> (Bool, Operation?, Deadlines.Timer?) in
            guard attempts.phase != .done else { return (false, nil, nil) }
            attempts.phase = .done
            defer {
                attempts.current = nil
                attempts.delay = nil
            }
            return (true, attempts.current, attempts.delay)
        }
        guard first else { return }
        delay?.cancel()
        finishing(self)
        // The last attempt is let go here, outside the lock (it may be a composite with work to free).
        withExtendedLifetime(last) {}
    }
}

extension RetryOperation where Output == Void {
    /// Creates a retry of any operations: plain `AsyncOperation`s, Foundation operations, or operations
    /// whose output the retry does not pass on. It succeeds with `()` when an attempt succeeds.
    ///
    /// ```swift
    /// let ping = RetryOperation<Void>(maximumAttempts: 3) { _ in
    ///     BlockOperation { print("ping") }
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - maximumAttempts: The total number of attempts, at least 1.
    ///   - delay: The wait between attempts. Default: ``RetryDelay/immediate``.
    ///   - shouldRetry: Whether to try again after `error` ended attempt number `attempt`. Default: always.
    ///   - keepsFinishedChildren: Whether ``attemptsMade`` keeps every attempt. Default: `false`.
    ///   - makeAttempt: Makes the operation for attempt number `attempt` (1, 2, …); a new one each time.
    public convenience init(
        maximumAttempts: Int,
        delay: RetryDelay = .immediate,
        shouldRetry: @escaping @Sendable (_ error: any Error, _ attempt: Int) -> Bool = { _, _ in true },
        keepsFinishedChildren: Bool = false,
        makeAttempt: @escaping @Sendable (_ attempt: Int) -> Operation
    ) {
        self.init(
            maximumAttempts: maximumAttempts, delay: delay, shouldRetry: shouldRetry,
            keepsFinishedChildren: keepsFinishedChildren, attempts: makeAttempt)
    }
}

extension RetryOperation where Output == Void {
    /// Creates a retry of any operations whose wait before each new attempt depends on the error that
    /// ended the last one; it succeeds with `()` when an attempt succeeds.
    ///
    /// - Parameters:
    ///   - maximumAttempts: The total number of attempts, at least 1.
    ///   - keepsFinishedChildren: Whether ``attemptsMade`` keeps every attempt. Default: `false`.
    ///   - decide: Given the error that ended attempt number `attempt`, retry after a wait or stop.
    ///   - makeAttempt: Makes the operation for attempt number `attempt` (1, 2, …); a new one each time.
    public convenience init(
        maximumAttempts: Int,
        keepsFinishedChildren: Bool = false,
        decide: @escaping @Sendable (_ error: any Error, _ attempt: Int) -> RetryDecision,
        makeAttempt: @escaping @Sendable (_ attempt: Int) -> Operation
    ) {
        self.init(
            maximumAttempts: maximumAttempts, keepsFinishedChildren: keepsFinishedChildren, decide: decide,
            attempts: makeAttempt)
    }
}

extension RetryOperation where Output == any Sendable {
    /// Creates a retry of any operations that succeeds with the successful attempt's output, or `()`
    /// when it has none.
    ///
    /// - Parameters:
    ///   - maximumAttempts: The total number of attempts, at least 1.
    ///   - delay: The wait between attempts. Default: ``RetryDelay/immediate``.
    ///   - shouldRetry: Whether to try again after `error` ended attempt number `attempt`. Default: always.
    ///   - keepsFinishedChildren: Whether ``attemptsMade`` keeps every attempt. Default: `false`.
    ///   - makeAttempt: Makes the operation for attempt number `attempt` (1, 2, …); a new one each time.
    public convenience init(
        maximumAttempts: Int,
        delay: RetryDelay = .immediate,
        shouldRetry: @escaping @Sendable (_ error: any Error, _ attempt: Int) -> Bool = { _, _ in true },
        keepsFinishedChildren: Bool = false,
        makeAttempt: @escaping @Sendable (_ attempt: Int) -> Operation
    ) {
        self.init(
            maximumAttempts: maximumAttempts, delay: delay, shouldRetry: shouldRetry,
            keepsFinishedChildren: keepsFinishedChildren, attempts: makeAttempt)
    }
}

/// What a ``RetryOperation`` does after an attempt failed.
public enum RetryDecision: Sendable, Hashable {
    /// Start a new attempt after `after` (at once for zero or less).
    case retry(after: Duration)
    /// Stop: the retry fails with the attempt's error.
    case stop
}
