import Foundation

/// A chain whose types the compiler checks: each step's `Output` is the next step's `Input`.
///
/// Build it from a first operation, add steps with ``then(_:)`` and inline transforms with
/// ``map(_:)``, then run it on a queue:
///
/// ```swift
/// let title = try await Chain(FetchRecipe(id: 7))     // ResultOperation<Data>
///     .then(ParseRecipe())                            // TransformOperation<Data, Recipe>
///     .map { recipe in recipe.title.uppercased() }    // Recipe -> String
///     .run(on: queue)
/// ```
///
/// A chain is a description: nothing runs until ``enqueue(on:)`` or ``run(on:)``, and each
/// operation can be enqueued once.
public struct Chain<Output> {
    /// The user operations, in order (adapters are added when the chain is enqueued).
    public let operations: [Operation]

    /// Starts a chain with the operation that runs first.
    ///
    /// - Parameter first: The first operation; its output feeds the next step.
    public init(_ first: ResultOperation<Output>) {
        operations = [first]
    }

    private init(operations: [Operation]) {
        self.operations = operations
    }

    /// Adds an operation that takes this chain's output as its input.
    ///
    /// - Parameter next: The next operation.
    /// - Returns: A chain that produces `next`'s output.
    public func then<Next>(_ next: TransformOperation<Output, Next>) -> Chain<Next> {
        Chain<Next>(operations: operations + [next])
    }

    /// Adds a step that transforms the output with a function. An error the function throws fails
    /// the chain.
    ///
    /// - Parameter transform: The function.
    /// - Returns: A chain that produces the function's value.
    public func map<Next>(_ transform: @escaping @Sendable (Output) throws -> Next) -> Chain<Next> {
        let step = TransformBlockOperation<Output, Next>(transform: transform)
        step.name = "map(\(Output.self) -> \(Next.self))"
        return then(step)
    }

    /// Enqueues the chain on `queue` and returns its handle.
    ///
    /// - Parameter queue: The queue that runs the operations and adapters.
    /// - Returns: The running chain.
    /// - Throws: ``BatonError`` when an operation is reused, already finished or executing, or would
    ///   close a dependency cycle; nothing is enqueued then.
    @discardableResult
    public func enqueue(on queue: OperationQueue) throws(BatonError) -> ChainHandle<Output> {
        try queue.enqueueChain(operations, adapter: .default) { last in
            guard let typed = last as? ResultOperation<Output> else { return .cancelled }
            return typed.result ?? .cancelled
        }
    }

    /// Enqueues the chain on `queue` and suspends until its final output is ready. Cancelling the
    /// awaiting task cancels the chain.
    ///
    /// - Parameter queue: The queue that runs the operations and adapters.
    /// - Returns: The last operation's output.
    /// - Throws: A ``BatonError`` if the chain cannot be enqueued, the chain's first error, or
    ///   `CancellationError` if it was cancelled.
    public func run(on queue: OperationQueue) async throws -> Output {
        try await enqueue(on: queue).value()
    }
}
