import Dispatch
import Foundation
import XCTest
import Baton

// The examples of Docs/Concurrency.md, verbatim (DocumentationTests checks that they are here).

/// A stand-in for a client with an async API.
struct WeatherClient: Sendable {
    func temperature(in city: String) async throws -> Double {
        try await Task.sleep(nanoseconds: 1_000_000)
        return city == "Oslo" ? -3 : 21
    }
}

final class ConcurrencyExamples: BatonTestCase {
    func testSynchronousWaiting() throws {
        let greeting = ResultBlockOperation<String> { operation in
            DispatchQueue.global().async { operation.finish(with: "hi") }
        }
        let text = try greeting.runAndWaitForOutput(timeout: 5)
        print(text)   // hi
        XCTAssertEqual(text, "hi")
    }

    func testDeadlockRefused() {
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        serial.addOperation {
            do {
                try AsyncBlockOperation { $0.finish() }.runAndWait(on: serial, timeout: 5)
            } catch {
                print(error)   // waiting for AsyncBlockOperation would deadlock: called from the serial queue that must run it
            }
        }
        serial.waitUntilAllOperationsAreFinished()
    }

    func testAwaiting() async throws {
        let queue = OperationQueue()
        let doubled = try await TransformBlockOperation<Int, Int>(transform: { $0 * 2 }).configured(input: 21).value(on: queue)
        print(doubled)   // 42
        XCTAssertEqual(doubled, 42)
    }

    func testAnAsyncClosure() async throws {
        let client = WeatherClient()
        let oslo = AsyncTaskOperation { try await client.temperature(in: "Oslo") }
        let report = TransformBlockOperation<Double, String> { $0.finish(with: "Oslo: \($0.input!) °C") }
        let handle = try OperationQueue().addChain([oslo, report])
        print(try await handle.value())   // Oslo: -3.0 °C
    }
}

extension TransformOperation {
    /// Sets the input and returns the operation (a helper of the examples).
    func configured(input: Input) -> Self {
        self.input = input
        return self
    }
}
