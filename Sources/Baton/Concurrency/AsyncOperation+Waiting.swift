import Dispatch
import Foundation

/// The waits behind ``OutcomeReporting``'s `run`, `wait` and `value`, untyped.
extension AsyncOperation {
    /// Claims the operation, adds it to `queue`, and blocks until it finishes or `timeout` runs out
    /// (then cancels it: it is the caller's).
    func runBlocking(on queue: OperationQueue, timeout: Duration) throws(BatonError) -> Outcome<(any Sendable)?> {
        if let reason = queue.deadlockReasonForBlockingWait {
            throw .wouldDeadlock(operation: reference, reason: reason)
        }
        try check(timeout)
        if let outcome = try claimUnlessFinished() { return outcome }
        let done = DispatchSemaphore(value: 0)
        whenFinished { done.signal() }
        queue.launch(self)
        _ = done.wait(timeout: timeout.deadlineFromNow)
        // Finished in time (perhaps right at the deadline), or cancelled now: it is the caller's.
        if let outcome = storedOutcome { return outcome }
        cancel()
        throw .timedOut(operation: reference, after: timeout)
    }

    /// Blocks until someone else's run of the operation finishes, or `timeout` runs out.
    func waitBlocking(timeout: Duration) throws(BatonError) -> Outcome<(any Sendable)?> {
        try check(timeout)
        let done = DispatchSemaphore(value: 0)
        whenFinished { done.signal() }
        _ = done.wait(timeout: timeout.deadlineFromNow)
        guard let outcome = storedOutcome else { throw .timedOut(operation: reference, after: timeout) }
        return outcome
    }

    /// Claims the operation for a run, or returns its outcome when it has finished (before the claim,
    /// or meanwhile: a finished operation's run returns its outcome).
    private func claimUnlessFinished() throws(BatonError) -> Outcome<(any Sendable)?>? {
        if let outcome = storedOutcome { return outcome }
        do {
            try claim()
            return nil
        } catch {
            if let outcome = storedOutcome { return outcome }
            throw error
        }
    }

    /// A wait's own timeout must not be negative (as ``timeout`` must not).
    private func check(_ timeout: Duration) throws(BatonError) {
        if timeout < .zero {
            throw .invalidArgument(operation: reference, reason: "a wait's timeout must not be negative, got \(timeout)")
        }
    }

    /// Claims the operation, adds it to `queue`, and suspends until it finishes. Cancelling the
    /// awaiting task cancels the operation (it is the caller's).
    func runSuspending(on queue: OperationQueue) async throws(BatonError) -> Outcome<(any Sendable)?> {
        if let outcome = try claimUnlessFinished() { return outcome }
        queue.launch(self)
        return await waitSuspending(cancellingOnTaskCancellation: true)
    }

    /// Suspends until the operation has finished. Cancelling the awaiting task ends the wait at once
    /// with ``Outcome/cancelled``, whether or not anyone ever runs the operation; it cancels the
    /// operation too when the caller runs it (`run`), not when someone else does (`value`).
    func waitSuspending(cancellingOnTaskCancellation cancels: Bool) async -> Outcome<(any Sendable)?> {
        let waiter = OutcomeWaiter<Outcome<(any Sendable)?>>()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                waiter.install(continuation)
                whenFinished { [weak self] in waiter.resume(with: self?.storedOutcome ?? .cancelled) }
            }
        } onCancel: {
            // The operation first, so that the awaiting task resumes with it already cancelled.
            if cancels { self.cancel() }
            waiter.resume(with: .cancelled)
        }
    }
}

extension OperationQueue {
    /// Why blocking the current thread until work on this queue finishes would deadlock, or `nil`.
    var deadlockReasonForBlockingWait: String? {
        if self === OperationQueue.main && Thread.isMainThread {
            return "the main thread would wait for the main queue"
        }
        if self === OperationQueue.current && maxConcurrentOperationCount == 1 {
            return "called from the serial queue that must run it"
        }
        return nil
    }
}

/// One await of an outcome, resumed exactly once: by the work's end, or by the cancellation of the
/// awaiting task, whichever comes first.
final class OutcomeWaiter<Value: Sendable>: Sendable {
    private enum State {
        case idle
        case waiting(CheckedContinuation<Value, Never>)
        case resumed
        /// Resumed before the continuation was installed (the task was cancelled first).
        case decided(Value)
    }

    private let state = Mutex(State.idle)

    func install(_ continuation: CheckedContinuation<Value, Never>) {
        let decided: Value? = state.withLock { state in
            guard case .decided(let value) = state else {
                state = .waiting(continuation)
                return nil
            }
            state = .resumed
            return value
        }
        if let decided { continuation.resume(returning: decided) }
    }

    func resume(with value: Value) {
        let continuation: CheckedContinuation<Value, Never>? = state.withLock { state in
            switch state {
            case .idle:
                state = .decided(value)
                return nil
            case .waiting(let continuation):
                state = .resumed
                return continuation
            case .resumed, .decided:
                return nil
            }
        }
        continuation?.resume(returning: value)
    }
}
