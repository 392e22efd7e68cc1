import Baton
import Dispatch
import Foundation
import XCTest

// The examples of Docs/Subclassing.md, verbatim (DocumentationTests checks that they are here).

/// Counts the words of a text on a background queue.
final class CountWords: TransformOperation<String, Int>, @unchecked Sendable {
    override func execute() {
        guard let text = input else { return finish(throwing: BatonError.missingInput(operation: OperationReference(self))) }
        DispatchQueue.global().async {
            self.finish(with: text.split(separator: " ").count)
        }
    }
}

/// Ticks until it is cancelled.
final class Metronome: AsyncOperation, @unchecked Sendable {
    private let timer = DispatchSource.makeTimerSource()

    override func execute() {
        timer.schedule(deadline: .now(), repeating: .milliseconds(10))
        timer.setEventHandler { print("tick") }
        timer.resume()
    }

    override func didCancel() {
        timer.cancel()
        finish()
    }
}

/// Counts attempts (a helper of the rerun example).
final class AttemptCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    var count: Int { lock.withLock { value } }
    func next() -> Int {
        lock.withLock {
            value += 1
            return value
        }
    }
}

final class SubclassingExamples: BatonTestCase {
    func testTheSolution() {
        let count = CountWords(input: "one two three")
        OperationQueue().addOperation(count)
        count.waitUntilFinished()
        print(count.output ?? 0)   // 3
        XCTAssertEqual(count.output, 3)
    }

    func testCancellation() {
        let metronome = Metronome()
        metronome.start()
        metronome.cancel()
        print(metronome.outcome!)   // cancelled
        XCTAssertTrue(metronome.outcome?.isCancelled == true)
    }

    func testDependencies() {
        let download = ResultBlockOperation<Int> { $0.finish(throwing: URLError(.notConnectedToInternet)) }
        let unzip = AsyncBlockOperation { $0.finish() }
        unzip.addDependency(download)
        let queue = OperationQueue()
        queue.addOperations([download, unzip], waitUntilFinished: true)
        print(unzip.outcome!)   // failed(dependency ResultBlockOperation<Int> failed: ...)
        guard case .failed(BatonError.dependencyFailed(let name, let underlying))? = unzip.outcome else {
            return XCTFail("expected dependencyFailed, got \(String(describing: unzip.outcome))")
        }
        XCTAssertTrue(name.operation === download)
        XCTAssertEqual((underlying as? URLError)?.code, .notConnectedToInternet)
    }

    func testObservers() {
        let job = ResultBlockOperation<Int> { $0.finish(with: 1) }
        job.onStart { print("started") }
        job.onFinish { [unowned job] outcome in
            print("outcome \(outcome), finished yet: \(job.isFinished)")   // outcome succeeded(1), finished yet: false
        }
        job.start()
        XCTAssertEqual(job.output, 1)
    }

    func testDiagnostics() {
        let previous = Diagnostics.handler
        Diagnostics.handler = { diagnostic in print(diagnostic) }
        let twice = AsyncBlockOperation { operation in
            operation.finish()
            operation.finish()   // Baton: AsyncBlockOperation: finish called after the outcome was decided; ignored
        }
        twice.start()
        Diagnostics.handler = previous
        XCTAssertTrue(twice.outcome?.isSuccess == true)
    }

    func testTheBlockForms() {
        let attempts = AttemptCounter()   // a thread-safe counter: Tests/BatonTests/Documentation/SubclassingExamples.swift
        let flaky = AsyncBlockOperation { operation in
            if attempts.next() < 3 { operation.rerun() } else { operation.finish() }
        }
        flaky.start()
        flaky.waitUntilFinished()
        print(attempts.count)   // 3
        XCTAssertEqual(attempts.count, 3)
    }
}
