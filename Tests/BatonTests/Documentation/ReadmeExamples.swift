// The example on the first screen of README.md, verbatim (DocumentationTests checks that it is here).
// Its imports stay as README.md has them, after XCTest's.
// swift-format-ignore-file: OrderedImports

import XCTest
import Baton
import Foundation

/// Rolls a die (always a four: it is a demo) on another thread, as real work would.
final class Roll: ResultOperation<Int>, @unchecked Sendable {
    override func execute() {
        DispatchQueue.global().async { self.finish(with: 4) }
    }
}

/// Squares its input.
final class Square: TransformOperation<Int, Int>, @unchecked Sendable {
    override func execute() {
        guard let number = input else { return finish(throwing: BatonError.missingInput(operation: OperationReference(self))) }
        finish(with: number * number)
    }
}

/// Describes its input.
final class Describe: TransformOperation<Int, String>, @unchecked Sendable {
    override func execute() {
        finish(with: "the square is \(input ?? 0)")
    }
}

final class ReadmeExamples: BatonTestCase {
    func testTheFirstExamplePrintsWhatTheReadmeShows() throws {
        let queue = OperationQueue()
        let chain = try queue.addChain(Chain(Roll()).then(Square()).then(Describe()))
        let text = try chain.wait(timeout: .seconds(5))   // a String: the chain is typed
        print(text)
        print(chain.outcome!)
        print("\(chain.unfinishedOperations.count) operations left: the handle let go of each one it finished")

        struct DemoError: Error {}
        let failing = try queue.addChain(Chain(ResultBlockOperation<Int> { $0.finish(throwing: DemoError()) }).then(Square()))
        do {
            try failing.wait(timeout: .seconds(5))
        } catch {
            print("failed: \(error)")
        }

        // The README's "Output" block, line by line.
        XCTAssertEqual(text, "the square is 16")
        XCTAssertEqual("\(chain.outcome!)", "succeeded(the square is 16)")
        XCTAssertEqual(
            "\(chain.unfinishedOperations.count) operations left: the handle let go of each one it finished",
            "0 operations left: the handle let go of each one it finished")
        XCTAssertThrowsError(try failing.wait(timeout: .seconds(5))) { XCTAssertEqual("failed: \($0)", "failed: DemoError()") }
    }
}
