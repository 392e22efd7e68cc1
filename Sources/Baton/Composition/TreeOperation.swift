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
///   with the other branches and then fails with ``BatonError/treeNodeFailed(path:underlying:)`` (one
///   failure) or ``BatonError/treeFailed(failures:)`` (several).
/// - Cancelling the tree cancels every operation in flight and skips what is not launched yet.
/// - ``progress`` counts the tree's operations (its total grows as the tree unfolds).
public final class TreeOperation<Input: Sendable>: AsyncOperation, ProgressReporting, @unchecked Sendable {
    private let root: AnyTreeNode<Input>
    private let input: Input
    private let run: TreeRun

    /// Creates a tree run.
    ///
    /// - Parameters:
    ///   - root: The top node; it receives `input`.
    ///   - input: What the root maps to its items.
    ///   - maxConcurrentOperationCount: How many of the tree's operations run at once. Default: as many
    ///     as the system allows.
    public init<Output>(
        root: TreeNode<Input, Output>,
        input: Input,
        maxConcurrentOperationCount: Int = OperationQueue.defaultMaxConcurrentOperationCount
    ) {
        self.root = AnyTreeNode(root)
        self.input = input
        run = TreeRun(maxConcurrentOperationCount: maxConcurrentOperationCount)
        super.init()
    }

    /// The tree's operations: launched so far against finished.
    public var progress: Progress { run.progress.progress }

    /// The failures recorded so far, each a ``BatonError/treeNodeFailed(path:underlying:)``.
    public var failures: [BatonError] { run.failures }

    /// Launches the root.
    public override func execute() {
        let whole = run.open(parent: nil) { [weak self] in self?.treeFinished() }
        root.run(input, [], whole, run)
        run.release(whole)
    }

    /// Cancels every operation in flight.
    public override func didCancel() {
        run.cancel()
    }

    private func treeFinished() {
        ProgressUpdates.flush()
        let failures = run.failures
        switch failures.count {
        case 0: finish()
        case 1: conclude(.failed(failures[0]))
        default: conclude(.failed(BatonError.treeFailed(failures: failures)))
        }
    }
}
