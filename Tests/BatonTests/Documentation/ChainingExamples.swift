import Baton
import Foundation
import XCTest

// The examples of Docs/Chaining.md, verbatim (DocumentationTests checks that they are here).

enum RatingError: Error {
    case tooManyStars(Int)
}

final class ChainingExamples: BatonTestCase {
    func testTheSolution() throws {
        let queue = OperationQueue()
        let handle = try queue.addChain([
            ResultBlockOperation<String> { $0.finish(with: "3 blind mice") },
            TransformBlockOperation<String, Int> { $0.finish(with: $0.input!.split(separator: " ").count) },
            BlockOperation { print("plain Foundation operations take part too") },
            ResultBlockOperation<String> { $0.finish(with: "done") },
        ])
        print(try handle.wait(timeout: .seconds(5)))   // done
        XCTAssertEqual(handle.outcome?.output as? String, "done")
        XCTAssertTrue(handle.unfinishedOperations.isEmpty)
    }

    func testChainsMadeAsTheyGo() throws {
        let countdown = try OperationQueue().addChain(first: ResultBlockOperation<Int> { $0.finish(with: 3) }) { previous in
            guard let number = (previous as? ResultOperation<Int>)?.output, number > 0 else { return nil }
            return TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! - 1) }
        }
        print(try countdown.wait(timeout: .seconds(5)))   // 0
        XCTAssertEqual(countdown.outcome?.output as? Int, 0)
    }

    // Laid out as in Docs/Chaining.md, which DocumentationTests compares it with: not reformatted.
    // swift-format-ignore
    func testCustomAdapters() throws {
        let stars = ChainAdapter.custom { upstream, downstream in
            guard let count = (upstream as? ResultOperation<Int>)?.output,
                  let next = downstream as? TransformOperation<String, String> else { return }
            guard count <= 10 else { throw RatingError.tooManyStars(count) }
            next.input = String(repeating: "*", count: count)
        }
        let rating = try OperationQueue().addChain([
            ResultBlockOperation<Int> { $0.finish(with: 4) },
            TransformBlockOperation<String, String> { $0.finish(with: "rating: \($0.input!)") },
        ], adapter: stars)
        print(try rating.wait(timeout: .seconds(5)))   // rating: ****
        XCTAssertEqual(rating.outcome?.output as? String, "rating: ****")
    }

    func testTheTypedBuilder() async throws {
        let length = try await Chain(ResultBlockOperation<String> { $0.finish(with: "relay") })
            .map { $0.uppercased() }
            .then(TransformBlockOperation<String, Int> { $0.finish(with: $0.input!.count) })
            .run(on: OperationQueue())
        print(length)   // 5
        XCTAssertEqual(length, 5)
    }

    func testBadInput() {
        let twice = ResultBlockOperation<Int> { $0.finish(with: 1) }
        do {
            try OperationQueue().addChain([twice, twice])
        } catch {
            print(error)   // ResultBlockOperation<Int> appears more than once in the chain or composite
        }
        XCTAssertThrowsError(try OperationQueue().addChain([twice, twice])) { error in
            XCTAssertEqual("\(error)", "ResultBlockOperation<Int> appears more than once in the chain or composite")
        }
    }

    func testSideBySide() throws {
        let queue = OperationQueue()
        let fetch = ResultBlockOperation<String> { $0.finish(with: "<recipe/>") }
        let parse = TransformBlockOperation<String, Int> { $0.finish(with: $0.input!.count) }
        let save = TransformBlockOperation<Int, Bool> { $0.finish(with: $0.input! > 0) }
        let saved = try queue.addChain([fetch, parse, save])
        print(try saved.wait(timeout: .seconds(5)))   // true
        XCTAssertEqual(saved.outcome?.output as? Bool, true)
    }
}
