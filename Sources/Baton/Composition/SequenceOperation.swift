import Foundation

/// Runs its children strictly one after another, passing each one's output to the next (a cascade).
///
/// ```swift
/// let recipe = SequenceOperation<Recipe>(operations: [FetchRecipe(id: 7), ParseRecipe()])
/// queue.addOperation(recipe)
/// ```
///
/// Between two children the sequence does what a chain's adapter does (``ChainAdapter``):
/// cancellation, the error and the output flow on. The sequence stops at the first child that fails
/// or is cancelled, and finishes the same way; the children it never ran finish cancelled. Its output
/// is the last child's output (`Output` must match it, or be `Void`; typed `any Sendable`, a sequence
/// whose last child has no output succeeds with `()`, as a chain does).
///
/// The generator form makes each next step from the one before, or ends with `nil`:
///
/// ```swift
/// let pages = SequenceOperation<Page>(first: FetchPage(number: 1)) { previous in
///     guard let page = (previous as? FetchPage)?.output, let next = page.next else { return nil }
///     return FetchPage(number: next)
/// }
/// ```
///
/// ``suspend()`` holds the next child back; ``resume()`` starts it. Cancelling the sequence cancels the
/// running child (a suspended sequence finishes cancelled at once); every step it took but did not
/// run finishes cancelled. ``progress`` counts finished children. Sequences and groups nest to any
/// depth.
///
/// **A finished child is let go** once its output has been handed to the next one: a sequence of
/// 100,000 steps holds the steps not taken yet and the one running, not every step it ran. To inspect
/// the children afterwards (``children``, ``childOutcomes``), create it with
/// `keepsFinishedChildren: true`.
open class SequenceOperation<Output: Sendable>: ResultOperation<Output>, ProgressReporting, @unchecked Sendable {
    override class var recordsAsComposite: Bool { true }

    private enum Source {
        case list
        case generator(next: @Sendable (Operation) -> Operation?)
    }

    private struct Steps {
        /// The list form's steps not taken yet (the generator form's first step), in order.
        var untaken: [Operation?] = []
        var nextUntaken = 0
        /// Every child launched, in order, when the sequence keeps finished children.
        var launched: [Operation] = []
        var current: Operation?
        var isSuspended = false
        /// A step that is due while the sequence is suspended: the next operation and the one before.
        var due: (next: Operation, upstream: Operation?)?
        var isDone = false
        /// A thread is between taking (or making) the next step and launching it.
        var isAdvancing = false
        /// Set when the sequence stopped while a thread was advancing: that thread retires the step it
        /// holds and reports here, so the sequence finishes after that step too.
        var ending: Countdown?
        var progress = ProgressCount()
        /// The sequence's record, read when it starts executing, and how many steps it launched.
        var recording: Recording?
        var launchedCount = 0

        /// Takes the next untaken step.
        mutating func takeNext() -> Operation? {
            guard nextUntaken < untaken.count else { return nil }
            defer {
                untaken[nextUntaken] = nil
                nextUntaken += 1
            }
            return untaken[nextUntaken]
        }

        /// Stops the sequence: what it took, or will never take, and has not run must be retired.
        mutating func stop() -> [Operation]? {
            guard !isDone else { return nil }
            isDone = true
            current = nil
            var unrun = untaken[nextUntaken...].compactMap { $0 }
            untaken = []
            nextUntaken = 0
            if let due { unrun.append(due.next) }
            due = nil
            return unrun
        }
    }

    private let source: Source
    private let adapter: ChainAdapter
    private let queue = ChildQueue()
    private let steps: Mutex<Steps>
    private let configurationError: BatonError?

    /// Whether the sequence keeps its finished children for ``children`` and ``childOutcomes``.
    public let keepsFinishedChildren: Bool

    /// Creates a sequence of the given operations.
    ///
    /// - Parameters:
    ///   - operations: The children, in the order they run. Each must be pending, appear once, and be
    ///     held by no chain, composite or wait; otherwise the sequence fails at start with the
    ///     ``BatonError`` that names the child.
    ///   - adapter: What passes between neighbours; ``ChainAdapter/default`` forwards outputs into inputs.
    ///   - keepsFinishedChildren: Whether the sequence keeps every child it ran (and so its output)
    ///     until it is freed. Default: `false`, a finished child is let go once handed on.
    public init(operations: [Operation], adapter: ChainAdapter = .default, keepsFinishedChildren: Bool = false) {
        source = .list
        self.adapter = adapter
        self.keepsFinishedChildren = keepsFinishedChildren
        // Every operation this sequence could claim is its own: it runs them, or, when the sequence
        // fails at start (a duplicate, an operation held elsewhere), it retires them.
        var problem: BatonError?
        var seen = Set<ObjectIdentifier>()
        var claimed = [Operation?]()
        claimed.reserveCapacity(operations.count)
        for operation in operations {
            guard seen.insert(ObjectIdentifier(operation)).inserted else {
                problem = problem ?? .duplicateOperation(operation: operation.reference)
                continue
            }
            do {
                try operation.claim()
                claimed.append(operation)
            } catch {
                problem = problem ?? error
            }
        }
        configurationError = problem
        var steps = Steps()
        steps.untaken = claimed
        steps.progress.total = Int64(operations.count)
        self.steps = Mutex(steps)
        super.init()
        cancelsChildrenAlongsideExecute()
        queue.owner = self
    }

    /// Creates a sequence whose next step is made from the previous operation once it has succeeded.
    ///
    /// - Parameters:
    ///   - first: The first operation.
    ///   - adapter: What passes between neighbours; ``ChainAdapter/default`` forwards outputs into inputs.
    ///   - next: Given the operation that just succeeded, returns the next one, or `nil` to end the
    ///     sequence with that operation's output. It runs on the thread that finished the operation.
    ///     A step it returns that a chain, composite or wait already holds fails the sequence with
    ///     ``BatonError/alreadyEnqueued(operation:)``.
    ///   - keepsFinishedChildren: Whether the sequence keeps every child it ran until it is freed.
    ///     Default: `false`, a finished child is let go once handed on.
    public init(
        first: Operation, adapter: ChainAdapter = .default, keepsFinishedChildren: Bool = false,
        next: @escaping @Sendable (Operation) -> Operation?
    ) {
        source = .generator(next: next)
        self.adapter = adapter
        self.keepsFinishedChildren = keepsFinishedChildren
        var problem: BatonError?
        do { try first.claim() } catch { problem = error }
        configurationError = problem
        var steps = Steps()
        steps.untaken = problem == nil ? [first] : []
        steps.progress.total = 1
        self.steps = Mutex(steps)
        super.init()
        cancelsChildrenAlongsideExecute()
        queue.owner = self
    }

    deinit {
        // Freed without running them: they are free for another owner again.
        for operation in steps.withLock({ $0.untaken.compactMap { $0 } + ($0.due.map { [$0.next] } ?? []) }) {
            operation.unclaim()
        }
        // Steps may be composites holding their own children: release them in a loop. The steps are
        // handed over as the only reference.
        Trampoline.dispose(
            steps.withLock { steps in
                defer { steps = Steps() }
                return steps
            })
    }

    /// The children's progress: one unit per child (for a generator, per child made so far), done
    /// when the child has finished. Each read returns a new `Progress` made from one consistent count.
    public final var progress: Progress { steps.withLock { $0.progress }.snapshot() }

    /// The children the sequence holds: every child started so far, in order, when it keeps finished
    /// children; otherwise only the one running (none between steps and after the end).
    public final var children: [Operation] {
        let (launched, current) = steps.withLock { ($0.launched, $0.current) }
        if keepsFinishedChildren { return launched }
        return current.flatMap { $0.isFinished ? nil : [$0] } ?? []
    }

    /// The outcome of each child the sequence holds that has finished, in order (`()` for children
    /// without an output): every child's, when it keeps finished children; otherwise none.
    public final var childOutcomes: [Outcome<any Sendable>] {
        children.filter(\.isFinished).map { $0.observedOutcome.map { $0 ?? () } }
    }

    /// Holds the next child back until ``resume()``; the running child goes on.
    public final func suspend() {
        steps.withLock { $0.isSuspended = true }
    }

    /// Starts the child that is due, if any, and lets the sequence go on.
    public final func resume() {
        let due = steps.withLock { steps -> (next: Operation, upstream: Operation?)? in
            steps.isSuspended = false
            guard let due = steps.due, !steps.isDone else { return nil }
            steps.due = nil
            steps.isAdvancing = true
            return due
        }
        if let due { proceed(to: due.next, after: due.upstream) }
    }

    /// Whether the sequence is suspended.
    public final var isSuspended: Bool { steps.withLock { $0.isSuspended } }

    /// Starts the first child. Sequences do not override `execute()`.
    public final override func execute() {
        if let recording { steps.withLock { $0.recording = recording } }
        advance(after: nil)
    }

    /// Cancels the running child; the sequence finishes cancelled once it has.
    public final override func didCancel() {
        let current = steps.withLock { $0.current }
        if let current, !current.isFinished {
            current.cancelHeld()
        } else {
            stop(.cancelled)
        }
    }

    override func takeUnlaunchedChildren() -> [Operation] {
        steps.withLock { $0.stop() } ?? []
    }

    override func preflightFailure(_ state: State) -> (any Error)? {
        if let failure = super.preflightFailure(state) ?? configurationError { return failure }
        guard adapter.operationFactory == nil else {
            return BatonError.invalidArgument(
                operation: reference,
                reason: "adapter operations run between the operations of a chain, not of a sequence")
        }
        return nil
    }

    // MARK: - Stepping

    private enum Ending {
        case succeeded(last: Operation?)
        case failed(any Error)
        case cancelled
    }

    /// Called when the sequence starts (`finished == nil`) and after each child.
    private func advance(after finished: Operation?) {
        if let finished {
            steps.withLock { $0.progress.completed += 1 }
            // A recovering adapter is given failures and cancellations too: the sequence goes on to it.
            if !adapter.seesEveryOutcome {
                let outcome = finished.observedSharedOutcome
                switch outcome.kind {
                case .failed: return stop(.failed(outcome.error!))
                case .cancelled: return stop(.cancelled)
                case .succeeded: break
                }
            }
        }
        if isCancelled { return stop(.cancelled) }
        // Taking the next step and launching it is one advance: a stop meanwhile is completed by this
        // thread (see `proceed`), so the sequence never finishes before a step it took.
        let taken: (stopped: Bool, step: Operation?) = steps.withLock { steps in
            guard !steps.isDone else { return (true, nil) }
            steps.isAdvancing = true
            return (false, steps.takeNext())
        }
        if taken.stopped { return }
        var next = taken.step
        var refusal: BatonError?
        if next == nil, case .generator(let makeNext) = source, let finished, finished.observedSharedOutcome.isSuccess,
            let made = makeNext(finished)
        {
            do {
                try made.claim()
                next = made
                steps.withLock { $0.progress.total += 1 }
            } catch {
                refusal = error
            }
        }
        proceed(to: next, after: finished, refusal: refusal)
    }

    private enum StepDecision {
        case launch(Operation, position: Int, recording: Recording?)
        case park
        /// The sequence stopped while this thread advanced: retire the step, then report to `ending`.
        case retire(Operation?, ending: Countdown?)
        /// The advance ended the sequence: retire these, then finish through the countdown.
        case stopped(StopPlan)
    }

    /// What a stop must retire, and the countdown that finishes the sequence after them.
    private struct StopPlan {
        let unrun: [Operation]
        let countdown: Countdown
    }

    /// Stops the sequence (under the lock): every step it took or will never take and has not run is
    /// retired, and the sequence finishes once they all have. A thread still advancing holds a step:
    /// it reports once it has retired that step, as one more event.
    private func planStop(_ steps: inout Steps, _ ending: Ending, alsoRetiring extra: Operation?) -> StopPlan? {
        guard var unrun = steps.stop() else { return nil }
        if let extra { unrun.append(extra) }
        let ended = UncheckedSendable(value: ending)
        let countdown = Countdown(events: unrun.count + (steps.isAdvancing ? 1 : 0)) { self.end(ended.value) }
        if steps.isAdvancing { steps.ending = countdown }
        return StopPlan(unrun: unrun, countdown: countdown)
    }

    private func carryOut(_ plan: StopPlan) {
        Operation.retire(plan.unrun, reportingTo: plan.countdown)
        plan.countdown.tick()
    }

    /// Ends an advance: launches `next`, parks it while the sequence is suspended, or — when the
    /// sequence stopped, was cancelled, or has no next step — stops or retires. One decision under the
    /// lock, so a step is launched, parked or retired, never dropped, and the sequence finishes after it.
    private func proceed(to next: Operation?, after upstream: Operation?, refusal: BatonError? = nil) {
        let cancelled = isCancelled
        let decision: StepDecision? = steps.withLock { steps in
            steps.isAdvancing = false
            if steps.isDone {
                defer { steps.ending = nil }
                return .retire(next, ending: steps.ending)
            }
            if cancelled { return planStop(&steps, .cancelled, alsoRetiring: next).map(StepDecision.stopped) }
            if let refusal { return planStop(&steps, .failed(refusal), alsoRetiring: nil).map(StepDecision.stopped) }
            guard let next else {
                return planStop(&steps, Self.ending(after: upstream), alsoRetiring: nil).map(StepDecision.stopped)
            }
            if steps.isSuspended {
                steps.due = (next, upstream)
                return .park
            }
            steps.current = next
            if keepsFinishedChildren { steps.launched.append(next) }
            steps.launchedCount += 1
            return .launch(next, position: steps.launchedCount - 1, recording: steps.recording)
        }
        switch decision {
        case nil, .park?:
            break
        case .launch(let next, let position, let recording)?:
            if let upstream {
                Handoff.pass(from: upstream, to: next, adapter: adapter)
            } else {
                feed(firstStep: next)
            }
            // Recorded first: a Foundation step's record is finished before the sequence hears of it.
            if let recording {
                recording.adopt(next, position: position, after: upstream, link: upstream == nil ? nil : .step)
            }
            next.observeCompletion { self.advance(after: next) }
            // On the worker that ran the step before, once its start returns, when it can (see
            // `Relay`); through the queue otherwise.
            Relay.launch(next, on: queue)
        case .retire(let step, let ending)?:
            switch (step, ending) {
            case (let step?, let ending?): Operation.retire([step], reportingTo: ending)
            case (let step?, nil): step.retire()
            case (nil, let ending?): ending.tick()
            case (nil, nil): break
            }
        case .stopped(let plan)?:
            carryOut(plan)
        }
    }

    /// Gives the first step what the sequence itself was given: nothing here; a ``Cascade`` passes
    /// on its input.
    func feed(firstStep: Operation) {}

    /// How the sequence ends after its last step (which, with a recovering adapter, may have failed).
    private static func ending(after last: Operation?) -> Ending {
        switch last?.observedOutcome {
        case .failed(let error)?: return .failed(error)
        case .cancelled?: return .cancelled
        case .succeeded?, nil: return .succeeded(last: last)
        }
    }

    private func stop(_ ending: Ending) {
        if let plan = steps.withLock({ planStop(&$0, ending, alsoRetiring: nil) }) { carryOut(plan) }
    }

    private func end(_ ending: Ending) {
        switch ending {
        case .failed(let error):
            conclude(.failed(error))
        case .cancelled:
            cancel()
            finish()
        case .succeeded(let last):
            if Output.self == Void.self { return finish() }
            guard let last else { return conclude(.failed(BatonError.emptySequence(operation: reference))) }
            guard let value = last.observedOutcome.output ?? nil else {
                // A sequence of mixed steps typed `any Sendable` ends as a chain of them does: with
                // `()` when its last step has no output.
                if ObjectIdentifier(Output.self) == ObjectIdentifier((any Sendable).self),
                    let unit = (() as any Sendable) as? Output
                {
                    return conclude(.succeeded(unit))
                }
                return conclude(
                    .failed(
                        BatonError.outputTypeMismatch(
                            operation: reference, expected: String(describing: Output.self),
                            actual: "no output (from \(last.batonName))")))
            }
            if let output = value as? Output {
                conclude(.succeeded(output))
            } else {
                conclude(
                    .failed(
                        BatonError.outputTypeMismatch(
                            operation: reference, expected: String(describing: Output.self),
                            actual: String(describing: type(of: value)))))
            }
        }
    }
}
