//___FILEHEADER___

import Baton
import XCTest
@testable import ___VARIABLE_moduleName___

/// Tests of `___VARIABLE_operationName___`.
final class ___FILEBASENAMEASIDENTIFIER___: XCTestCase {
    /// The operation succeeds. Red until its work is written: then check its output here.
    func testItSucceeds() throws {
        let operation = ___VARIABLE_operationName___()
        // TODO: Give the operation its input, if it takes one.
        let outcome = try operation.runAndWait(timeout: 10)
        XCTAssertTrue(outcome.isSucceeded, "\(outcome)")
    }

    /// Cancelled before it starts, the operation finishes cancelled without doing its work.
    func testCancellationBeforeStartEndsItCancelled() throws {
        let operation = ___VARIABLE_operationName___()
        operation.cancel()
        let outcome = try operation.runAndWait(timeout: 10)
        XCTAssertTrue(outcome.isCancelled, "\(outcome)")
    }
}
