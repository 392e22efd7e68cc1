import Foundation

/// Checks an array of operations before it becomes a chain, and claims them all for it, so that one
/// operation cannot be in two chains (or a chain and a composite, or a wait) at once.
enum ChainValidation {
    /// Throws the first problem found; on success, every operation is claimed by the caller.
    static func validateAndClaim(_ operations: [Operation]) throws(BatonError) {
        var seen = Set<ObjectIdentifier>()
        seen.reserveCapacity(operations.count)
        for operation in operations {
            if !seen.insert(ObjectIdentifier(operation)).inserted {
                throw .duplicateOperation(operation: operation.reference)
            }
            if operation.isFinished { throw .alreadyFinished(operation: operation.reference) }
            if operation.isExecuting { throw .alreadyExecuting(operation: operation.reference) }
        }
        try checkCycles(operations)
        try Operation.claimAll(operations)
    }

    /// A chain makes each operation depend on every one before it. That closes a cycle exactly when
    /// an operation already depends, through existing dependencies, on itself or on a later one.
    ///
    /// One iterative depth-first walk over the existing dependencies (no recursion, each node once)
    /// computes for every node the highest chain position it can reach.
    private static func checkCycles(_ operations: [Operation]) throws(BatonError) {
        // The common case: no operation has dependencies yet, so no cycle can close.
        guard operations.contains(where: { !$0.dependencies.isEmpty }) else { return }
        var position = [ObjectIdentifier: Int]()
        position.reserveCapacity(operations.count)
        for (index, operation) in operations.enumerated() { position[ObjectIdentifier(operation)] = index }

        var highestReach = [ObjectIdentifier: Int]()   // finished nodes: highest chain index reachable
        var onStack = Set<ObjectIdentifier>()

        for (index, root) in operations.enumerated() {
            if highestReach[ObjectIdentifier(root)] == nil {
                // Frames: the node, its dependencies, and how many have been visited.
                var stack: [(node: Operation, dependencies: [Operation], next: Int)] = [(root, root.dependencies, 0)]
                onStack.insert(ObjectIdentifier(root))
                while let top = stack.last {
                    if top.next < top.dependencies.count {
                        stack[stack.count - 1].next += 1
                        let dependency = top.dependencies[top.next]
                        let id = ObjectIdentifier(dependency)
                        if onStack.contains(id) {
                            let start = stack.firstIndex { $0.node === dependency } ?? 0
                            throw .dependencyCycle(path: stack[start...].map(\.node.reference) + [dependency.reference])
                        }
                        if highestReach[id] == nil {
                            stack.append((dependency, dependency.dependencies, 0))
                            onStack.insert(id)
                        }
                    } else {
                        var reach = -1
                        for dependency in top.dependencies {
                            let id = ObjectIdentifier(dependency)
                            reach = max(reach, position[id] ?? -1, highestReach[id] ?? -1)
                        }
                        highestReach[ObjectIdentifier(top.node)] = reach
                        onStack.remove(ObjectIdentifier(top.node))
                        stack.removeLast()
                    }
                }
            }
            let reach = highestReach[ObjectIdentifier(root)] ?? -1
            if reach >= index {
                let later = operations[reach]
                throw .dependencyCycle(path: [root.reference, later.reference, root.reference])
            }
        }
    }
}
