import Foundation

/// Creates an operation from a block and adds it to `queue` (CompositeOperations' `operation(queue,
/// block)`): the block receives its operation and finishes it, cancels it or reruns it.
///
/// ```swift
/// asyncOperation(on: queue) { operation in
///     print("working")
///     operation.finish()
/// }
/// ```
///
/// - Parameters:
///   - queue: The queue that runs it.
///   - body: The work; it must finish the operation (or rerun it) eventually.
/// - Returns: The operation, to wait for it, cancel it or read its outcome.
@discardableResult
public func asyncOperation(
    on queue: OperationQueue, _ body: @escaping @Sendable (AsyncBlockOperation) -> Void
) -> AsyncBlockOperation {
    let operation = AsyncBlockOperation(body)
    queue.addOperation(operation)
    return operation
}

/// Runs a block as an operation and blocks the calling thread until it has finished
/// (CompositeOperations' `syncOperation`), as ``AsyncOperation/run(on:timeout:)`` does: bounded by
/// `timeout`, and refusing to wait where the wait would deadlock.
///
/// ```swift
/// try syncOperation(timeout: .seconds(5)) { operation in
///     DispatchQueue.global().async { operation.finish() }
/// }
/// ```
///
/// - Parameters:
///   - queue: The queue that runs it. Default: a new queue of its own.
///   - timeout: The longest wait; the operation is cancelled when it runs out.
///   - body: The work; it must finish the operation (or rerun it) eventually.
/// - Throws: ``BatonError/timedOut(operation:after:)`` when time runs out,
///   ``BatonError/wouldDeadlock(operation:reason:)`` when the calling thread is one the operation
///   needs, the error the operation failed with, or `CancellationError` when it was cancelled.
@available(*, noasync, message: "use 'try await AsyncBlockOperation { … }.run()' in async code")
public func syncOperation(
    on queue: OperationQueue = OperationQueue(), timeout: Duration,
    _ body: @escaping @Sendable (AsyncBlockOperation) -> Void
) throws {
    try AsyncBlockOperation(body).run(on: queue, timeout: timeout)
}
