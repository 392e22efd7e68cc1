import Foundation

extension AsyncOperation {
    /// Suspends until the operation has finished and returns its outcome. Cancelling the awaiting
    /// task cancels the operation.
    ///
    /// The operation must be run by someone: add it to a queue, or use ``ResultOperation/value(on:)``.
    ///
    /// - Returns: The operation's outcome.
    public final func waitForOutcome() async -> Outcome<Void> {
        await waitForStoredOutcome().map { _ in () }
    }

    func waitForStoredOutcome() async -> Outcome<Any?> {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                whenFinished { continuation.resume() }
            }
            return storedOutcome ?? .cancelled
        } onCancel: {
            self.cancel()
        }
    }
}

extension ResultOperation {
    /// Runs the operation on `queue` (or, with `nil`, waits for whoever runs it) and returns its output.
    /// Cancelling the awaiting task cancels the operation.
    ///
    /// ```swift
    /// let recipe = try await FetchRecipe(id: 7).value(on: queue)
    /// ```
    ///
    /// - Parameter queue: The queue to add the operation to, or `nil` if it is already enqueued.
    /// - Returns: The output.
    /// - Throws: The operation's error, or `CancellationError` if it was cancelled.
    public final func value(on queue: OperationQueue? = nil) async throws -> Output {
        if let queue, core.withLock({ $0.phase == .pending }) { queue.addOperation(self) }
        return try Self.typed(await waitForStoredOutcome()).get()
    }
}
