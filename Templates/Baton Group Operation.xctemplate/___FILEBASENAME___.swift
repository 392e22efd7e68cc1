//___FILEHEADER___

import Baton
import Foundation

/// ___FILEBASENAMEASIDENTIFIER___: say in one line what this group of operations does.
///
/// Its children run concurrently on the group's own queue; the group finishes after all of them,
/// fails with every child's error if any failed, and cancels every child when it is cancelled.
final class ___FILEBASENAMEASIDENTIFIER___: GroupOperation, @unchecked Sendable {
    /// Creates the group and its children.
    init() {
        super.init(
            operations: [
                // TODO: The children, for example:
                AsyncBlockOperation { operation in operation.finish() },
            ],
            failurePolicy: .___VARIABLE_failurePolicy___
        )
    }

    /// Called once for each child when it has finished, before the group counts it.
    override func childDidFinish(_ child: Operation) {
        // TODO: React to the child (read `(child as? AsyncOperation)?.outcome`); you may add more
        // children here with `try addChild(_:)`.
    }
}
