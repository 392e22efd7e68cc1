//___FILEHEADER___

import Baton
import Foundation

/// ___FILEBASENAMEASIDENTIFIER___: say in one line what this operation produces.
///
/// Add it to an `OperationQueue`, or chain it with `queue.addChain(_:)`: its output becomes the
/// next operation's input. It ends when `finish(with:)` or `finish(throwing:)` is called, once,
/// from any thread.
final class ___FILEBASENAMEASIDENTIFIER___: ResultOperation<___VARIABLE_outputType___>, @unchecked Sendable {
    /// Thrown until `perform()` is written.
    enum Failure: Error {
        case notImplemented
    }

    /// Creates the operation. Keep what `execute()` needs in `let` properties set here.
    override init() {
        super.init()
        dependencyPolicy = .___VARIABLE_dependencyPolicy___
    }

    /// Starts the work. Baton calls it once, unless the operation was cancelled first.
    override func execute() {
        DispatchQueue.global().async {
            guard !self.isCancelled else { return self.finish() }
            do {
                self.finish(with: try self.perform())
            } catch {
                self.finish(throwing: error)
            }
        }
    }

    /// The work itself: return the output, or throw to fail the operation.
    private func perform() throws -> ___VARIABLE_outputType___ {
        // TODO: Do the work here and return its output.
        throw Failure.notImplemented
    }

    /// Called when the operation is cancelled while it executes. Stop the work in flight (a task, a
    /// timer, a process); the code that then calls `finish` ends the operation cancelled.
    override func didCancel() {
        // TODO: Cancel the work started in execute(), if it can be interrupted.
    }
}
