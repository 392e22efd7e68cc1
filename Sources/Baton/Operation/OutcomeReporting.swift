import Foundation

/// The members every Baton operation has to report and wait for its outcome, typed by what it
/// produces: `Void` for an ``AsyncOperation``, `Output` for a ``ResultOperation``.
///
/// ``AsyncOperation`` is the only type that conforms; you never conform to it yourself. The protocol
/// exists so that one name means one thing on every operation: `outcome` is an `Outcome<Void>?` on an
/// `AsyncOperation` and an `Outcome<Output>?` on a `ResultOperation<Output>`, and `run`, `wait` and
/// `value` return `Void` or `Output` the same way. (A subclass cannot redeclare a property with
/// another type; a class's own member does take precedence over a protocol extension's.)
///
/// | | you run it | someone else runs it | you run it and read the `Outcome` |
/// | --- | --- | --- | --- |
/// | blocking, with a deadline | ``run(on:timeout:)`` | ``wait(timeout:)`` | ``runForOutcome(on:timeout:)`` |
/// | `async`, ended by task cancellation | ``run(on:)`` | ``value`` | ``runForOutcome(on:)`` |
///
/// ```swift
/// final class Pause: AsyncOperation, @unchecked Sendable {
///     override func execute() { finish() }
/// }
///
/// let pause = Pause()
/// try pause.run(timeout: .seconds(5))
/// print(pause.outcome!)   // succeeded(())
/// ```
public protocol OutcomeReporting: AnyObject {}

extension OutcomeReporting where Self: AsyncOperation {
    /// How the operation ended, or `nil` until it has finished.
    public var outcome: Outcome<Void>? {
        storedOutcome?.map { _ in () }
    }

    /// Adds a closure called once with the outcome, **before** the operation becomes finished.
    ///
    /// Added after the outcome was decided, it is called at once. Closures are released when the
    /// operation finishes, so capturing the operation does not leak it.
    ///
    /// - Parameter observer: The closure, given the outcome.
    public func onFinish(_ observer: @escaping @Sendable (Outcome<Void>) -> Void) {
        addOutcomeObserver { observer($0.map { _ in () }) }
    }

    /// Runs the operation on `queue` and blocks the calling thread until it has finished, for tests
    /// and scripts.
    ///
    /// ```swift
    /// try Pause().run(timeout: .seconds(5))
    /// ```
    ///
    /// The operation is claimed first: one that a chain, a composite or another run holds, or that is
    /// executing, is refused (nothing is added to a queue twice). A finished operation returns at once.
    /// When `timeout` runs out the operation is cancelled (it is yours) and the wait throws. An
    /// operation you added to a queue yourself (`addOperation`) is not yours to run again: Baton cannot
    /// see that queue, and Foundation traps on a second add. Wait for it with ``wait(timeout:)``.
    ///
    /// - Parameters:
    ///   - queue: The queue that runs the operation. Default: a new queue of its own.
    ///   - timeout: The longest wait; a negative one is refused with
    ///     ``BatonError/invalidArgument(operation:reason:)``.
    /// - Throws: `CancellationError` if the operation was cancelled, its error if it failed;
    ///   ``BatonError/timedOut(operation:after:)`` when time runs out;
    ///   ``BatonError/wouldDeadlock(operation:reason:)`` instead of blocking the thread that must run
    ///   the operation; ``BatonError/alreadyEnqueued(operation:)`` or
    ///   ``BatonError/alreadyExecuting(operation:)`` when something else runs it.
    @available(*, noasync, message: "use 'try await run(on:)' in async code")
    public func run(on queue: OperationQueue = OperationQueue(), timeout: Duration) throws {
        try runBlocking(on: queue, timeout: timeout).map { _ in () }.get()
    }

    /// Runs the operation on `queue` and suspends until it has finished.
    ///
    /// The operation is claimed first, as for ``run(on:timeout:)``. Cancelling the awaiting task
    /// cancels the operation and ends the wait with `CancellationError`.
    ///
    /// - Parameter queue: The queue that runs the operation. Default: a new queue of its own.
    /// - Throws: `CancellationError` if the operation (or the task) was cancelled, its error if it
    ///   failed, or the ``BatonError`` that says why it could not be run.
    public func run(on queue: OperationQueue = OperationQueue()) async throws {
        try await runSuspending(on: queue).orCancelled().map { _ in () }.get()
    }

    /// Runs the operation on `queue`, blocks until it has finished, and returns how it ended: the
    /// operation's own failure and cancellation are outcomes, not errors.
    ///
    /// ```swift
    /// switch try Pause().runForOutcome(timeout: .seconds(5)) {
    /// case .succeeded: print("done")
    /// case .failed(let error): print("failed: \(error)")
    /// case .cancelled: print("cancelled")
    /// }
    /// ```
    ///
    /// It runs as ``run(on:timeout:)`` does (claimed first, cancelled when `timeout` runs out), and
    /// throws only when the wait itself fails, never for the operation's result.
    ///
    /// - Parameters:
    ///   - queue: The queue that runs the operation. Default: a new queue of its own.
    ///   - timeout: The longest wait; the operation is cancelled when it runs out.
    /// - Returns: The operation's outcome.
    /// - Throws: ``BatonError/timedOut(operation:after:)`` when time runs out,
    ///   ``BatonError/wouldDeadlock(operation:reason:)``, ``BatonError/invalidArgument(operation:reason:)``
    ///   for a negative `timeout`, ``BatonError/alreadyEnqueued(operation:)`` or
    ///   ``BatonError/alreadyExecuting(operation:)``.
    @available(*, noasync, message: "use 'try await runForOutcome(on:)' in async code")
    @discardableResult
    public func runForOutcome(on queue: OperationQueue = OperationQueue(), timeout: Duration) throws(BatonError) -> Outcome<Void>
    {
        try runBlocking(on: queue, timeout: timeout).map { _ in () }
    }

    /// Runs the operation on `queue`, suspends until it has finished, and returns how it ended.
    ///
    /// It runs as ``run(on:)`` does. Cancelling the awaiting task cancels the operation and ends the
    /// wait with `CancellationError`: the wait was cancelled, so it has no outcome to return.
    ///
    /// - Parameter queue: The queue that runs the operation. Default: a new queue of its own.
    /// - Returns: The operation's outcome.
    /// - Throws: `CancellationError` when the awaiting task was cancelled, or the ``BatonError`` that
    ///   says why the operation could not be run.
    @discardableResult
    public func runForOutcome(on queue: OperationQueue = OperationQueue()) async throws -> Outcome<Void> {
        try await runSuspending(on: queue).orThrow().map { _ in () }
    }

    /// Blocks the calling thread until the operation, run by someone else, has finished.
    ///
    /// The operation is left as it is when `timeout` runs out: it is not yours to cancel.
    ///
    /// - Parameter timeout: The longest wait.
    /// - Throws: `CancellationError` if the operation was cancelled, its error if it failed, or
    ///   ``BatonError/timedOut(operation:after:)`` when time runs out.
    @available(*, noasync, message: "use 'try await value' in async code")
    public func wait(timeout: Duration) throws {
        try waitBlocking(timeout: timeout).map { _ in () }.get()
    }

    /// Waits for the operation, run by someone else, to finish, as `await task.value` does.
    ///
    /// Cancelling the awaiting task ends this wait at once with `CancellationError`, even if nobody
    /// ever runs the operation, and leaves the operation alone (other waits go on), as cancelling a
    /// task that awaits another task's `value` does. To run it, use ``run(on:)``.
    ///
    /// - Throws: `CancellationError` if the operation (or the awaiting task) was cancelled, or its
    ///   error.
    public var value: Void {
        get async throws {
            try await waitSuspending(cancellingOnTaskCancellation: false).orCancelled().map { _ in () }.get()
        }
    }
}

extension ResultOperation {
    /// Runs the operation on `queue`, blocks until it has finished, and returns its output.
    ///
    /// ```swift
    /// let words = try Count("one two three").run(timeout: .seconds(5))
    /// ```
    ///
    /// The same as ``OutcomeReporting/run(on:timeout:)``, with the output.
    ///
    /// - Parameters:
    ///   - queue: The queue that runs the operation. Default: a new queue of its own.
    ///   - timeout: The longest wait; the operation is cancelled when it runs out.
    /// - Returns: The output.
    /// - Throws: As ``OutcomeReporting/run(on:timeout:)``.
    @available(*, noasync, message: "use 'try await run(on:)' in async code")
    @discardableResult
    public final func run(on queue: OperationQueue = OperationQueue(), timeout: Duration) throws -> Output {
        try typed(runBlocking(on: queue, timeout: timeout)).get()
    }

    /// Runs the operation on `queue`, suspends until it has finished, and returns its output.
    ///
    /// ```swift
    /// let words = try await Count("one two three").run()
    /// ```
    ///
    /// - Parameter queue: The queue that runs the operation. Default: a new queue of its own.
    /// - Returns: The output.
    /// - Throws: As ``OutcomeReporting/run(on:)``.
    @discardableResult
    public final func run(on queue: OperationQueue = OperationQueue()) async throws -> Output {
        try typed(await runSuspending(on: queue).orCancelled()).get()
    }

    /// Runs the operation on `queue`, blocks until it has finished, and returns how it ended.
    ///
    /// ```swift
    /// if case .succeeded(let words) = try Count("one two").runForOutcome(timeout: .seconds(5)) {
    ///     print(words)
    /// }
    /// ```
    ///
    /// The same as ``OutcomeReporting/runForOutcome(on:timeout:)``, with the output in the outcome.
    ///
    /// - Parameters:
    ///   - queue: The queue that runs the operation. Default: a new queue of its own.
    ///   - timeout: The longest wait; the operation is cancelled when it runs out.
    /// - Returns: The operation's outcome.
    /// - Throws: As ``OutcomeReporting/runForOutcome(on:timeout:)``: only for the wait itself.
    @available(*, noasync, message: "use 'try await runForOutcome(on:)' in async code")
    @discardableResult
    public final func runForOutcome(
        on queue: OperationQueue = OperationQueue(), timeout: Duration
    ) throws(BatonError) -> Outcome<Output> {
        typed(try runBlocking(on: queue, timeout: timeout))
    }

    /// Runs the operation on `queue`, suspends until it has finished, and returns how it ended.
    ///
    /// - Parameter queue: The queue that runs the operation. Default: a new queue of its own.
    /// - Returns: The operation's outcome.
    /// - Throws: As ``OutcomeReporting/runForOutcome(on:)``: only for the wait itself.
    @discardableResult
    public final func runForOutcome(on queue: OperationQueue = OperationQueue()) async throws -> Outcome<Output> {
        typed(try await runSuspending(on: queue).orThrow())
    }

    /// Blocks until the operation, run by someone else, has finished, and returns its output.
    ///
    /// - Parameter timeout: The longest wait; the operation is left as it is when it runs out.
    /// - Returns: The output.
    /// - Throws: As ``OutcomeReporting/wait(timeout:)``.
    @available(*, noasync, message: "use 'try await value' in async code")
    @discardableResult
    public final func wait(timeout: Duration) throws -> Output {
        try typed(waitBlocking(timeout: timeout)).get()
    }

    /// The output, once the operation, run by someone else, has finished (as `await task.value`).
    ///
    /// Cancelling the awaiting task ends this wait with `CancellationError` and leaves the operation
    /// alone.
    ///
    /// - Throws: `CancellationError` if the operation (or the task) was cancelled, or its error.
    public final var value: Output {
        get async throws {
            try typed(await waitSuspending(cancellingOnTaskCancellation: false).orCancelled()).get()
        }
    }
}
