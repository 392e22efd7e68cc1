import Baton
import Foundation

// Exclusivity and limits (issue #24): what a claim costs when nobody contends, and how close a
// contended category comes to the queue it imitates (a serial queue for exclusivity, an N-wide queue
// for a limit of N). Each run uses a scope of its own, so runs never share a table's lines.

/// `n` operations that finish at once.
func finishingAtOnce(_ n: Int) -> [AsyncBlockOperation] {
    (0..<n).map { _ in AsyncBlockOperation { $0.finish() } }
}

/// A group of `n` operations, each claiming a category nobody else claims: the cost of an uncontended
/// claim on the path composites take (held out of the queue until granted).
func batonGroupClaimed(_ n: Int) throws {
    let scope = ExclusivityScope("uncontended")
    let operations = finishingAtOnce(n)
    for (index, operation) in operations.enumerated() {
        try operation.addExclusivity(OperationCategory("c\(index)", in: scope))
    }
    try GroupOperation(operations: operations).run(timeout: .seconds(600))
}

/// The group of `batonGroupClaimed` with its categories made but not claimed: the baseline of a claim's
/// own cost (making 100,000 names and categories is the caller's, about 0.2 µs each).
func batonGroupWithCategoriesMade(_ n: Int) throws {
    let scope = ExclusivityScope("uncontended")
    let operations = finishingAtOnce(n)
    let categories = (0..<n).map { OperationCategory("c\($0)", in: scope) }
    try GroupOperation(operations: operations).run(timeout: .seconds(600))
    withExtendedLifetime(categories) {}
}

/// `n` operations in a plain `OperationQueue`, each claiming a category of its own: the uncontended
/// claim on the path Foundation queues take (announced through `isReady`).
func batonIndependentClaimed(_ n: Int) throws {
    let scope = ExclusivityScope("uncontended")
    let operations = finishingAtOnce(n)
    for (index, operation) in operations.enumerated() {
        try operation.addExclusivity(OperationCategory("c\(index)", in: scope))
    }
    let queue = OperationQueue()
    queue.addOperations(operations, waitUntilFinished: false)
    try waitAll(queue, "claimed AsyncBlockOperation x\(n)")
}

/// A group of `n` operations that all claim one category, with at most `limit` holders.
func batonGroupContending(limit: Int) -> Workload {
    { n in
        let scope = ExclusivityScope("contended")
        if limit > 1 { try scope.setLimit(limit, for: "x") }
        let category = OperationCategory("x", in: scope)
        let operations = finishingAtOnce(n)
        for operation in operations { try operation.addExclusivity(category) }
        try GroupOperation(operations: operations).run(timeout: .seconds(600))
    }
}

/// `n` operations that all claim one category, in a plain `OperationQueue`: every waiter sits in the
/// queue, not ready, until granted.
func batonQueueContending(_ n: Int) throws {
    let category = OperationCategory("x", in: ExclusivityScope("contended"))
    let operations = finishingAtOnce(n)
    for operation in operations { try operation.addExclusivity(category) }
    let queue = OperationQueue()
    queue.addOperations(operations, waitUntilFinished: false)
    try waitAll(queue, "contending AsyncBlockOperation x\(n)")
}

/// The same `n` operations, unclaimed, on a queue `width` wide: the queue a category imitates.
func batonOnQueue(width: Int) -> Workload {
    { n in
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = width
        queue.addOperations(finishingAtOnce(n), waitUntilFinished: false)
        try waitAll(queue, "AsyncBlockOperation x\(n) on a \(width)-wide queue")
    }
}

/// `n` operations in groups of 1,000 run one after another, each operation with a condition that is
/// satisfied at once when `conditioned`: what a condition costs, and (in the peak) what its timeout
/// keeps once the operation has finished. A condition's timeout is 60 seconds by default; before
/// Baton's timers could be cancelled, each left a pending block behind for that long.
func batonGroupsInRounds(conditioned: Bool) -> Workload {
    { n in
        let ready = Condition("ready") { _, answer in answer(.satisfied) }
        for start in stride(from: 0, to: n, by: 1_000) {
            let operations = finishingAtOnce(min(1_000, n - start))
            if conditioned {
                for operation in operations { try operation.addCondition(ready) }
            }
            try GroupOperation(operations: operations).run(timeout: .seconds(600))
        }
    }
}
