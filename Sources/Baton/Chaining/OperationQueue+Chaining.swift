import Foundation

extension OperationQueue {
    /// Runs operations one after another, with an adapter between each neighbouring pair, and returns
    /// a handle on the running chain.
    ///
    /// The default adapter forwards cancellation (the next operation is cancelled, never executed),
    /// failure (the next operation fails with the same error, never executed, unless its policy is
    /// ``DependencyPolicy/runRegardless``) and output (into the next ``TransformOperation/input``).
    /// Plain Foundation operations take part too: the chain sees them finish through their
    /// completion block, and cancellation reaches them.
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
    /// linear in its length on Linux; the adapter runs on the thread that finished the operation before
    /// it. The handle lets go of each operation once it has been handed on; for chains too long to
    /// build as an array, make each operation as the chain goes with ``addChain(first:adapter:next:)``.
    ///
    /// - Parameters:
    ///   - operations: The operations, in the order they run.
    ///   - adapter: What runs between neighbours; ``ChainAdapter/default`` unless you need your own.
    /// - Returns: The running chain. Its output is the last operation's output (`()` for an operation
    ///   without one).
    /// - Throws: ``BatonError`` and enqueues nothing when an operation appears twice, already belongs
    ///   to a chain, is executing or finished, or when its existing dependencies would close a cycle.
    @discardableResult
    public func addChain(
        _ operations: [Operation], adapter: ChainAdapter = .default
    ) throws(BatonError) -> ChainHandle<any Sendable> {
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
    /// The chain lets go of its operations once they are enqueued (the handle holds those still
    /// ahead), so a chain is enqueued once: enqueuing it again is refused.
    ///
    /// - Throws: ``BatonError`` and enqueues nothing, as the array form, and
    ///   ``BatonError/alreadyEnqueued(operation:)`` for a chain enqueued already.
    @discardableResult
    public func addChain<Output>(
        _ chain: Chain<Output>, adapter: ChainAdapter = .default
    ) throws(BatonError) -> ChainHandle<Output> {
        try chain.enqueue(on: self, adapter: adapter) { last in
            (last as? ResultOperation<Output>)?.outcome ?? .cancelled
        }
    }

    /// Runs a chain whose operations are made as it goes: `next` is given each operation that has
    /// succeeded and returns the one to run after it, or `nil` to end the chain there. The handle holds
    /// only the operation running, so a chain of a million steps needs the memory of one.
    ///
    /// ```swift
    /// let handle = try queue.addChain(first: FetchPage(number: 1)) { previous in
    ///     guard let page = (previous as? FetchPage)?.output, let next = page.next else { return nil }
    ///     return FetchPage(number: next)
    /// }
    /// ```
    ///
    /// Outputs flow as in any chain (the adapter passes each output to the next input). A failure or a
    /// cancellation ends the chain there, with that outcome (`next` is not asked); ``ChainHandle/cancel()``
    /// cancels the running operation and stops the chain from making more.
    ///
    /// - Parameters:
    ///   - first: The first operation.
    ///   - adapter: What runs between neighbours; ``ChainAdapter/default`` unless you need your own.
    ///   - next: Makes the next operation; it runs on the thread that finished the one before. An
    ///     operation it returns that is not fresh (finished, executing, or held by another chain, a
    ///     composite or a wait) fails the chain with the ``BatonError`` that says why.
    /// - Returns: The running chain. Its output is the last operation's output.
    /// - Throws: ``BatonError`` and enqueues nothing when `first` is not fresh.
    @discardableResult
    public func addChain(
        first: Operation,
        adapter: ChainAdapter = .default,
        next: @escaping @Sendable (_ previous: Operation) -> Operation?
    ) throws(BatonError) -> ChainHandle<any Sendable> {
        try ChainValidation.validateAndClaim([first])
        let handle = ChainHandle<any Sendable>(source: .generator(next), adapter: adapter, queue: self, first: first) {
            last in
            (last?.observedOutcome ?? .succeeded(nil)).map { $0 ?? () }
        }
        handle.launch(first: first)
        return handle
    }

    /// Validates, claims and launches a chain whose outcome `extract` reads from its last operation.
    func enqueueChain<Output>(
        _ operations: [Operation],
        adapter: ChainAdapter,
        extract: @escaping @Sendable (Operation?) -> Outcome<Output>
    ) throws(BatonError) -> ChainHandle<Output> {
        try ChainValidation.validateAndClaim(operations)
        var rest = operations.map(Optional.some)
        let first = rest.isEmpty ? nil : rest[0]
        if !rest.isEmpty { rest[0] = nil }
        let handle = ChainHandle(
            source: .list(rest, next: 1), adapter: adapter, queue: self, first: first, extract: extract)
        handle.launch(first: first)
        return handle
    }
}
