import Baton
import Dispatch
import Foundation
import XCTest

// The examples of Docs/Concurrency.md, verbatim (DocumentationTests checks that they are here).

/// A stand-in for a client with an async API.
struct WeatherClient: Sendable {
    func temperature(in city: String) async throws -> Double {
        await Task.yield()   // a real client would suspend on the network here
        return city == "Oslo" ? -3 : 21
    }
}

final class ConcurrencyExamples: BatonTestCase {
    func testSynchronousWaiting() throws {
        let greeting = ResultBlockOperation<String> { operation in
            DispatchQueue.global().async { operation.finish(with: "hi") }
        }
        let text = try greeting.run(timeout: .seconds(5))
        print(text)   // hi
        XCTAssertEqual(text, "hi")
    }

    func testDeadlockRefused() {
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        serial.addOperation {
            do {
                try AsyncBlockOperation { $0.finish() }.run(on: serial, timeout: .seconds(5))
            } catch {
                print(error)   // waiting for AsyncBlockOperation would deadlock: called from the serial queue that must run it
            }
        }
        serial.waitUntilAllOperationsAreFinished()
    }

    func testAwaiting() async throws {
        let doubled = try await TransformBlockOperation(input: 21) { $0 * 2 }.run()
        print(doubled)   // 42
        XCTAssertEqual(doubled, 42)
    }

    func testAnAsyncClosure() async throws {
        let client = WeatherClient()
        let oslo = AsyncTaskOperation { try await client.temperature(in: "Oslo") }
        let report = TransformBlockOperation<Double, String> { $0.finish(with: "Oslo: \($0.input!) °C") }
        let forecast = try await OperationQueue().addChain(Chain(oslo).then(report)).value
        print(forecast)   // Oslo: -3.0 °C
        XCTAssertEqual(forecast, "Oslo: -3.0 °C")
    }
}
