import Baton
import Dispatch
import Foundation
import XCTest

// The examples of Docs/GettingStarted.md, verbatim (DocumentationTests checks that they are here).

final class GettingStartedExamples: BatonTestCase {
    func testAFirstOperation() {
        let queue = OperationQueue()
        let hello = ResultBlockOperation<String> { operation in
            DispatchQueue.global().async {
                operation.finish(with: "hello")
            }
        }
        queue.addOperation(hello)
        hello.waitUntilFinished()
        print(hello.output ?? "nothing")   // hello
        XCTAssertEqual(hello.output, "hello")
    }

    func testOutcomes() {
        struct OutOfCoffee: Error {}
        let brew = ResultBlockOperation<Int> { operation in
            operation.finish(throwing: OutOfCoffee())
        }
        brew.start()
        switch brew.outcome {
        case .succeeded(let cups)?: print("\(cups) cups")
        case .failed(let error)?: print("failed: \(error)")   // failed: OutOfCoffee()
        case .cancelled?: print("cancelled")
        case nil: print("still running")
        }
        XCTAssertTrue(brew.outcome?.error is OutOfCoffee)
    }

    func testChains() throws {
        let numbers = OperationQueue()
        let chain = try numbers.addChain([
            ResultBlockOperation<Int> { $0.finish(with: 6) },
            TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! * 7) },
            TransformBlockOperation<Int, String> { $0.finish(with: "answer: \($0.input!)") },
        ])
        print(try chain.wait(timeout: .seconds(5)))   // answer: 42
        XCTAssertEqual(chain.outcome?.output as? String, "answer: 42")
    }

    func testTypedChains() async throws {
        let answer = try await Chain(ResultBlockOperation<Int> { $0.finish(with: 6) })
            .map { $0 * 7 }
            .run(on: OperationQueue())
        print(answer)   // 42
        XCTAssertEqual(answer, 42)
    }
}
