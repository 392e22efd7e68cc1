//___FILEHEADER___

import Baton
import Testing
@testable import ___VARIABLE_moduleName___

/// Tests of `___VARIABLE_operationName___`.
@Suite struct ___FILEBASENAMEASIDENTIFIER___ {
    /// The operation succeeds. Red until its work is written: then check its output here.
    @Test func itSucceeds() throws {
        let operation = ___VARIABLE_operationName___()
        // TODO: Give the operation its input, if it takes one.
        try operation.run(timeout: .seconds(10))
        #expect(operation.outcome?.isSuccess == true)
    }

    /// Cancelled before it starts, the operation finishes cancelled without doing its work.
    @Test func cancellationBeforeStartEndsItCancelled() {
        let operation = ___VARIABLE_operationName___()
        operation.cancel()
        #expect(throws: CancellationError.self) { try operation.run(timeout: .seconds(10)) }
        #expect(operation.outcome?.isCancelled == true)
    }
}
