import Foundation

extension OperationQueue {
    /// Adds operations that Baton launches (chain stages, group children, sequence steps, retry
    /// attempts, tree nodes), except the cancelled ones: those are started right here.
    ///
    /// A cancelled operation added to a queue that has a pending barrier deadlocks Linux's
    /// `OperationQueue`. Started instead, it finishes at once without executing (cancellation makes it
    /// ready), so whoever waits on it is told.
    func launch(_ operation: Operation) {
        if operation.isCancelled { operation.start() } else { addOperation(operation) }
    }

    /// The same for several operations, added to the queue in one call.
    func launch(_ operations: [Operation]) {
        var ready = [Operation]()
        ready.reserveCapacity(operations.count)
        for operation in operations {
            if operation.isCancelled { operation.start() } else { ready.append(operation) }
        }
        if !ready.isEmpty { addOperations(ready, waitUntilFinished: false) }
    }
}
