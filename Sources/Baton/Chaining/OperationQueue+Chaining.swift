import Foundation

extension OperationQueue {
    /// Runs operations one after another: inserts an adapter between each neighbouring pair, wires
    /// the dependencies, enqueues, and returns a handle on the running chain.
    ///
    /// The default adapter forwards cancellation (the next operation is cancelled, never executed),
    /// failure (the next operation fails with the same error, never executed, unless its policy is
    /// ``DependencyPolicy/runRegardless``) and output (into the next ``TransformOperation/input``).
    /// Plain Foundation operations take part through dependencies and cancellation.
    ///
    /// ```swift
    /// let queue = OperationQueue()
    /// let handle = try queue.addChain([FetchRecipe(id: 7), ParseRecipe(), SaveRecipe()])
    /// try handle.wait(timeout: .seconds(10))
    /// ```
    ///
    /// The array may mix types, so the handle's output is `any Sendable`; to have it typed, build a
    /// ``Chain`` and pass that instead.
    ///
    /// A one-element array is enqueued as it is; an empty one gives a handle that has already
    /// succeeded. Operations are enqueued one at a time as the chain advances, so the chain stays
    /// linear in its length on Linux; adapters run on the thread that finished the operation before
    /// them. The call returns once every dependency is wired (the first operations may already run).
    ///
    /// - Parameters:
    ///   - operations: The operations, in the order they run.
    ///   - adapter: What runs between neighbours; ``ChainAdapter/default`` unless you need your own.
    /// - Returns: The running chain. Its output is the last operation's output (`()` for an operation
    ///   without one).
    /// - Throws: ``BatonError`` and enqueues nothing when an operation appears twice, already belongs
    ///   to a chain, is executing or finished, or when its existing dependencies would close a cycle.
    @discardableResult
    public func addChain(_ operations: [Operation], adapter: ChainAdapter = .default) throws(BatonError) -> ChainHandle<any Sendable> {
        try enqueueChain(operations, adapter: adapter) { last in
            (last?.observedOutcome ?? .succeeded(nil)).map { $0 ?? () }
        }
    }

    /// Runs a typed ``Chain``: the same as the array form, with a handle whose output has the
    /// chain's type.
    ///
    /// ```swift
    /// let handle = try queue.addChain(Chain(FetchRecipe(id: 7)).then(ParseRecipe()))
    /// let recipe = try handle.wait(timeout: .seconds(10))   // a Recipe, no cast
    /// ```
    ///
    /// - Parameters:
    ///   - chain: The chain.
    ///   - adapter: What runs between neighbours; ``ChainAdapter/default`` unless you need your own.
    /// - Returns: The running chain, typed by its last operation's output.
    /// - Throws: ``BatonError`` and enqueues nothing, as the array form.
    @discardableResult
    public func addChain<Output>(_ chain: Chain<Output>, adapter: ChainAdapter = .default) throws(BatonError) -> ChainHandle<Output> {
        try enqueueChain(chain.operations, adapter: adapter) { last in
            (last as? ResultOperation<Output>)?.outcome ?? .cancelled
        }
    }

    /// Validates, builds and launches a chain whose outcome `extract` reads from its last operation.
    func enqueueChain<Output>(
        _ operations: [Operation],
        adapter: ChainAdapter,
        extract: @escaping @Sendable (Operation?) -> Outcome<Output>
    ) throws(BatonError) -> ChainHandle<Output> {
        try ChainValidation.validateAndClaim(operations)
        let handle = ChainHandle(operations: operations, adapter: adapter, queue: self, extract: extract)
        handle.launch()
        return handle
    }
}
