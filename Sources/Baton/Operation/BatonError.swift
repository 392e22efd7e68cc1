/// The errors Baton itself reports. Each case names the operation (or operations) at fault.
///
/// An operation is named by an ``OperationReference``: its display name (`name`, or its type when it
/// has none) and its identity, which leads back to the operation while it lives, so two unnamed
/// operations of one type are told apart. ``culprit`` gives it for any case that names one operation.
/// Errors thrown by your own operations are passed along unchanged; Baton wraps them only when it has
/// to say where an error came from (``dependencyFailed(dependency:underlying:)``).
public enum BatonError: Error, Sendable {
    /// A dependency failed, so the operation was skipped (``DependencyPolicy/skipOnFailureOrCancellation``).
    case dependencyFailed(dependency: OperationReference, underlying: any Error)
    /// A chain adapter found an upstream output whose type is not the downstream operation's input.
    case inputTypeMismatch(operation: OperationReference, expected: String, actual: String)
    /// An input-taking operation was started without an input.
    case missingInput(operation: OperationReference)
    /// An operation with an output called `finish()` without one.
    case missingOutput(operation: OperationReference)
    /// A ``SequenceOperation`` with an output was given no steps, so nothing could produce it.
    case emptySequence(operation: OperationReference)
    /// A subclass of ``AsyncOperation`` did not override `execute()`.
    case executeNotOverridden(operation: OperationReference)
    /// The same operation appears twice in a chain or a composite.
    case duplicateOperation(operation: OperationReference)
    /// The operation already belongs to a chain, a composite, a queue or a wait.
    case alreadyEnqueued(operation: OperationReference)
    /// The operation is already executing.
    case alreadyExecuting(operation: OperationReference)
    /// The operation has already finished.
    case alreadyFinished(operation: OperationReference)
    /// Chaining these operations would close a dependency cycle; the path lists it in order.
    case dependencyCycle(path: [OperationReference])
    /// A blocking wait ran out of time before `operation` finished (for a chain: its first operation
    /// that had not finished), or the operation's own ``AsyncOperation/timeout`` ran out while it
    /// executed (it then fails with this error).
    case timedOut(operation: OperationReference, after: Duration)
    /// Children of a group failed; the errors are in the order the children finished.
    case childrenFailed(group: OperationReference, errors: [any Error])
    /// A node of an operation tree failed; `path` leads from the root to it (`node[index]` steps), and
    /// `operation` is the operation that failed (`nil` when the node's item mapping failed, before
    /// any operation existed).
    case treeNodeFailed(path: [String], operation: OperationReference?, underlying: any Error)
    /// Several nodes of an operation tree failed; each failure is a
    /// ``treeNodeFailed(path:operation:underlying:)``.
    case treeFailed(failures: [BatonError])
    /// A tree node was freed while its tree ran. Since nodes joined by `addChild` live and die
    /// together, and a tree holds its root's, Baton no longer produces it; the case stays so that
    /// existing `switch`es keep compiling.
    case treeNodeFreed(node: String)
    /// The last child of a sequence produced a value that is not the sequence's `Output`.
    case outputTypeMismatch(operation: OperationReference, expected: String, actual: String)
    /// A parameter is out of range; the text says which and why.
    case invalidArgument(operation: OperationReference, reason: String)
    /// Waiting here would block the thread that must run the operation, or wait for a category the
    /// waiting operation holds.
    case wouldDeadlock(operation: OperationReference, reason: String)
    /// A condition of the operation failed (or its produced dependency did), so it did not execute;
    /// `underlying` is the condition's error.
    case conditionFailed(operation: OperationReference, condition: String, underlying: any Error)
    /// A condition did not answer within its timeout (the underlying error of a
    /// ``conditionFailed(operation:condition:underlying:)``).
    case conditionTimedOut(condition: String, after: Duration)
    /// A category's limit must be at least 1 and its name must not be empty.
    case invalidLimit(category: String, limit: Int)
    /// A category's rate must let at least 1 operation start per window, its window must be above
    /// zero, and its name must not be empty.
    case invalidRate(category: String, count: Int, interval: Duration)

    /// The one operation the error names, or `nil` for the cases that name a cycle, several failures,
    /// or a tree node without an operation.
    public var culprit: OperationReference? {
        switch self {
        case .dependencyFailed(let operation, _), .inputTypeMismatch(let operation, _, _),
            .missingInput(let operation), .missingOutput(let operation), .emptySequence(let operation),
            .executeNotOverridden(let operation), .duplicateOperation(let operation),
            .alreadyEnqueued(let operation), .alreadyExecuting(let operation),
            .alreadyFinished(let operation), .timedOut(let operation, _), .childrenFailed(let operation, _),
            .outputTypeMismatch(let operation, _, _), .invalidArgument(let operation, _),
            .wouldDeadlock(let operation, _), .conditionFailed(let operation, _, _):
            return operation
        case .treeNodeFailed(_, let operation, _):
            return operation
        case .dependencyCycle, .treeFailed, .treeNodeFreed, .conditionTimedOut, .invalidLimit, .invalidRate:
            return nil
        }
    }
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
        case .emptySequence(let operation):
            return "\(operation) has no steps, so nothing produces its output; give init(operations:) at least one operation"
        case .executeNotOverridden(let operation):
            return "\(operation) does not override execute()"
        case .duplicateOperation(let operation):
            return "\(operation) appears more than once in the chain or composite"
        case .alreadyEnqueued(let operation):
            return "\(operation) already belongs to a chain, a composite, a queue or a wait"
        case .alreadyExecuting(let operation):
            return "\(operation) is already executing"
        case .alreadyFinished(let operation):
            return "\(operation) has already finished"
        case .dependencyCycle(let path):
            return "chaining would create a dependency cycle: \(path.map(\.name).joined(separator: " -> "))"
        case .timedOut(let operation, let duration):
            return "\(operation) timed out after \(duration)"
        case .childrenFailed(let group, let errors):
            return "\(errors.count) child operation(s) of \(group) failed: \(errors.map { "\($0)" }.joined(separator: "; "))"
        case .treeNodeFailed(let path, _, let underlying):
            return "tree node \(path.joined(separator: " / ")) failed: \(underlying)"
        case .treeFailed(let failures):
            return "\(failures.count) tree node(s) failed: \(failures.map(\.description).joined(separator: "; "))"
        case .treeNodeFreed(let node):
            return "tree node \(node) was freed while its tree ran"
        case .outputTypeMismatch(let operation, let expected, let actual):
            return "\(operation) produces \(expected) but its last step produced \(actual)"
        case .invalidArgument(let operation, let reason):
            return "\(operation): \(reason)"
        case .wouldDeadlock(let operation, let reason):
            return "waiting for \(operation) would deadlock: \(reason)"
        case .conditionFailed(let operation, let condition, let underlying):
            return "condition '\(condition)' of \(operation) failed: \(underlying)"
        case .conditionTimedOut(let condition, let duration):
            return "condition '\(condition)' did not answer within \(duration)"
        case .invalidLimit(let category, let limit):
            return "the limit of category \(category) must be at least 1 (and its name not empty), got \(limit)"
        case .invalidRate(let category, let count, let interval):
            return "the rate of category \(category) must let at least 1 start in a window above zero (and its name "
                + "not be empty), got \(count) per \(interval)"
        }
    }
}
