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
/// A chain is a description: nothing runs until you give it to
/// ``Foundation/OperationQueue/addChain(_:adapter:)-(Chain<Output>,_)`` (which returns a typed
/// ``ChainHandle``) or call ``run(on:)``; each operation can be enqueued once.
public struct Chain<Output: Sendable> {
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

    /// Runs the chain on `queue` and blocks the calling thread until it has finished, for tests and
    /// scripts.
    ///
    /// - Parameters:
    ///   - queue: The queue that runs the operations. Default: a new queue of its own.
    ///   - timeout: The longest wait; the chain is cancelled when it runs out (it is yours).
    /// - Returns: The last operation's output.
    /// - Throws: A ``BatonError`` if the chain cannot be enqueued (nothing is) or time runs out, the
    ///   chain's first error, or `CancellationError` if it was cancelled.
    @available(*, noasync, message: "use 'try await run(on:)' in async code")
    @discardableResult
    public func run(on queue: OperationQueue = OperationQueue(), timeout: Duration) throws -> Output {
        // Every argument is checked before anything is enqueued.
        if let first = operations.first {
            if let reason = queue.deadlockReason(blocking: true) {
                throw BatonError.wouldDeadlock(operation: first.reference, reason: reason)
            }
            if timeout < .zero {
                throw BatonError.invalidArgument(
                    operation: first.reference, reason: "a wait's timeout must not be negative, got \(timeout)")
            }
        }
        let handle = try queue.addChain(self)
        do {
            return try handle.wait(timeout: timeout)
        } catch let error as BatonError {
            if case .timedOut = error { handle.cancel() }
            throw error
        }
    }

    /// Runs the chain on `queue` and suspends until its final output is ready. Cancelling the
    /// awaiting task cancels the chain.
    ///
    /// - Parameter queue: The queue that runs the operations. Default: a new queue of its own.
    /// - Returns: The last operation's output.
    /// - Throws: A ``BatonError`` if the chain cannot be enqueued (nothing is), the chain's first
    ///   error, or `CancellationError` if it was cancelled.
    @discardableResult
    public func run(on queue: OperationQueue = OperationQueue()) async throws -> Output {
        if let first = operations.first, let reason = queue.deadlockReason(blocking: false) {
            throw BatonError.wouldDeadlock(operation: first.reference, reason: reason)
        }
        return try await queue.addChain(self).waitSuspending(cancellingOnTaskCancellation: true).get()
    }
}
