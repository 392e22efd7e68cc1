import Foundation

/// A group whose children produce outputs of one type: it succeeds with their outputs **in the order
/// the children were given**, whatever order they finished in.
///
/// ```swift
/// let sizes = ResultGroupOperation(operations: urls.map { MeasureFile(url: $0) })
/// queue.addOperation(sizes)
/// sizes.waitUntilFinished()
/// print(sizes.output!)   // sizes in the order of `urls`
/// ```
///
/// It behaves as ``GroupOperation`` does (failure policy, cancellation, children added while it runs,
/// suspension, progress). It fails with ``BatonError/childrenFailed(group:errors:)`` when a child
/// failed, and finishes cancelled when a child was cancelled, since it then has no output to give.
///
/// It keeps only what its output needs: each child's output is taken as the child finishes, and the
/// child is let go (unless `keepsFinishedChildren`).
public final class ResultGroupOperation<Element: Sendable>: ResultOperation<[Element]>, ProgressReporting, @unchecked Sendable {
    /// Its `dependencies` are those added with `addDependency` (see `AsyncOperation.listsOnlyAddedDependencies`).
    override class var listsOnlyAddedDependencies: Bool { true }

    override class var recordsAsComposite: Bool { true }

    let group: ChildGroup
    /// The finished children's outputs by position, and whether a child finished without one.
    private let collected = Mutex(Collected())

    private struct Collected {
        var outputs: [Element?] = []
        var missingOutput = false
    }

    /// Creates a typed group.
    ///
    /// - Parameters:
    ///   - operations: The children; their outputs become the group's output, in this order.
    ///   - failurePolicy: Whether a failure cancels the other children. Default: carry on.
    ///   - maxConcurrentOperationCount: How many children run at once: at least 1, or
    ///     `OperationQueue.defaultMaxConcurrentOperationCount` (the default: as many as the system
    ///     allows). Any other value fails the group at start with
    ///     ``BatonError/invalidArgument(operation:reason:)``.
    ///   - keepsFinishedChildren: Whether ``children`` keeps every child until the group is freed.
    ///     Default: `false`, a finished child is let go once its output is taken.
    public init(
        operations: [ResultOperation<Element>] = [],
        failurePolicy: GroupFailurePolicy = .continueOnFailure,
        maxConcurrentOperationCount: Int = OperationQueue.defaultMaxConcurrentOperationCount,
        keepsFinishedChildren: Bool = false
    ) {
        group = ChildGroup(
            name: "ResultGroupOperation", children: operations, failurePolicy: failurePolicy,
            maxConcurrentOperationCount: maxConcurrentOperationCount,
            keepsFinishedChildren: keepsFinishedChildren)
        super.init()
        cancelsChildrenAlongsideExecute()
        group.owner = self
    }

    /// The children's progress: one unit per child, done when the child has finished.
    ///
    /// Each read returns a new `Progress` made from one consistent count (Linux's `Progress` is not
    /// thread-safe, so Baton never hands out an object it is still updating). Read it again for news.
    public var progress: Progress { group.progress }

    /// The children the group holds, in the order they were added (which is the order of the output):
    /// those that have not finished, or every child when the group was created with
    /// `keepsFinishedChildren: true`.
    public var children: [ResultOperation<Element>] {
        group.children.compactMap { $0 as? ResultOperation<Element> }
    }

    /// Whether the group keeps its finished children.
    public var keepsFinishedChildren: Bool { group.keepsFinishedChildren }

    /// The errors of the children that failed, in the order they failed.
    public var errors: [any Error] { group.errors }

    /// Adds a child; its output goes after those of the children added before it.
    ///
    /// - Parameter child: A pending operation that is in no queue.
    /// - Throws: The same errors as ``GroupOperation/addChild(_:)``.
    public func addChild(_ child: ResultOperation<Element>) throws(BatonError) {
        try group.add(child, owner: self)
    }

    /// Stops the group from starting more children (those running go on).
    public func suspend() { group.isSuspended = true }

    /// Lets the group start children again.
    public func resume() { group.isSuspended = false }

    /// Whether the group is suspended.
    public var isSuspended: Bool { group.isSuspended }

    /// Launches the children.
    public override func execute() {
        if !group.start() { finish(with: []) }
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
}

extension ResultGroupOperation: ChildGroupOwner {
    func childFinished(_ child: Operation, index: Int) {
        let output = (child as? ResultOperation<Element>)?.output
        collected.withLock { collected in
            guard let output else {
                collected.missingOutput = true
                return
            }
            if index >= collected.outputs.count {
                collected.outputs.append(contentsOf: repeatElement(nil, count: index + 1 - collected.outputs.count))
            }
            collected.outputs[index] = output
        }
    }

    func allChildrenDidFinish(errors: [any Error]) {
        guard errors.isEmpty else {
            collected.withLock { $0 = Collected() }
            return conclude(.failed(BatonError.childrenFailed(group: reference, errors: errors)))
        }
        // Handed over: the group's output is now the only copy.
        let taken = collected.withLock { collected in
            defer { collected = Collected() }
            return collected
        }
        let outputs = taken.outputs.compactMap { $0 }
        guard !taken.missingOutput, outputs.count == taken.outputs.count else {
            cancel()
            return finish()
        }
        conclude(.succeeded(outputs))
    }
}
