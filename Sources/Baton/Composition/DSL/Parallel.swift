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
    /// Its `dependencies` are those added with `addDependency` (see `AsyncOperation.listsOnlyAddedDependencies`).
    override class var listsOnlyAddedDependencies: Bool { true }

    override class var recordsAsComposite: Bool { true }

    let group: ChildGroup
    private let assemble: @Sendable (ChildOutcomes) throws -> Output
    /// The finished children's outcomes, by position.
    private let collected = Mutex<[ChildOutcomes.Entry?]>([])

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
        cancelsChildrenAlongsideExecute()
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
            for child in group.children { Handoff.give(input, to: child) }
        }
        if !group.start() { conclude(assembled(from: [])) }
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

    override func offerInput(_ value: any Sendable) -> InputOffer {
        // A group whose children take nothing ignores what it is given, as they would.
        Input.self == NoInput.self ? .taken : InputOffer(acceptInput(value, as: Input.self))
    }

    /// The output made from the children's outcomes, in order, or the error that says why it cannot be
    /// made.
    private func assembled(from outcomes: [ChildOutcomes.Entry?]) -> Outcome<(any Sendable)?> {
        do {
            return .succeeded(try assemble(ChildOutcomes(outcomes, of: reference)))
        } catch {
            return .failed(error)
        }
    }
}

extension Parallel: ChildGroupOwner {
    func childFinished(_ child: Operation, index: Int) {
        let finished = (reference: child.reference, outcome: child.observedOutcome)
        collected.withLock { outcomes in
            if index >= outcomes.count {
                outcomes.append(contentsOf: repeatElement(nil, count: index + 1 - outcomes.count))
            }
            outcomes[index] = finished
        }
    }

    func allChildrenDidFinish(errors: [any Error]) {
        // Handed over: from here on, this is the only copy of the children's outputs.
        let outcomes = collected.withLock { outcomes in
            defer { outcomes = [] }
            return outcomes
        }
        guard errors.isEmpty else {
            return conclude(.failed(BatonError.childrenFailed(group: reference, errors: errors)))
        }
        // A child cancelled on its own left the group without an output to give.
        guard !outcomes.contains(where: { $0?.outcome.isCancelled ?? false }) else {
            cancel()
            return finish()
        }
        conclude(assembled(from: outcomes))
    }
}
