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
public struct Chain<Output: Sendable>: Sendable {
    private let steps: ChainSteps

    /// The user operations, in order (adapters are added when the chain is enqueued); empty once the
    /// chain has been enqueued: it lets go of them then, and its handle holds only those still ahead.
    public var operations: [Operation] {
        steps.operations
    }

    /// Starts a chain with the operation that runs first.
    ///
    /// - Parameter first: The first operation; its output feeds the next step.
    public init(_ first: ResultOperation<Output>) {
        steps = ChainSteps([first])
    }

    private init(steps: ChainSteps) {
        self.steps = steps
    }

    /// Adds an operation that takes this chain's output as its input.
    ///
    /// - Parameter next: The next operation.
    /// - Returns: A chain that produces `next`'s output.
    public func then<Next>(_ next: TransformOperation<Output, Next>) -> Chain<Next> {
        Chain<Next>(steps: steps.appending(next))
    }

    /// Takes the operations out to enqueue them; a chain enqueued already is refused.
    /// Enqueues the chain's operations on `queue` and lets go of them; a chain enqueued already is
    /// refused with ``BatonError/alreadyEnqueued(operation:)``, and one that could not be enqueued
    /// keeps them.
    func enqueue<Handled>(
        on queue: OperationQueue, adapter: ChainAdapter,
        extract: @escaping @Sendable (Operation?) -> Outcome<Handled>
    ) throws(BatonError) -> ChainHandle<Handled> {
        let operations = try steps.take()
        do {
            return try queue.enqueueChain(operations, adapter: adapter, extract: extract)
        } catch {
            steps.restore(operations)
            throw error
        }
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
        try runForOutcome(on: queue, timeout: timeout).get()
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
        try await launch(on: queue).waitSuspending(cancellingOnTaskCancellation: true).orCancelled().get()
    }

    /// Runs the chain on `queue`, blocks until it has finished, and returns how it ended: the
    /// chain's first failure, its cancellation, or the last operation's output, as an outcome.
    ///
    /// ```swift
    /// switch try Chain(download).then(parse).runForOutcome(timeout: .seconds(10)) {
    /// case .succeeded(let recipe): print(recipe)
    /// case .failed(let error): print("failed: \(error)")
    /// case .cancelled: print("cancelled")
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - queue: The queue that runs the operations. Default: a new queue of its own.
    ///   - timeout: The longest wait; the chain is cancelled when it runs out (it is yours).
    /// - Returns: The chain's outcome.
    /// - Throws: Only for the wait itself: a ``BatonError`` if the chain cannot be enqueued (nothing
    ///   is), would deadlock, or time runs out.
    @available(*, noasync, message: "use 'try await runForOutcome(on:)' in async code")
    @discardableResult
    public func runForOutcome(
        on queue: OperationQueue = OperationQueue(), timeout: Duration
    ) throws(BatonError) -> Outcome<Output> {
        // Every argument is checked before anything is enqueued.
        if let first = steps.operations.first {
            if let reason = queue.deadlockReason(blocking: true) {
                throw .wouldDeadlock(operation: first.reference, reason: reason)
            }
            if let (step, reason) = AsyncOperation.categoryDeadlock(among: steps.operations, on: queue, blocking: true) {
                throw .wouldDeadlock(operation: step.reference, reason: reason)
            }
            if timeout < .zero {
                throw .invalidArgument(
                    operation: first.reference, reason: "a wait's timeout must not be negative, got \(timeout)")
            }
        }
        let handle = try queue.addChain(self)
        do {
            return try handle.waitBlocking(timeout: timeout)
        } catch {
            if case .timedOut = error { handle.cancel() }
            throw error
        }
    }

    /// Runs the chain on `queue`, suspends until it has finished, and returns how it ended.
    /// Cancelling the awaiting task cancels the chain and ends the wait with `CancellationError`.
    ///
    /// - Parameter queue: The queue that runs the operations. Default: a new queue of its own.
    /// - Returns: The chain's outcome.
    /// - Throws: `CancellationError` when the awaiting task was cancelled, or a ``BatonError`` if the
    ///   chain cannot be enqueued (nothing is) or would deadlock.
    @discardableResult
    public func runForOutcome(on queue: OperationQueue = OperationQueue()) async throws -> Outcome<Output> {
        try await launch(on: queue).waitSuspending(cancellingOnTaskCancellation: true).orThrow()
    }

    /// Enqueues the chain for an `async` run, after the deadlock check.
    private func launch(on queue: OperationQueue) throws(BatonError) -> ChainHandle<Output> {
        if let first = steps.operations.first, let reason = queue.deadlockReason(blocking: false) {
            throw .wouldDeadlock(operation: first.reference, reason: reason)
        }
        if let (step, reason) = AsyncOperation.categoryDeadlock(among: steps.operations, on: queue, blocking: false) {
            throw .wouldDeadlock(operation: step.reference, reason: reason)
        }
        return try queue.addChain(self)
    }
}

/// A chain's operations, shared by the copies of one ``Chain`` value and taken out once, when the
/// chain is enqueued: a wait on the running chain then holds none of them.
final class ChainSteps: Sendable {
    /// The operations, or `nil` once taken.
    private let state: Mutex<[Operation]?>
    /// The first operation, named when an enqueued chain is enqueued again.
    private let first: OperationReference

    init(_ operations: [Operation]) {
        state = Mutex(operations)
        first = operations[0].reference
    }

    private init(taken first: OperationReference) {
        state = Mutex(nil)
        self.first = first
    }

    var operations: [Operation] {
        state.withLock { $0 ?? [] }
    }

    /// A new set of steps with `next` at the end (taken too, when these were).
    func appending(_ next: Operation) -> ChainSteps {
        guard let operations = state.withLock({ $0 }) else { return ChainSteps(taken: first) }
        return ChainSteps(operations + [next])
    }

    func take() throws(BatonError) -> [Operation] {
        let taken = state.withLock { operations -> [Operation]? in
            defer { operations = nil }
            return operations
        }
        guard let taken else { throw .alreadyEnqueued(operation: first) }
        return taken
    }

    /// Gives the operations back when enqueuing them failed (nothing was enqueued).
    func restore(_ operations: [Operation]) {
        state.withLock { $0 = operations }
    }
}
