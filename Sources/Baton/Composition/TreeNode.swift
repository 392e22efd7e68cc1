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
        /// Maps an input to the node's items, each a way to make its operation, produced lazily.
        let expand: @Sendable (Input) async throws -> TreeItems
        let configuration = Mutex(Configuration())

        init(name: String, expand: @escaping @Sendable (Input) async throws -> TreeItems) {
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
        var window = TreeNode.defaultWindow
    }

    /// The default ``window``: enough operations in flight to keep any machine's cores busy, few
    /// enough that a listing of a million items costs the memory of 256 operations at a time.
    public static var defaultWindow: Int { 256 }

    /// Creates a node that maps its input to items synchronously.
    ///
    /// The items may be any sequence, and are produced lazily: the node takes the next item only when
    /// one of its operations in flight has finished (at most ``window`` at once), so a lazy sequence
    /// (`(0..<1_000_000).lazy.map { … }`, a directory stream) is never held whole. The sequence is
    /// never iterated from two threads at once, but may be iterated from any thread.
    ///
    /// - Parameters:
    ///   - name: The node's name, for failure paths.
    ///   - items: Maps the parent's output to this node's items; an error it throws fails the node.
    ///   - operation: Makes the operation for one item (called again for each retry attempt).
    public convenience init<Items: Sequence & SendableMetatype>(
        _ name: String,
        items: @escaping @Sendable (Input) throws -> Items,
        operation: @escaping @Sendable (Items.Element) -> ResultOperation<Output>
    ) where Items.Element: Sendable {
        self.init(name: name) { input in TreeItems(try items(input)) { item in operation(item) } }
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
        self.init(name: name) { input in TreeItems(try await asyncItems(input)) { item in operation(item) } }
    }

    init(name: String, expand: @escaping @Sendable (Input) async throws -> TreeItems) {
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
        self.init(name, items: { CollectionOfOne($0) }, operation: operation)
    }

    /// The most operations of this node in flight at once in one tree run (launched and not
    /// finished), whatever its fan-out: a node whose items are a million files keeps this many
    /// operations, not a million. Default: ``defaultWindow`` (256). Further items are made as earlier
    /// ones finish. A window below 1 fails the tree at start with
    /// ``BatonError/invalidArgument(operation:reason:)`` naming the node. Set it before the tree starts.
    public var window: Int {
        get { core.configuration.withLock { $0.window } }
        set { core.configuration.withLock { $0.window = newValue } }
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
    /// Expands `input` into items and launches their operations as the node's window allows; `scope`
    /// is the subtree they belong to.
    func run(_ input: Input, path: [String], scope: TreeRun.Scope, in run: TreeRun) {
        run.retain(scope)
        let configuration = configuration.withLock { $0 }
        let expand = self.expand
        let name = self.name
        let node = ObjectIdentifier(self)
        run.expand {
            guard !run.isCancelled else { return run.release(scope) }
            let items: TreeItems
            do {
                items = try await expand(input)
            } catch {
                // A mapping cancelled with the tree is not a failure of its own.
                if !run.isCancelled { run.record(path: path + [name], error: error) }
                return run.release(scope)
            }
            let subtreeFinished =
                configuration.subtreeObservers.isEmpty
                ? nil : TreeNode.notifying(configuration.subtreeObservers)
            let cursor = TreeRun.Cursor(node: node, window: configuration.window, items: items) { index, make, done in
                let itemPath = path + ["\(name)[\(index)]"]
                let operation: Operation =
                    configuration.maximumAttempts == 1
                    ? make()
                    : RetryOperation<Output>(
                        maximumAttempts: configuration.maximumAttempts, delay: configuration.delay,
                        shouldRetry: { _, _ in true }, keepsFinishedChildren: false, attempts: { _ in make() })
                run.launch(
                    operation, as: Output.self, path: itemPath, parent: scope,
                    finished: { outcome, operationScope in
                        for observer in configuration.finishObservers { observer(outcome) }
                        guard case .succeeded(let output) = outcome else { return }
                        for child in configuration.children { child.run(output, itemPath, operationScope, run) }
                    }, subtreeFinished: subtreeFinished, done: done)
            } ended: {
                run.release(scope)
            }
            run.drive(cursor)
        }
    }

    /// The first node of the graph below (and including) this one whose configuration is invalid,
    /// with the reason; each node is visited once.
    func problem(visited: inout Set<ObjectIdentifier>) -> String? {
        guard visited.insert(ObjectIdentifier(self)).inserted else { return nil }
        let (window, children) = configuration.withLock { ($0.window, $0.children) }
        if window < 1 { return "the window of tree node \"\(name)\" must be at least 1, got \(window)" }
        for child in children {
            if let problem = child.problem(&visited) { return problem }
        }
        return nil
    }
}

/// The items of one expansion of a node, each a way to make its operation, taken one at a time.
///
/// A sequence's iterator need not be thread-safe: a cursor is driven by one thread at a time (it is
/// handed over through the tree run's lock), so the iterator is never used from two at once.
struct TreeItems: @unchecked Sendable {
    /// The next item's maker, or `nil` when there are no more.
    let next: () -> (@Sendable () -> Operation)?

    init<Items: Sequence & SendableMetatype>(_ items: Items, operation: @escaping @Sendable (Items.Element) -> Operation)
    where Items.Element: Sendable {
        var iterator = items.makeIterator()
        next = {
            guard let item = iterator.next() else { return nil }
            return { operation(item) }
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
    /// The first invalid configuration in the graph from this node (see `Core.problem`).
    let problem: @Sendable (inout Set<ObjectIdentifier>) -> String?

    init<Output>(_ core: TreeNode<Input, Output>.Core) {
        let name = core.name
        problem = { [weak core] visited in core?.problem(visited: &visited) }
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

extension TreeNode where Output == Void {
    /// Creates a node whose operations may be any operation (a plain `AsyncOperation`, a
    /// `BlockOperation`); each child node receives `()` when an operation succeeds.
    ///
    /// ```swift
    /// let touch = TreeNode<[String], Void>("touch", items: { $0 }) { path in
    ///     BlockOperation { print("touched", path) }
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - name: The node's name, for failure paths.
    ///   - items: Maps the parent's output to this node's items, produced lazily (see
    ///     ``init(_:items:operation:)-(_,_,(Items.Element)->ResultOperation<Output>)``).
    ///   - operation: Makes the operation for one item (called again for each retry attempt).
    public convenience init<Items: Sequence & SendableMetatype>(
        _ name: String,
        items: @escaping @Sendable (Input) throws -> Items,
        operation: @escaping @Sendable (Items.Element) -> Operation
    ) where Items.Element: Sendable {
        self.init(name: name) { input in TreeItems(try items(input), operation: operation) }
    }

    /// Creates a node with one operation, of any kind, for its input; children receive `()`.
    ///
    /// - Parameters:
    ///   - name: The node's name, for failure paths.
    ///   - operation: Makes the operation for the input (called again for each retry attempt).
    public convenience init(_ name: String, operation: @escaping @Sendable (Input) -> Operation) {
        self.init(name, items: { CollectionOfOne($0) }, operation: operation)
    }
}

extension TreeNode where Output == any Sendable {
    /// Creates a node whose operations may be any operation; each child node receives the
    /// operation's output, or `()` when it has none.
    ///
    /// - Parameters:
    ///   - name: The node's name, for failure paths.
    ///   - items: Maps the parent's output to this node's items, produced lazily.
    ///   - operation: Makes the operation for one item (called again for each retry attempt).
    public convenience init<Items: Sequence & SendableMetatype>(
        _ name: String,
        items: @escaping @Sendable (Input) throws -> Items,
        operation: @escaping @Sendable (Items.Element) -> Operation
    ) where Items.Element: Sendable {
        self.init(name: name) { input in TreeItems(try items(input), operation: operation) }
    }

    /// Creates a node with one operation, of any kind, for its input; children receive its output
    /// (or `()`).
    ///
    /// - Parameters:
    ///   - name: The node's name, for failure paths.
    ///   - operation: Makes the operation for the input (called again for each retry attempt).
    public convenience init(_ name: String, operation: @escaping @Sendable (Input) -> Operation) {
        self.init(name, items: { CollectionOfOne($0) }, operation: operation)
    }
}
