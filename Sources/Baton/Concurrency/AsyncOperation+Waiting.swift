import Dispatch
import Foundation

/// The waits behind ``OutcomeReporting``'s `run`, `wait` and `value`, untyped.
extension AsyncOperation {
    /// Claims the operation, adds it to `queue`, and blocks until it finishes or `timeout` runs out
    /// (then cancels it: it is the caller's).
    func runBlocking(on queue: OperationQueue, timeout: Duration) throws(BatonError) -> Outcome<(any Sendable)?> {
        if queue === OperationQueue.main && Thread.isMainThread {
            throw .wouldDeadlock(operation: reference, reason: "the main thread would wait for the main queue")
        }
        if queue === OperationQueue.current && queue.maxConcurrentOperationCount == 1 {
            throw .wouldDeadlock(operation: reference, reason: "called from the serial queue that must run it")
        }
        if let outcome = storedOutcome { return outcome }
        try claim()
        let done = DispatchSemaphore(value: 0)
        whenFinished { done.signal() }
        queue.launch(self)
        guard done.wait(timeout: timeout.deadlineFromNow) == .success, let outcome = storedOutcome else {
            cancel()
            throw .timedOut(operation: reference, after: timeout)
        }
        return outcome
    }

    /// Blocks until someone else's run of the operation finishes, or `timeout` runs out.
    func waitBlocking(timeout: Duration) throws(BatonError) -> Outcome<(any Sendable)?> {
        let done = DispatchSemaphore(value: 0)
        whenFinished { done.signal() }
        guard done.wait(timeout: timeout.deadlineFromNow) == .success, let outcome = storedOutcome else {
            throw .timedOut(operation: reference, after: timeout)
        }
        return outcome
    }

    /// Claims the operation, adds it to `queue`, and suspends until it finishes.
    func runSuspending(on queue: OperationQueue) async throws(BatonError) -> Outcome<(any Sendable)?> {
        if let outcome = storedOutcome { return outcome }
        try claim()
        queue.launch(self)
        return await waitSuspending()
    }

    /// Suspends until the operation has finished. Cancelling the awaiting task cancels the operation
    /// and ends the wait at once with ``Outcome/cancelled``, whether or not anyone ever runs it.
    func waitSuspending() async -> Outcome<(any Sendable)?> {
        let waiter = OutcomeWaiter()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                waiter.install(continuation)
                whenFinished { [weak self] in waiter.resume(with: self?.storedOutcome ?? .cancelled) }
            }
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
        case waiting(CheckedContinuation<Outcome<(any Sendable)?>, Never>)
        case resumed
        /// Resumed before the continuation was installed (the task was cancelled first).
        case decided(Outcome<(any Sendable)?>)
    }

    private let state = Mutex(State.idle)

    func install(_ continuation: CheckedContinuation<Outcome<(any Sendable)?>, Never>) {
        let decided: Outcome<(any Sendable)?>? = state.withLock { state in
            guard case .decided(let outcome) = state else {
                state = .waiting(continuation)
                return nil
            }
            state = .resumed
            return outcome
        }
        if let decided { continuation.resume(returning: decided) }
    }

    func resume(with outcome: Outcome<(any Sendable)?>) {
        let continuation: CheckedContinuation<Outcome<(any Sendable)?>, Never>? = state.withLock { state in
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
        continuation?.resume(returning: outcome)
    }
}
