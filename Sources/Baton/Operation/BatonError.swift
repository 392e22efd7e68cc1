/// The errors Baton itself reports. Each case names the operation (or operations) at fault.
///
/// Operations are named by their `name`, or by their type when they have none. Errors thrown by
/// your own operations are passed along unchanged; Baton wraps them only when it has to say where an
/// error came from (``dependencyFailed(dependency:underlying:)``).
public enum BatonError: Error, Sendable {
    /// A dependency failed, so the operation was skipped (``DependencyPolicy/skipOnFailureOrCancellation``).
    case dependencyFailed(dependency: String, underlying: any Error)
    /// A chain adapter found an upstream output whose type is not the downstream operation's input.
    case inputTypeMismatch(operation: String, expected: String, actual: String)
    /// An input-taking operation was started without an input.
    case missingInput(operation: String)
    /// An operation with an output called `finish()` without one.
    case missingOutput(operation: String)
    /// A subclass of ``AsyncOperation`` did not override `execute()`.
    case executeNotOverridden(operation: String)
    /// The same operation appears twice in a chain.
    case duplicateOperation(operation: String)
    /// The operation already belongs to a chain or queue.
    case alreadyEnqueued(operation: String)
    /// The operation is already executing.
    case alreadyExecuting(operation: String)
    /// The operation has already finished.
    case alreadyFinished(operation: String)
    /// Chaining these operations would close a dependency cycle; the path lists it in order.
    case dependencyCycle(path: [String])
    /// A wait ran out of time before the work finished.
    case timedOut(seconds: Double)
    /// Children of a group failed; the errors are in the order the children finished.
    case childrenFailed(group: String, errors: [any Error])
    /// A node of an operation tree failed; `path` leads from the root to it (`node[index]` steps).
    case treeNodeFailed(path: [String], underlying: any Error)
    /// Several nodes of an operation tree failed; each failure is a ``treeNodeFailed(path:underlying:)``.
    case treeFailed(failures: [BatonError])
    /// The last child of a sequence produced a value that is not the sequence's `Output`.
    case outputTypeMismatch(operation: String, expected: String, actual: String)
    /// A parameter is out of range; the text says which and why.
    case invalidArgument(operation: String, reason: String)
    /// Waiting here would block the thread that must run the operation.
    case wouldDeadlock(operation: String, reason: String)
}

extension BatonError: CustomStringConvertible {
    /// A one-line explanation that names the culprit.
    public var description: String {
        switch self {
        case .dependencyFailed(let dependency, let underlying):
            return "dependency \(dependency) failed: \(underlying)"
        case .inputTypeMismatch(let operation, let expected, let actual):
            return "\(operation) takes an input of type \(expected) but received \(actual)"
        case .missingInput(let operation):
            return "\(operation) was started without an input"
        case .missingOutput(let operation):
            return "\(operation) finished without an output; call finish(with:)"
        case .executeNotOverridden(let operation):
            return "\(operation) does not override execute()"
        case .duplicateOperation(let operation):
            return "\(operation) appears more than once in the chain"
        case .alreadyEnqueued(let operation):
            return "\(operation) already belongs to a chain or queue"
        case .alreadyExecuting(let operation):
            return "\(operation) is already executing"
        case .alreadyFinished(let operation):
            return "\(operation) has already finished"
        case .dependencyCycle(let path):
            return "chaining would create a dependency cycle: \(path.joined(separator: " -> "))"
        case .timedOut(let seconds):
            return "timed out after \(seconds) s"
        case .childrenFailed(let group, let errors):
            return "\(errors.count) child operation(s) of \(group) failed: \(errors.map { "\($0)" }.joined(separator: "; "))"
        case .treeNodeFailed(let path, let underlying):
            return "tree node \(path.joined(separator: " / ")) failed: \(underlying)"
        case .treeFailed(let failures):
            return "\(failures.count) tree node(s) failed: \(failures.map(\.description).joined(separator: "; "))"
        case .outputTypeMismatch(let operation, let expected, let actual):
            return "\(operation) produces \(expected) but its last step produced \(actual)"
        case .invalidArgument(let operation, let reason):
            return "\(operation): \(reason)"
        case .wouldDeadlock(let operation, let reason):
            return "waiting for \(operation) would deadlock: \(reason)"
        }
    }
}
