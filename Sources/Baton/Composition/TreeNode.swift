import Foundation

/// One level of an operation tree (DRBOperationTree's node and provider in one): it maps the output
/// of its parent to items, runs one operation per item, and sends each operation's output to its own
/// child nodes.
///
/// ```swift
/// let cookbook = TreeNode<String, [Int]>("cookbook") { id in FetchRecipeIDs(cookbook: id) }
/// let recipe = TreeNode<[Int], Recipe>("recipe", items: { ids in ids }) { id in FetchRecipe(id: id) }
/// let image = TreeNode<Recipe, Data>("image", items: { $0.imageURLs }) { url in Download(url) }
/// cookbook.addChild(recipe)
/// recipe.addChild(image)
/// let tree = TreeOperation(root: cookbook, input: "vegetables")
/// ```
///
/// Configure a node (children, callbacks, attempts) before its tree starts.
public final class TreeNode<Input: Sendable, Output: Sendable>: TreeNodeGraph, @unchecked Sendable {
    /// The node's name, used in failure paths (`recipe[2]` is the third recipe's operation).
    public let name: String
    private let expand: @Sendable (Input) async throws -> [@Sendable () -> ResultOperation<Output>]
    private let configuration = Mutex(Configuration())

    private struct Configuration {
        var children: [AnyTreeNode<Output>] = []
        var finishObservers: [@Sendable (Outcome<Output>) -> Void] = []
        var subtreeObservers: [@Sendable (Outcome<Output>) -> Void] = []
        var maximumAttempts = 1
        var delay = RetryDelay.immediate
    }

    /// Creates a node that maps its input to items synchronously.
    ///
    /// - Parameters:
    ///   - name: The node's name, for failure paths.
    ///   - items: Maps the parent's output to this node's items; an error it throws fails the node.
    ///   - operation: Makes the operation for one item (called again for each retry attempt).
    public init<Item: Sendable>(
        _ name: String,
        items: @escaping @Sendable (Input) throws -> [Item],
        operation: @escaping @Sendable (Item) -> ResultOperation<Output>
    ) {
        self.name = name
        expand = { input in try items(input).map { item in { operation(item) } } }
    }

    /// Creates a node that maps its input to items asynchronously (for example with a network call).
    ///
    /// - Parameters:
    ///   - name: The node's name, for failure paths.
    ///   - asyncItems: Maps the parent's output to this node's items; an error it throws fails the node.
    ///   - operation: Makes the operation for one item (called again for each retry attempt).
    public init<Item: Sendable>(
        _ name: String,
        asyncItems: @escaping @Sendable (Input) async throws -> [Item],
        operation: @escaping @Sendable (Item) -> ResultOperation<Output>
    ) {
        self.name = name
        expand = { input in try await asyncItems(input).map { item in { operation(item) } } }
    }

    /// Creates a node with one operation for its input.
    ///
    /// - Parameters:
    ///   - name: The node's name, for failure paths.
    ///   - operation: Makes the operation for the input (called again for each retry attempt).
    public convenience init(_ name: String, operation: @escaping @Sendable (Input) -> ResultOperation<Output>) {
        self.init(name, items: { [$0] }, operation: operation)
    }

    /// Adds a child node, which receives every output of this node's operations.
    ///
    /// Nodes may form cycles: a node whose output is also its input may be its own child, and nodes
    /// may recurse through each other (a → b → a); the tree then recurses as deep as the data goes
    /// (directories in directories). An edge that closes a cycle holds its node weakly, so a cycle
    /// of nodes does not keep itself alive; a ``TreeOperation`` holds every node it can reach while it
    /// lives. Keep a reference to the root of a cyclic graph until you have made its tree.
    ///
    /// - Parameter child: A node whose input is this node's output.
    public func addChild<ChildOutput>(_ child: TreeNode<Output, ChildOutput>) {
        let closesCycle = TreeNodeWalk.reaches(self, from: child)
        let entry = closesCycle ? AnyTreeNode(weak: child) : AnyTreeNode(child)
        configuration.withLock { $0.children.append(entry) }
    }

    var childNodes: [any TreeNodeGraph] {
        configuration.withLock { $0.children.compactMap { $0.node() } }
    }

    /// Runs each of this node's operations up to `maximumAttempts` times in all (through
    /// ``RetryOperation``).
    ///
    /// - Parameters:
    ///   - maximumAttempts: The total number of attempts per operation, at least 1.
    ///   - delay: The wait between attempts.
    public func retry(maximumAttempts: Int, delay: RetryDelay = .immediate) {
        configuration.withLock {
            $0.maximumAttempts = maximumAttempts
            $0.delay = delay
        }
    }

    /// Adds a closure called with the outcome of each of this node's operations as soon as it has
    /// finished, before its output goes to the child nodes.
    ///
    /// - Parameter observer: The closure; it runs on the thread that finished the operation.
    public func onFinish(_ observer: @escaping @Sendable (Outcome<Output>) -> Void) {
        configuration.withLock { $0.finishObservers.append(observer) }
    }

    /// Adds a closure called with the outcome of each of this node's operations once that operation
    /// **and everything below it** in the tree has finished (at once after the operation when it did
    /// not succeed: nothing runs below it then).
    ///
    /// - Parameter observer: The closure.
    public func onSubtreeFinish(_ observer: @escaping @Sendable (Outcome<Output>) -> Void) {
        configuration.withLock { $0.subtreeObservers.append(observer) }
    }

    /// Expands `input` into operations and launches them; `scope` is the subtree they belong to.
    func run(_ input: Input, path: [String], scope: TreeRun.Scope, in run: TreeRun) {
        run.retain(scope)
        let configuration = configuration.withLock { $0 }
        let expand = self.expand
        let name = self.name
        run.expand {
            defer { run.release(scope) }
            guard !run.isCancelled else { return }
            let makers: [@Sendable () -> ResultOperation<Output>]
            do {
                makers = try await expand(input)
            } catch {
                // A mapping cancelled with the tree is not a failure of its own.
                if !run.isCancelled { run.record(path: path + [name], error: error) }
                return
            }
            for (index, make) in makers.enumerated() {
                let itemPath = path + ["\(name)[\(index)]"]
                let operation: ResultOperation<Output> =
                    configuration.maximumAttempts == 1
                    ? make()
                    : RetryOperation(maximumAttempts: configuration.maximumAttempts, delay: configuration.delay) { _ in make() }
                let subtreeObservers = configuration.subtreeObservers
                run.launch(
                    operation, path: itemPath, parent: scope,
                    finished: { outcome, operationScope in
                        for observer in configuration.finishObservers { observer(outcome) }
                        guard case .succeeded(let output) = outcome else { return }
                        for child in configuration.children { child.run(output, itemPath, operationScope, run) }
                    }, subtreeFinished: subtreeObservers.isEmpty ? nil : Self.notifying(subtreeObservers))
            }
        }
    }
}

extension TreeNode {
    /// One callback that calls every observer in turn.
    static func notifying(_ observers: [@Sendable (Outcome<Output>) -> Void]) -> @Sendable (Outcome<Output>) -> Void {
        { outcome in for observer in observers { observer(outcome) } }
    }
}

/// A tree node seen through its input only, so that nodes of different outputs can be children.
struct AnyTreeNode<Input: Sendable>: Sendable {
    let run: @Sendable (Input, [String], TreeRun.Scope, TreeRun) -> Void
    /// The node, if it is still alive.
    let node: @Sendable () -> (any TreeNodeGraph)?

    init<Output>(_ node: TreeNode<Input, Output>) {
        run = { input, path, scope, treeRun in node.run(input, path: path, scope: scope, in: treeRun) }
        self.node = { node }
    }

    /// A node on an edge that closes a cycle: held weakly, so that the cycle does not keep itself
    /// alive. A node freed before its tree was made is reported as a failure, not skipped silently.
    init<Output>(weak node: TreeNode<Input, Output>) {
        let name = node.name
        run = { [weak node] input, path, scope, treeRun in
            guard let node else {
                return treeRun.record(path: path + [name], error: BatonError.treeNodeFreed(node: name))
            }
            node.run(input, path: path, scope: scope, in: treeRun)
        }
        self.node = { [weak node] in node }
    }
}

/// The nodes of a tree as a graph, to find cycles and to hold every node while a tree lives.
protocol TreeNodeGraph: AnyObject, Sendable {
    /// The child nodes that are alive.
    var childNodes: [any TreeNodeGraph] { get }
}

/// Walks of the node graph, without recursion.
enum TreeNodeWalk {
    /// Whether `target` can be reached from `start` (`start` itself included), walking without
    /// recursion.
    static func reaches(_ target: AnyObject, from start: any TreeNodeGraph) -> Bool {
        var seen = Set<ObjectIdentifier>()
        var stack: [any TreeNodeGraph] = [start]
        while let node = stack.popLast() {
            if node === target { return true }
            guard seen.insert(ObjectIdentifier(node)).inserted else { continue }
            stack.append(contentsOf: node.childNodes)
        }
        return false
    }

    /// Every node reachable from `root`, `root` included.
    static func reachable(from root: any TreeNodeGraph) -> [AnyObject] {
        var seen = Set<ObjectIdentifier>()
        var nodes = [AnyObject]()
        var stack: [any TreeNodeGraph] = [root]
        while let node = stack.popLast() {
            guard seen.insert(ObjectIdentifier(node)).inserted else { continue }
            nodes.append(node)
            stack.append(contentsOf: node.childNodes)
        }
        return nodes
    }
}
