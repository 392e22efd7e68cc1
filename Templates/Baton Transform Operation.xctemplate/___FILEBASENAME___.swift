//___FILEHEADER___

import Baton
import Foundation

/// ___FILEBASENAMEASIDENTIFIER___: say in one line what this operation makes of its input.
///
/// Set `input` before it starts, or chain it after an operation whose output is a
/// `___VARIABLE_inputType___`: the chain's adapter passes that output in. It ends when
/// `finish(with:)` or `finish(throwing:)` is called, once, from any thread.
final class ___FILEBASENAMEASIDENTIFIER___: TransformOperation<___VARIABLE_inputType___, ___VARIABLE_outputType___>, @unchecked Sendable {
    /// Thrown until `perform(_:)` is written.
    enum Failure: Error {
        case notImplemented
    }

    /// Creates the operation; its input comes later (from `input` or from a chain).
    override init() {
        super.init()
        dependencyPolicy = .___VARIABLE_dependencyPolicy___
    }

    /// Starts the work. Baton calls it once, with an input, unless the operation was cancelled first.
    override func execute() {
        guard let input else {
            return finish(throwing: upstreamError ?? BatonError.missingInput(operation: OperationReference(self)))
        }
        DispatchQueue.global().async {
            guard !self.isCancelled else { return self.finish() }
            do {
                self.finish(with: try self.perform(input))
            } catch {
                self.finish(throwing: error)
            }
        }
    }

    /// The work itself: turn the input into the output, or throw to fail the operation.
    private func perform(_ input: ___VARIABLE_inputType___) throws -> ___VARIABLE_outputType___ {
        // TODO: Do the work here and return its output.
        throw Failure.notImplemented
    }

    /// Called when the operation is cancelled while it executes. Stop the work in flight (a task, a
    /// timer, a process); the code that then calls `finish` ends the operation cancelled.
    override func didCancel() {
        // TODO: Cancel the work started in execute(), if it can be interrupted.
    }
}
