import Foundation

/// Runs a tree of ``TreeNode``s from an input, and finishes once the whole tree has (DRBOperationTree).
///
/// ```swift
/// let tree = TreeOperation(root: cookbook, input: "vegetables")
/// queue.addOperation(tree)
/// tree.waitUntilFinished()
/// ```
///
/// - Each operation's output goes to every child node of its node; children start as soon as their
///   parent operation has succeeded, siblings run in parallel (level by level down each branch).
/// - Nothing fails silently: a node whose operation failed, whose item mapping threw, or whose operation
///   was cancelled on its own is recorded with its path (`["recipe[2]", "image[0]"]`). The tree goes on
///   with the other branches and then fails with ``BatonError/treeNodeFailed(path:operation:underlying:)`` (one
///   failure) or ``BatonError/treeFailed(failures:)`` (several).
/// - Cancelling the tree cancels every operation in flight and every item mapping that is running
///   (its task is cancelled), and skips what is not launched yet.
/// - ``progress`` counts the tree's operations (its total grows as the tree unfolds).
/// - Memory is bounded by the nodes' windows, not by their fan-out: each node has at most
///   ``TreeNode/window`` operations in flight and makes the next as one finishes, taking its items
///   lazily from the sequence its mapping returned.
public final class TreeOperation<Input: Sendable>: AsyncOperation, ProgressReporting, @unchecked Sendable {
    /// Its `dependencies` are those added with `addDependency` (see `AsyncOperation.listsOnlyAddedDependencies`).
    override class var listsOnlyAddedDependencies: Bool { true }

    override class var recordsAsComposite: Bool { true }

    private let root: AnyTreeNode<Input>
    private let input: Input
    private let run: TreeRun
    /// The root node: it keeps every node joined to it alive while the tree lives.
    private let rootNode: AnyObject
    private let concurrencyProblem: String?

    /// Creates a tree run.
    ///
    /// - Parameters:
    ///   - root: The top node; it receives `input`.
    ///   - input: What the root maps to its items.
    ///   - maxConcurrentOperationCount: How many of the tree's operations run at once: at least 1, or
    ///     `OperationQueue.defaultMaxConcurrentOperationCount` (the default: as many as the system
    ///     allows). Any other value fails the tree at start with
    ///     ``BatonError/invalidArgument(operation:reason:)``.
    public init<Output>(
        root: TreeNode<Input, Output>,
        input: Input,
        maxConcurrentOperationCount: Int = OperationQueue.defaultMaxConcurrentOperationCount
    ) {
        self.root = AnyTreeNode(root.core)
        self.input = input
        rootNode = root
        concurrencyProblem = ChildGroup.problem(maxConcurrentOperationCount: maxConcurrentOperationCount)
        run = TreeRun(maxConcurrentOperationCount: maxConcurrentOperationCount, valid: concurrencyProblem == nil)
        super.init()
        cancelsChildrenAlongsideExecute()
        run.queue.owner = self
    }

    /// The tree's operations: launched so far against finished. Each read returns a new `Progress`
    /// made from one consistent count.
    public var progress: Progress { run.progress }

    /// The failures recorded so far, each a ``BatonError/treeNodeFailed(path:operation:underlying:)``.
    public var failures: [BatonError] { run.failures }

    /// Launches the root.
    public override func execute() {
        if let recording { run.record(into: recording) }
        let whole = run.open(parent: nil) { [weak self] in self?.treeFinished() }
        root.run(input, [], whole, run)
        run.release(whole)
    }

    /// Cancels every operation in flight, and every item mapping still running.
    public override func didCancel() {
        run.cancel()
    }

    override func preflightFailure(_ state: State) -> (any Error)? {
        if let failure = super.preflightFailure(state) { return failure }
        var visited = Set<ObjectIdentifier>()
        return (concurrencyProblem ?? root.problem(&visited)).map {
            BatonError.invalidArgument(operation: reference, reason: $0)
        }
    }

    private func treeFinished() {
        let failures = run.failures
        switch failures.count {
        case 0: finish()
        case 1: conclude(.failed(failures[0]))
        default: conclude(.failed(BatonError.treeFailed(failures: failures)))
        }
    }
}
