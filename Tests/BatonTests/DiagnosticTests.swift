import Foundation
import XCTest

@testable import Baton

final class DiagnosticTests: BatonTestCase {
    func testReplacingTheHandlerManyTimesDoesNotNestIt() {
        // A regression test: storing the handler as a bare function re-wrapped it in a conversion
        // thunk on every get and set, until calling it overflowed the stack.
        let original = Diagnostics.handler
        defer { Diagnostics.handler = original }
        // Count only this test's report: operations that earlier tests left behind may still report.
        let operation = BlockOperation()
        let id = ObjectIdentifier(operation)
        let calls = Locked(0)
        Diagnostics.handler = { diagnostic in if diagnostic.operation.id == id { calls.increment() } }
        for _ in 0..<100_000 { Diagnostics.handler = Diagnostics.handler }
        Diagnostics.report(.finishedTwice, operation)
        XCTAssertEqual(calls.value, 1)
    }

    func testADiagnosticNamesTheOperation() {
        let operation = BlockOperation()
        operation.name = "Fetch"
        let diagnostic = Diagnostic(kind: .startedTwice, operation: operation)
        XCTAssertEqual(diagnostic.operation.name, "Fetch")
        XCTAssertTrue(diagnostic.operation.operation === operation)
        XCTAssertEqual(diagnostic.description, "Baton: Fetch: start() called twice; ignored")
        XCTAssertEqual(Diagnostic(kind: .finishedTwice, operation: BlockOperation()).operation.name, "BlockOperation")
    }
}
