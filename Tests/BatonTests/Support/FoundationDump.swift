import Foundation

/// What Linux's Foundation keeps about an operation and its queue (read by reflection), for the reports
/// of hammer tests that find something stuck: whether the queue would dispatch the operation, and if
/// not, why. An empty string where Foundation's fields cannot be read (Apple platforms).
enum FoundationDump {
    /// The fields of `Operation` (the level Foundation declares) that decide dispatching.
    static func of(_ operation: Operation) -> String {
        guard let mirror = levelMirror(operation, named: "Operation") else { return "" }
        var parts: [String] = []
        for child in mirror.children {
            switch child.label {
            case "__cachedIsReady", "__unfinishedDependencyCount", "__state", "__isCancelled":
                parts.append("\(child.label!)=\(child.value)")
            case "__dependencies":
                let dependencies = child.value as? [Operation] ?? []
                parts.append("deps=\(dependencies.map { "\(type(of: $0)):\($0.isFinished ? "done" : "pending")" })")
            default:
                break
            }
        }
        return parts.joined(separator: " ")
    }

    /// How many dependents Foundation keeps in `operation` (its unretained `__downDependencies`, the
    /// pointers its finish follows), or `nil` where they cannot be read. Read it only while nothing
    /// changes them.
    static func dependentCount(of operation: Operation) -> Int? {
        guard let mirror = levelMirror(operation, named: "Operation"),
            let dependents = mirror.children.first(where: { $0.label == "__downDependencies" })
        else { return nil }
        return Mirror(reflecting: dependents.value).children.count
    }

    /// The fields of `OperationQueue` that decide dispatching, and the operations in its lists.
    static func of(_ queue: OperationQueue) -> String {
        guard let mirror = levelMirror(queue, named: "OperationQueue") else { return "" }
        var parts: [String] = []
        for child in mirror.children {
            switch child.label {
            case "__numExecOps", "__actualMaxNumOps", "__suspended", "__operationCount":
                parts.append("\(child.label!)=\(child.value)")
            default:
                break
            }
        }
        let listed = listed(in: queue).map { "\(type(of: $0)) \(of($0))" }
        return parts.joined(separator: " ") + "\n  listed:\n    " + listed.joined(separator: "\n    ")
    }

    /// Every operation `queue` still lists, barriers included (read without the queue's lock: for a
    /// queue that nothing changes meanwhile).
    static func listed(in queue: OperationQueue) -> [Operation] {
        guard let mirror = levelMirror(queue, named: "OperationQueue") else { return [] }
        var listed: [Operation] = []
        for child in mirror.children where child.label == "__firstOperation" {
            var next = child.value as? Unmanaged<Operation>
            while let current = next?.takeUnretainedValue() {
                listed.append(current)
                next =
                    levelMirror(current, named: "Operation")?.children
                    .first { $0.label == "__nextOperation" }?.value as? Unmanaged<Operation>
            }
        }
        return listed
    }

    private static func levelMirror(_ object: AnyObject, named name: String) -> Mirror? {
        var mirror: Mirror? = Mirror(reflecting: object)
        while let current = mirror {
            if "\(current.subjectType)" == name { return current }
            mirror = current.superclassMirror
        }
        return nil
    }
}
