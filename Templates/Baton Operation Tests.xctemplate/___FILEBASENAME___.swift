//___FILEHEADER___

import Baton
import Testing
@testable import ___VARIABLE_moduleName___

/// Tests of `___VARIABLE_operationName___`.
@Suite struct ___FILEBASENAMEASIDENTIFIER___ {
    // The tests are `async` and await the operation: Swift Testing runs tests in parallel on the
    // shared concurrency pool, which a blocking wait would starve.

    /// The operation succeeds. Red until its work is written: then check its output here.
    @Test(.timeLimit(.minutes(1))) func itSucceeds() async throws {
        let operation = ___VARIABLE_operationName___()
        // TODO: Give the operation its input, if it takes one.
        try await operation.run()
        #expect(operation.outcome?.isSuccess == true)
    }

    /// Cancelled before it starts, the operation finishes cancelled without doing its work.
    @Test(.timeLimit(.minutes(1))) func cancellationBeforeStartEndsItCancelled() async {
        let operation = ___VARIABLE_operationName___()
        operation.cancel()
        await #expect(throws: CancellationError.self) { try await operation.run() }
        #expect(operation.outcome?.isCancelled == true)
    }
}
