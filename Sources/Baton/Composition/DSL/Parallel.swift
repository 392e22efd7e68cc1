import Foundation

/// A group written as a block of children that run concurrently (CompositeOperations' transaction),
/// whose output is the tuple of its children's outputs, in the order they are written.
///
/// ```swift
/// let sizes = Parallel {
///     MeasureFile(path: "a.txt")          // -> Int
///     for path in ["b.txt", "c.txt"] {    // -> [Int]
///         MeasureFile(path: path)
///     }
/// }
/// let (a, others) = try sizes.run(timeout: .seconds(5))
/// ```
///
/// It behaves as ``ResultGroupOperation`` does: it finishes after all its children; it fails with
/// ``BatonError/childrenFailed(group:errors:)`` when a child failed (with
/// ``GroupFailurePolicy/cancelSiblingsOnFailure``, the others are cancelled at the first failure), and
/// finishes cancelled when a child was cancelled, since it then has no output to give; cancelling it
/// cancels every child. Its children that take an input (``TransformOperation``s, cascades that start
/// with one) each receive the group's `Input`: in a ``Cascade``, the step before it's output.
public final class Parallel<Input: Sendable, Output: Sendable>: ResultOperation<Output>, ProgressReporting,
    @unchecked Sendable
{
    let group: ChildGroup
    private let assemble: @Sendable (ChildOutcomes) throws -> Output
    /// The finished children's outcomes by position, and whether one finished without an output.
    private let collected = Mutex(Collected())

    private struct Collected {
        var outcomes: [(reference: OperationReference, outcome: Outcome<(any Sendable)?>)?] = []
        var cancelled = false
    }

    /// Creates a group of the children its body writes.
    ///
    /// - Parameters:
    ///   - input: The input each child that takes one receives, or `nil` (the default) when the step
    ///     before it in an enclosing cascade gives it, or no child takes one.
    ///   - failurePolicy: Whether a failure cancels the other children. Default: carry on.
    ///   - maxConcurrentOperationCount: How many children run at once: at least 1, or
    ///     `OperationQueue.defaultMaxConcurrentOperationCount` (the default). Any other value fails
    ///     the group at start with ``BatonError/invalidArgument(operation:reason:)``.
    ///   - children: The children; their outputs make the group's output, in this order.
    public init(
        input: Input? = nil, failurePolicy: GroupFailurePolicy = .continueOnFailure,
        maxConcurrentOperationCount: Int = OperationQueue.defaultMaxConcurrentOperationCount,
        @ParallelBuilder _ children: () -> FlowPart<Input, Output>
    ) {
        let part = children()
        assemble = part.assemble
        group = ChildGroup(
            name: "Parallel", children: part.operations, failurePolicy: failurePolicy,
            maxConcurrentOperationCount: maxConcurrentOperationCount, keepsFinishedChildren: false)
        super.init()
        group.owner = self
        if let input { storeInput(input) }
    }

    /// The input its children that take one receive: set it before the group starts (an enclosing
    /// cascade sets it from the step before).
    public var input: Input? {
        get { storedInput(as: Input.self) }
        set { storeInput(newValue) }
    }

    /// The children's progress: one unit per child, done when the child has finished. Each read
    /// returns a new `Progress` made from one consistent count.
    public var progress: Progress { group.progress }

    /// The children that have not finished yet, in the order they were written.
    public var children: [Operation] { group.children }

    /// The errors of the children that failed, in the order they failed.
    public var errors: [any Error] { group.errors }

    /// Gives the input to the children that take one, then launches every child.
    public override func execute() {
        if Input.self != NoInput.self, let input {
            for child in group.children {
                guard let receiver = child as? InputAccepting, let mismatch = receiver.acceptInput(input) else {
                    continue
                }
                (child as? AsyncOperation)?.finish(throwing: mismatch)
            }
        }
        if !group.start() { conclude(assembled()) }
    }

    /// Cancels every child.
    public override func didCancel() {
        group.cancelAll()
    }

    override func takeUnlaunchedChildren() -> [Operation] {
        group.takeUnlaunched()
    }

    override func preflightFailure(_ state: State) -> (any Error)? {
        super.preflightFailure(state) ?? group.configurationError(of: self)
    }

    /// The output made from every child's outcome, or the error that says why it cannot be made.
    private func assembled() -> Outcome<(any Sendable)?> {
        let outcomes = collected.withLock { collected in
            defer { collected = Collected() }
            return collected.outcomes.compactMap { $0 }
        }
        do {
            return .succeeded(try assemble(ChildOutcomes(outcomes)))
        } catch {
            return .failed(error)
        }
    }
}

extension Parallel: InputAccepting {
    func acceptInput(_ value: any Sendable) -> BatonError? {
        // A group whose children take nothing ignores what it is given, as they would.
        Input.self == NoInput.self ? nil : acceptInput(value, as: Input.self)
    }
}

extension Parallel: ChildGroupOwner {
    func childFinished(_ child: Operation, index: Int) {
        let outcome = child.observedOutcome
        let reference = child.reference
        collected.withLock { collected in
            if case .cancelled = outcome { collected.cancelled = true }
            if index >= collected.outcomes.count {
                collected.outcomes.append(contentsOf: repeatElement(nil, count: index + 1 - collected.outcomes.count))
            }
            collected.outcomes[index] = (reference, outcome)
        }
    }

    func allChildrenDidFinish(errors: [any Error]) {
        let cancelled = collected.withLock { $0.cancelled }
        guard errors.isEmpty else {
            collected.withLock { $0 = Collected() }
            return conclude(.failed(BatonError.childrenFailed(group: reference, errors: errors)))
        }
        guard !cancelled else {
            collected.withLock { $0 = Collected() }
            cancel()
            return finish()
        }
        conclude(assembled())
    }
}
