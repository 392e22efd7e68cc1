import Foundation
import XCTest
@testable import Baton

final class DiagnosticTests: BatonTestCase {
    func testReplacingTheHandlerManyTimesDoesNotNestIt() {
        // A regression test: storing the handler as a bare function re-wrapped it in a conversion
        // thunk on every get and set, until calling it overflowed the stack.
        let original = Diagnostics.handler
        defer { Diagnostics.handler = original }
        let calls = Locked(0)
        Diagnostics.handler = { _ in calls.increment() }
        for _ in 0..<100_000 { Diagnostics.handler = Diagnostics.handler }
        Diagnostics.report(.finishedTwice, BlockOperation())
        XCTAssertEqual(calls.value, 1)
    }

    func testADiagnosticNamesTheOperation() {
        let operation = BlockOperation()
        operation.name = "Fetch"
        let diagnostic = Diagnostic(kind: .startedTwice, operation: operation)
        XCTAssertEqual(diagnostic.operationName, "Fetch")
        XCTAssertEqual(diagnostic.operationID, ObjectIdentifier(operation))
        XCTAssertEqual(diagnostic.description, "Baton: Fetch: start() called twice; ignored")
        XCTAssertEqual(Diagnostic(kind: .finishedTwice, operation: BlockOperation()).operationName, "BlockOperation")
    }
}
