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
public final class TreeNode<Input: Sendable, Output: Sendable>: @unchecked Sendable {
    /// The node's name, used in failure paths (`recipe[2]` is the third recipe's operation).
    public let name: String
    /// What the node does and where its outputs go: owned by the node's component, not by the node,
    /// so that the edges between nodes (which may form cycles) never decide which node lives.
    let core: Core
    /// The nodes joined to this one by `addChild`, kept alive together while any of them is held.
    private let component: TreeNodeComponent

    /// A node's state and behaviour. Cores refer to each other weakly; their component owns them.
    final class Core: @unchecked Sendable {
        let name: String
        let expand: @Sendable (Input) async throws -> [@Sendable () -> ResultOperation<Output>]
        let configuration = Mutex(Configuration())

        init(name: String, expand: @escaping @Sendable (Input) async throws -> [@Sendable () -> ResultOperation<Output>]) {
            self.name = name
            self.expand = expand
        }
    }

    struct Configuration {
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
    public convenience init<Item: Sendable>(
        _ name: String,
        items: @escaping @Sendable (Input) throws -> [Item],
        operation: @escaping @Sendable (Item) -> ResultOperation<Output>
    ) {
        self.init(name: name) { input in try items(input).map { item in { operation(item) } } }
    }

    /// Creates a node that maps its input to items asynchronously (for example with a network call).
    ///
    /// - Parameters:
    ///   - name: The node's name, for failure paths.
    ///   - asyncItems: Maps the parent's output to this node's items; an error it throws fails the node.
    ///   - operation: Makes the operation for one item (called again for each retry attempt).
    public convenience init<Item: Sendable>(
        _ name: String,
        asyncItems: @escaping @Sendable (Input) async throws -> [Item],
        operation: @escaping @Sendable (Item) -> ResultOperation<Output>
    ) {
        self.init(name: name) { input in try await asyncItems(input).map { item in { operation(item) } } }
    }

    private init(name: String, expand: @escaping @Sendable (Input) async throws -> [@Sendable () -> ResultOperation<Output>]) {
        self.name = name
        core = Core(name: name, expand: expand)
        component = TreeNodeComponent(owning: core)
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
    /// (directories in directories). Nodes joined by `addChild` live and die together: holding any
    /// one of them (or a ``TreeOperation`` made from one) keeps them all alive, whatever the order of
    /// the `addChild` calls, and a cycle of nodes that nobody holds is freed.
    ///
    /// - Parameter child: A node whose input is this node's output.
    public func addChild<ChildOutput>(_ child: TreeNode<Output, ChildOutput>) {
        TreeNodeComponent.join(component, child.component)
        core.configuration.withLock { $0.children.append(AnyTreeNode(child.core)) }
    }

    /// Runs each of this node's operations up to `maximumAttempts` times in all (through
    /// ``RetryOperation``).
    ///
    /// - Parameters:
    ///   - maximumAttempts: The total number of attempts per operation, at least 1.
    ///   - delay: The wait between attempts.
    public func retry(maximumAttempts: Int, delay: RetryDelay = .immediate) {
        core.configuration.withLock {
            $0.maximumAttempts = maximumAttempts
            $0.delay = delay
        }
    }

    /// Adds a closure called with the outcome of each of this node's operations as soon as it has
    /// finished, before its output goes to the child nodes.
    ///
    /// - Parameter observer: The closure; it runs on the thread that finished the operation.
    public func onFinish(_ observer: @escaping @Sendable (Outcome<Output>) -> Void) {
        core.configuration.withLock { $0.finishObservers.append(observer) }
    }

    /// Adds a closure called with the outcome of each of this node's operations once that operation
    /// **and everything below it** in the tree has finished (at once after the operation when it did
    /// not succeed: nothing runs below it then).
    ///
    /// - Parameter observer: The closure.
    public func onSubtreeFinish(_ observer: @escaping @Sendable (Outcome<Output>) -> Void) {
        core.configuration.withLock { $0.subtreeObservers.append(observer) }
    }

}

extension TreeNode.Core {
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
                    }, subtreeFinished: subtreeObservers.isEmpty ? nil : TreeNode.notifying(subtreeObservers))
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

/// A tree node seen through its input only, so that nodes of different outputs can be children. It
/// refers to the node's core weakly: the core's component owns it.
struct AnyTreeNode<Input: Sendable>: Sendable {
    let run: @Sendable (Input, [String], TreeRun.Scope, TreeRun) -> Void

    init<Output>(_ core: TreeNode<Input, Output>.Core) {
        let name = core.name
        run = { [weak core] input, path, scope, treeRun in
            // Cannot happen while a tree runs (it holds its root's component); a failure, never a crash.
            guard let core else {
                return treeRun.record(path: path + [name], error: BatonError.treeNodeFreed(node: name))
            }
            core.run(input, path: path, scope: scope, in: treeRun)
        }
    }
}

/// The tree nodes joined by `addChild`, owned together.
///
/// A node the user holds keeps its component, and the component keeps every node's core; cores refer
/// to each other only weakly. So no edge decides which node lives (in a cycle, any edge could be the
/// one that is not held), and a component that nobody holds is freed with every core in it, cycles
/// included. Joining two components moves the smaller one's cores into the larger and makes it point to
/// the larger (union by size): a node reaches its component's owner in a few steps, and nothing is ever
/// held in a loop.
final class TreeNodeComponent: @unchecked Sendable {
    /// Guards every component's fields: joins happen while trees are configured, never per operation.
    /// Its state counts the joins (a lock's state must not be empty: see `Mutex`).
    private static let lock = Mutex(0)
    private var cores: [AnyObject]
    private var mergedInto: TreeNodeComponent?

    init(owning core: AnyObject) {
        cores = [core]
    }

    /// The component that owns this one's cores now. Called with the lock held.
    private var owner: TreeNodeComponent {
        var component = self
        while let next = component.mergedInto { component = next }
        return component
    }

    static func join(_ first: TreeNodeComponent, _ second: TreeNodeComponent) {
        lock.withLock { joins in
            joins += 1
            let (one, other) = (first.owner, second.owner)
            guard one !== other else { return }
            let (larger, smaller) = one.cores.count >= other.cores.count ? (one, other) : (other, one)
            larger.cores += smaller.cores
            smaller.cores = []
            smaller.mergedInto = larger
        }
    }
}
