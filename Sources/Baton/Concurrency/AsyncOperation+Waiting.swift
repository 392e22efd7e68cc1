import Dispatch
import Foundation

extension AsyncOperation {
    /// Runs the operation and blocks the calling thread until it has finished (CompositeOperations'
    /// sync operation), for tests and scripts.
    ///
    /// ```swift
    /// let outcome = try FetchGreeting().runAndWait(timeout: 5)
    /// ```
    ///
    /// The operation is claimed and added to `queue` (or to a private queue when `queue` is `nil`). A
    /// finished operation's outcome is returned at once; one that a chain, a composite or another
    /// wait holds, or that is already executing, is refused: nothing is ever added to a queue twice.
    /// To wait for an operation that you added to a queue yourself, use ``wait(timeout:)``.
    ///
    /// - Parameters:
    ///   - queue: The queue that runs the operation. Default: a private queue.
    ///   - timeout: The longest wait in seconds; the operation is cancelled when it runs out.
    /// - Returns: The operation's outcome.
    /// - Throws: ``BatonError/wouldDeadlock(operation:reason:)`` instead of blocking the thread that
    ///   must run the operation (the calling queue when it runs one operation at a time, or the main
    ///   thread for the main queue); ``BatonError/timedOut(seconds:)`` when time runs out;
    ///   ``BatonError/alreadyEnqueued(operation:)`` or ``BatonError/alreadyExecuting(operation:)``
    ///   when something else runs it.
    @available(*, noasync, message: "use waitForOutcome() in async code")
    @discardableResult
    public final func runAndWait(on queue: OperationQueue? = nil, timeout: Double) throws(BatonError) -> Outcome<Void> {
        try runAndWaitForStoredOutcome(on: queue, timeout: timeout).map { _ in () }
    }

    /// Blocks until the operation, run by someone else, has finished.
    ///
    /// - Parameter timeout: The longest wait in seconds. The operation is left as it is on timeout.
    /// - Returns: The operation's outcome.
    /// - Throws: ``BatonError/timedOut(seconds:)`` when time runs out.
    @available(*, noasync, message: "use waitForOutcome() in async code")
    @discardableResult
    public final func wait(timeout: Double) throws(BatonError) -> Outcome<Void> {
        let done = DispatchSemaphore(value: 0)
        whenFinished { done.signal() }
        guard done.wait(timeout: .now() + timeout) == .success, let outcome = storedOutcome else {
            throw .timedOut(seconds: timeout)
        }
        return outcome.map { _ in () }
    }

    func runAndWaitForStoredOutcome(on queue: OperationQueue?, timeout: Double) throws(BatonError) -> Outcome<Any?> {
        if let queue {
            if queue === OperationQueue.main && Thread.isMainThread {
                throw .wouldDeadlock(operation: batonName, reason: "the main thread would wait for the main queue")
            }
            if queue === OperationQueue.current && queue.maxConcurrentOperationCount == 1 {
                throw .wouldDeadlock(operation: batonName, reason: "called from the serial queue that must run it")
            }
        }
        if let outcome = storedOutcome { return outcome }
        try claim()
        let done = DispatchSemaphore(value: 0)
        whenFinished { done.signal() }
        (queue ?? OperationQueue()).launch(self)
        guard done.wait(timeout: .now() + timeout) == .success, let outcome = storedOutcome else {
            cancel()
            throw .timedOut(seconds: timeout)
        }
        return outcome
    }
}

extension ResultOperation {
    /// Runs the operation, blocks until it has finished, and returns its output.
    ///
    /// - Parameters:
    ///   - queue: The queue that runs the operation. Default: a private queue.
    ///   - timeout: The longest wait in seconds; the operation is cancelled when it runs out.
    /// - Returns: The output.
    /// - Throws: The operation's error, `CancellationError` if it was cancelled, or a ``BatonError``
    ///   as ``AsyncOperation/runAndWait(on:timeout:)`` throws.
    @available(*, noasync, message: "use value() in async code")
    public final func runAndWaitForOutput(on queue: OperationQueue? = nil, timeout: Double) throws -> Output {
        try Self.typed(runAndWaitForStoredOutcome(on: queue, timeout: timeout)).get()
    }
}
