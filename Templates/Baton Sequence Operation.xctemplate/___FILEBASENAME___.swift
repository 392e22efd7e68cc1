//___FILEHEADER___

import Baton
import Foundation

/// ___FILEBASENAMEASIDENTIFIER___: say in one line what this sequence of operations does.
///
/// Its steps run one after another; each step's output becomes the next step's input, the first
/// failure or cancellation stops the sequence, and the last step's output is the sequence's output.
final class ___FILEBASENAMEASIDENTIFIER___: SequenceOperation<___VARIABLE_outputType___>, @unchecked Sendable {
    /// Creates the sequence and its steps.
    init() {
        super.init(operations: [
            // TODO: The steps, in order; the last one produces a `___VARIABLE_outputType___`.
        ])
    }
}
