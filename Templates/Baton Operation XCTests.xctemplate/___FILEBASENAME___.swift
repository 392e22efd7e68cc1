//___FILEHEADER___

import Baton
import XCTest
@testable import ___VARIABLE_moduleName___

/// XCTest cases of `___VARIABLE_operationName___`.
final class ___FILEBASENAMEASIDENTIFIER___: XCTestCase {
    /// The operation succeeds. Red until its work is written: then check its output here.
    func testItSucceeds() throws {
        let operation = ___VARIABLE_operationName___()
        // TODO: Give the operation its input, if it takes one.
        try operation.run(timeout: .seconds(10))
        XCTAssertTrue(operation.outcome?.isSuccess == true, "\(String(describing: operation.outcome))")
    }

    /// Cancelled before it starts, the operation finishes cancelled without doing its work.
    func testCancellationBeforeStartEndsItCancelled() {
        let operation = ___VARIABLE_operationName___()
        operation.cancel()
        XCTAssertThrowsError(try operation.run(timeout: .seconds(10))) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        XCTAssertTrue(operation.outcome?.isCancelled == true)
    }
}
