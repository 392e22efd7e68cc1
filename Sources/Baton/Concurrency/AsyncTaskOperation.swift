import Foundation

/// An operation that runs an `async` closure, with cancellation flowing both ways.
///
/// ```swift
/// let fetch = AsyncTaskOperation { try await client.fetchRecipe(id: 7) }
/// queue.addOperation(fetch)
/// ```
///
/// Cancelling the operation cancels the task. A task that ends by throwing `CancellationError` (or
/// throws anything after it was cancelled) finishes the operation cancelled; any other error fails
/// it; a value succeeds it.
public final class AsyncTaskOperation<Output: Sendable>: ResultOperation<Output>, @unchecked Sendable {
    /// Its `dependencies` are those added with `addDependency` (see `AsyncOperation.listsOnlyAddedDependencies`).
    override class var listsOnlyAddedDependencies: Bool { true }

    private let priority: TaskPriority?
    private let body: @Sendable () async throws -> Output
    private let task = Mutex<Task<Void, Never>?>(nil)

    /// Creates an operation that runs `body` in a new task when it executes.
    ///
    /// - Parameters:
    ///   - priority: The task's priority. Default: inherited from nothing (the default priority).
    ///   - body: The work; it should check for cancellation (`try Task.checkCancellation()`).
    public init(priority: TaskPriority? = nil, _ body: @escaping @Sendable () async throws -> Output) {
        self.priority = priority
        self.body = body
        super.init()
    }

    /// Starts the task.
    public override func execute() {
        let body = self.body
        // The task knows this operation, and the queue whose slot it holds: an `async` wait inside it
        // for work on that queue is refused when the queue could run nothing else, and so is one for an
        // operation that needs a category this operation holds (RunningQueue).
        let holder = RunningQueue.Holder(queue: OperationQueue.current.map(ObjectIdentifier.init), operation: self)
        let running = RunningQueue.$current.withValue(holder) { makeTask(body) }
        task.withLock { $0 = running }
        if isCancelled { running.cancel() }
    }

    private func makeTask(_ body: @escaping @Sendable () async throws -> Output) -> Task<Void, Never> {
        Task(priority: priority) {
            RunningQueue.current?.bodyBegan()
            do {
                let output = try await body()
                finish(with: output)
            } catch {
                if error is CancellationError || Task.isCancelled {
                    cancel()
                    finish()
                } else {
                    finish(throwing: error)
                }
            }
        }
    }

    /// Cancels the task.
    public override func didCancel() {
        task.withLock { $0 }?.cancel()
    }
}
