import Foundation

/// Runs its children concurrently on an internal queue and finishes after all of them.
///
/// ```swift
/// let group = GroupOperation(operations: [resize, upload, notify], failurePolicy: .cancelSiblingsOnFailure)
/// queue.addOperation(group)
/// ```
///
/// - The group finishes after every child has finished, never before.
/// - Children's errors are collected (``errors``); if any child failed, the group fails with
///   ``BatonError/childrenFailed(group:errors:)``. A child that was cancelled on its own is not a failure.
/// - ``GroupFailurePolicy/cancelSiblingsOnFailure`` cancels the other children at the first failure.
/// - Cancelling the group cancels every child before `cancel()` returns, even while the group is still
///   launching them; the group then finishes cancelled once they have.
/// - Children can be added while the group runs (``addChild(_:)``). An empty group succeeds at once.
/// - ``suspend()`` stops the group from starting new children; ``resume()`` continues.
/// - ``progress`` counts the finished children (a composite child counts as one unit).
/// - **A finished child is let go** once ``childDidFinish(_:)`` has returned: a group of 10,000
///   children that each produce a megabyte holds only the children still running or waiting, not
///   every output. Read what you need from the child in ``childDidFinish(_:)``. To inspect the children
///   afterwards (in a test, say), create the group with `keepsFinishedChildren: true`.
/// - Cancelling the group also reaches children held back by ``suspend()``: it resumes the group so
///   that they finish cancelled; a child added after the group was cancelled finishes cancelled
///   without executing.
///
/// Subclass it (TWGOperations' style) to add children in `init` and to react to each child in
/// ``childDidFinish(_:)``. Groups and sequences nest in each other to any depth.
open class GroupOperation: AsyncOperation, ProgressReporting, @unchecked Sendable {
    override class var recordsAsComposite: Bool { true }

    let group: ChildGroup

    /// Creates a group.
    ///
    /// - Parameters:
    ///   - operations: The children. Each must be pending and appear once; otherwise the group fails
    ///     at start with the ``BatonError`` that names the child.
    ///   - failurePolicy: Whether a failure cancels the other children. Default: carry on.
    ///   - maxConcurrentOperationCount: How many children run at once: at least 1, or
    ///     `OperationQueue.defaultMaxConcurrentOperationCount` (the default: as many as the system
    ///     allows). Any other value fails the group at start with
    ///     ``BatonError/invalidArgument(operation:reason:)``.
    ///   - keepsFinishedChildren: Whether ``children`` keeps every child (and so its output) until the
    ///     group is freed. Default: `false`, a finished child is let go once ``childDidFinish(_:)``
    ///     has returned.
    public init(
        operations: [Operation] = [],
        failurePolicy: GroupFailurePolicy = .continueOnFailure,
        maxConcurrentOperationCount: Int = OperationQueue.defaultMaxConcurrentOperationCount,
        keepsFinishedChildren: Bool = false
    ) {
        group = ChildGroup(
            name: "GroupOperation", children: operations, failurePolicy: failurePolicy,
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
    public final var progress: Progress { group.progress }

    /// The children the group holds, in the order they were added: those that have not finished, or
    /// every child when the group was created with `keepsFinishedChildren: true`.
    public final var children: [Operation] { group.children }

    /// Whether the group keeps its finished children (see ``init(operations:failurePolicy:maxConcurrentOperationCount:keepsFinishedChildren:)``).
    public final var keepsFinishedChildren: Bool { group.keepsFinishedChildren }

    /// The errors of the children that failed, in the order they failed.
    public final var errors: [any Error] { group.errors }

    /// Adds a child. Before the group runs it waits its turn; while the group runs it starts at once.
    ///
    /// - Parameter child: A pending operation that is in no queue.
    /// - Throws: ``BatonError/alreadyFinished(operation:)`` when the group (or the child) has
    ///   finished, ``BatonError/duplicateOperation(operation:)`` when the child is already in the
    ///   group, ``BatonError/alreadyExecuting(operation:)`` when the child is executing,
    ///   ``BatonError/alreadyEnqueued(operation:)`` when a chain, another composite or a wait holds it.
    public final func addChild(_ child: Operation) throws(BatonError) {
        try group.add(child, owner: self)
    }

    /// Stops the group from starting more children (those running go on). Ignored once the group was
    /// cancelled.
    public final func suspend() { group.isSuspended = true }

    /// Lets the group start children again.
    public final func resume() { group.isSuspended = false }

    /// Whether the group is suspended.
    public final var isSuspended: Bool { group.isSuspended }

    /// Called once for each child, when it has finished and before the group counts it. Override it
    /// to react to children (the default does nothing); you may add children from here.
    ///
    /// This is where a child's output is consumed: once this returns, the group lets go of the child
    /// (unless it keeps finished children).
    ///
    /// - Parameter child: The child that finished; read its outcome from it.
    open func childDidFinish(_ child: Operation) {}

    /// Launches the children. Groups do not override `execute()`.
    public final override func execute() {
        if !group.start() { finish() }
    }

    /// Cancels every child.
    public final override func didCancel() {
        group.cancelAll()
    }

    override func takeUnlaunchedChildren() -> [Operation] {
        group.takeUnlaunched()
    }

    override func preflightFailure(_ state: State) -> (any Error)? {
        super.preflightFailure(state) ?? group.configurationError(of: self)
    }
}

extension GroupOperation: ChildGroupOwner {
    func childFinished(_ child: Operation, index: Int) {
        childDidFinish(child)
    }

    func allChildrenDidFinish(errors: [any Error]) {
        conclude(errors.isEmpty ? .succeeded(nil) : .failed(BatonError.childrenFailed(group: reference, errors: errors)))
    }
}
