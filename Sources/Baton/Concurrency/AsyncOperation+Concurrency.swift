import Foundation

extension AsyncOperation {
    /// Suspends until the operation has finished and returns its outcome.
    ///
    /// The operation must be run by someone: add it to a queue, or use ``ResultOperation/value(on:)``.
    /// Cancelling the awaiting task cancels the operation and ends the wait at once with
    /// ``Outcome/cancelled``, whether or not anyone ever runs the operation.
    ///
    /// - Returns: The operation's outcome.
    public final func waitForOutcome() async -> Outcome<Void> {
        await waitForStoredOutcome().map { _ in () }
    }

    func waitForStoredOutcome() async -> Outcome<Any?> {
        let waiter = OutcomeWaiter()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                waiter.install(continuation)
                whenFinished { [weak self] in waiter.resume(with: self?.storedOutcome ?? .cancelled) }
            }.value
        } onCancel: {
            // The operation first, so that the awaiting task resumes with it already cancelled.
            self.cancel()
            waiter.resume(with: .cancelled)
        }
    }
}

/// One await of an operation's outcome, resumed exactly once: by the operation's finish, or by the
/// cancellation of the awaiting task, whichever comes first.
final class OutcomeWaiter: Sendable {
    private enum State {
        case idle
        case waiting(CheckedContinuation<UncheckedSendable<Outcome<Any?>>, Never>)
        case resumed
        /// Resumed before the continuation was installed (the task was cancelled first).
        case decided(Outcome<Any?>)
    }

    private let state = Mutex(State.idle)

    func install(_ continuation: CheckedContinuation<UncheckedSendable<Outcome<Any?>>, Never>) {
        let decided: Outcome<Any?>? = state.withLock { state in
            guard case .decided(let outcome) = state else {
                state = .waiting(continuation)
                return nil
            }
            state = .resumed
            return outcome
        }
        if let decided { continuation.resume(returning: UncheckedSendable(value: decided)) }
    }

    func resume(with outcome: Outcome<Any?>) {
        let continuation: CheckedContinuation<UncheckedSendable<Outcome<Any?>>, Never>? = state.withLock { state in
            switch state {
            case .idle:
                state = .decided(outcome)
                return nil
            case .waiting(let continuation):
                state = .resumed
                return continuation
            case .resumed, .decided:
                return nil
            }
        }
        continuation?.resume(returning: UncheckedSendable(value: outcome))
    }
}

extension ResultOperation {
    /// Runs the operation on `queue` and returns its output. Cancelling the awaiting task cancels the
    /// operation and ends the wait with `CancellationError`.
    ///
    /// ```swift
    /// let recipe = try await FetchRecipe(id: 7).value(on: queue)
    /// ```
    ///
    /// The operation is claimed first: one that a chain, a composite or another wait holds is refused
    /// with ``BatonError/alreadyEnqueued(operation:)`` (nothing is added to a queue twice). A finished
    /// operation's output is returned at once. To await an operation that you added to a queue
    /// yourself, use ``value()``.
    ///
    /// - Parameter queue: The queue to add the operation to.
    /// - Returns: The output.
    /// - Throws: The operation's error, `CancellationError` if it was cancelled, or the
    ///   ``BatonError`` that says why it could not be run.
    public final func value(on queue: OperationQueue) async throws -> Output {
        if let outcome = storedOutcome { return try Self.typed(outcome).get() }
        try claim()
        queue.launch(self)
        return try Self.typed(await waitForStoredOutcome()).get()
    }

    /// Waits for whoever runs the operation and returns its output. Cancelling the awaiting task
    /// cancels the operation and ends the wait with `CancellationError` at once, even if nobody ever
    /// runs it.
    ///
    /// - Returns: The output.
    /// - Throws: The operation's error, or `CancellationError` if it (or the awaiting task) was cancelled.
    public final func value() async throws -> Output {
        try Self.typed(await waitForStoredOutcome()).get()
    }
}
