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
/// is the last child's output (`Output` must match it, or be `Void`).
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
/// running child. ``progress`` counts finished children. Sequences and groups nest to any depth.
open class SequenceOperation<Output>: ResultOperation<Output>, ProgressReporting, @unchecked Sendable {
    private enum Source {
        case list([Operation])
        case generator(first: Operation, next: @Sendable (Operation) -> Operation?)
    }

    private struct Steps {
        var launched: [Operation] = []
        var listIndex = 0
        var current: Operation?
        var isSuspended = false
        /// A step that is due while the sequence is suspended: the next operation and the one before.
        var due: (next: Operation, upstream: Operation?)?
        var isDone = false
    }

    private let source: Source
    private let adapter: ChainAdapter
    private let queue = OperationQueue()
    private let steps = Mutex(Steps())
    private let serializedProgress = SerializedProgress()
    private let configurationError: BatonError?

    /// Creates a sequence of the given operations.
    ///
    /// - Parameters:
    ///   - operations: The children, in the order they run. Each must be pending and appear once;
    ///     otherwise the sequence fails at start with the ``BatonError`` that names the child.
    ///   - adapter: What passes between neighbours; ``ChainAdapter/default`` forwards outputs into inputs.
    public init(operations: [Operation], adapter: ChainAdapter = .default) {
        source = .list(operations)
        self.adapter = adapter
        var seen = Set<ObjectIdentifier>()
        var problem: BatonError?
        for operation in operations where problem == nil {
            if !seen.insert(ObjectIdentifier(operation)).inserted { problem = .duplicateOperation(operation: operation.batonName) }
            else if operation.isFinished { problem = .alreadyFinished(operation: operation.batonName) }
            else if operation.isExecuting { problem = .alreadyExecuting(operation: operation.batonName) }
        }
        configurationError = problem
        super.init()
        for operation in operations { serializedProgress.addChild(operation) }
    }

    /// Creates a sequence whose next step is made from the previous operation once it has succeeded.
    ///
    /// - Parameters:
    ///   - first: The first operation.
    ///   - adapter: What passes between neighbours; ``ChainAdapter/default`` forwards outputs into inputs.
    ///   - next: Given the operation that just succeeded, returns the next one, or `nil` to end the
    ///     sequence with that operation's output. It runs on the thread that finished the operation.
    public init(first: Operation, adapter: ChainAdapter = .default, next: @escaping @Sendable (Operation) -> Operation?) {
        source = .generator(first: first, next: next)
        self.adapter = adapter
        configurationError = first.isFinished ? .alreadyFinished(operation: first.batonName) : nil
        super.init()
    }

    /// The children's progress: one unit per child (for a generator, per child made so far).
    public final var progress: Progress { serializedProgress.progress }

    /// The children started so far, in order.
    public final var children: [Operation] { steps.withLock { $0.launched } }

    /// The outcome of each child that has finished, in order (`()` for children without an output).
    public final var results: [Outcome<Any>] {
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
            defer { steps.due = nil }
            return steps.due
        }
        if let due { proceed(to: due.next, after: due.upstream) }
    }

    /// Whether the sequence is suspended.
    public final var isSuspended: Bool { steps.withLock { $0.isSuspended } }

    /// Starts the first child. Sequences do not override `execute()`.
    public final override func execute() {
        advance(after: nil)
    }

    /// Cancels the running child; the sequence finishes cancelled once it has.
    public final override func didCancel() {
        let current = steps.withLock { $0.current }
        if let current, !current.isFinished {
            current.cancel()
        } else {
            stop(.cancelled)
        }
    }

    override func didFinishWithoutExecuting() {
        switch source {
        case .list(let operations): operations.forEach { $0.cancelAndRetire() }
        case .generator(let first, _): first.cancelAndRetire()
        }
    }

    override func preflightFailure(_ state: State) -> (any Error)? {
        configurationError
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
            serializedProgress.childFinished(finished)
            switch finished.observedOutcome {
            case .failed(let error): return stop(.failed(error))
            case .cancelled: return stop(.cancelled)
            case .succeeded: break
            }
        }
        if isCancelled { return stop(.cancelled) }
        guard let next = nextOperation(after: finished) else { return stop(.succeeded(last: finished)) }
        proceed(to: next, after: finished)
    }

    private func nextOperation(after finished: Operation?) -> Operation? {
        switch source {
        case .list(let operations):
            return steps.withLock { steps -> Operation? in
                guard steps.listIndex < operations.count else { return nil }
                defer { steps.listIndex += 1 }
                return operations[steps.listIndex]
            }
        case .generator(let first, let next):
            guard let finished else { return first }
            guard let made = next(finished) else { return nil }
            serializedProgress.addChild(made)
            return made
        }
    }

    private func proceed(to next: Operation, after upstream: Operation?) {
        let launch = steps.withLock { steps -> Bool in
            guard !steps.isDone else { return false }
            if steps.isSuspended {
                steps.due = (next, upstream)
                return false
            }
            steps.current = next
            steps.launched.append(next)
            return true
        }
        guard launch else { return }
        if let upstream { Handoff.pass(from: upstream, to: next, adapter: adapter) }
        next.observeCompletion { self.advance(after: next) }
        queue.launch(next)
    }

    private func stop(_ ending: Ending) {
        let unrun: [Operation]? = steps.withLock { steps in
            guard !steps.isDone else { return nil }
            steps.isDone = true
            steps.current = nil
            var unrun = [Operation]()
            if case .list(let operations) = source, steps.listIndex < operations.count {
                unrun = Array(operations[steps.listIndex...])
                steps.listIndex = operations.count
            }
            if let due = steps.due { unrun.append(due.next) }
            steps.due = nil
            return unrun
        }
        guard let unrun else { return }
        for operation in unrun { operation.cancelAndRetire() }
        ProgressUpdates.flush()
        switch ending {
        case .failed(let error):
            conclude(.failed(error))
        case .cancelled:
            cancel()
            finish()
        case .succeeded(let last):
            guard let value = last?.observedOutcome.output ?? nil else { return finish() }
            if let output = value as? Output {
                conclude(.succeeded(output))
            } else if Output.self == Void.self {
                finish()
            } else {
                conclude(.failed(BatonError.outputTypeMismatch(
                    operation: batonName, expected: String(describing: Output.self), actual: String(describing: type(of: value)))))
            }
        }
    }
}
