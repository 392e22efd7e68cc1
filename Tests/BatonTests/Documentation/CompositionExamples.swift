import Baton
import Dispatch
import Foundation
import XCTest

// The examples of Docs/Composition.md, verbatim (DocumentationTests checks that they are here).

/// Pretends to measure a file: the size is the name's length, after a short wait.
final class MeasureFile: ResultOperation<Int>, @unchecked Sendable {
    let fileName: String
    init(name: String) {
        fileName = name
        super.init()
    }

    override func execute() {
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(fileName.count)) {
            self.finish(with: self.fileName.count)
        }
    }
}

/// Resizes the images of an album, three at a time, and stops at the first failure.
final class ResizeAlbum: GroupOperation, @unchecked Sendable {
    let resized = ResizedCount()

    init(images: [String]) {
        super.init(
            operations: images.map { image in ResultBlockOperation<String> { $0.finish(with: "small-\(image)") } },
            failurePolicy: .cancelSiblingsOnFailure,
            maxConcurrentOperationCount: 3
        )
    }

    override func childDidFinish(_ child: Operation) {
        if (child as? ResultOperation<String>)?.output != nil { resized.increment() }
    }
}

/// A thread-safe count (a helper of the group subclass example).
final class ResizedCount: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    var count: Int { lock.withLock { value } }
    func increment() { lock.withLock { value += 1 } }
}

final class CompositionExamples: BatonTestCase {
    func testAGroup() {
        let queue = OperationQueue()
        let sizes = ResultGroupOperation(operations: ["a.txt", "bb.txt", "ccc.txt"].map { MeasureFile(name: $0) })
        queue.addOperation(sizes)
        sizes.waitUntilFinished()
        print(sizes.output!)   // [5, 6, 7], in the order given, whatever order they finished in
        XCTAssertEqual(sizes.output, [5, 6, 7])
    }

    func testAGroupSubclass() {
        let album = ResizeAlbum(images: ["cat.png", "dog.png", "owl.png", "fox.png"])
        OperationQueue().addOperation(album)
        album.waitUntilFinished()
        print(album.resized.count)   // 4
        XCTAssertEqual(album.resized.count, 4)
    }

    func testASequence() {
        let recipe = SequenceOperation<String>(operations: [
            ResultBlockOperation<Int> { $0.finish(with: 7) },
            TransformBlockOperation<Int, String> { $0.finish(with: "recipe #\($0.input!)") },
            TransformBlockOperation<String, String> { $0.finish(with: $0.input!.uppercased()) },
        ])
        OperationQueue().addOperation(recipe)
        recipe.waitUntilFinished()
        print(recipe.output!)   // RECIPE #7
        XCTAssertEqual(recipe.output, "RECIPE #7")
    }

    func testAGeneratedSequence() {
        let pages = SequenceOperation<Int>(first: ResultBlockOperation<Int> { $0.finish(with: 1) }) { previous in
            guard let page = (previous as? ResultOperation<Int>)?.output, page < 5 else { return nil }
            return ResultBlockOperation<Int> { $0.finish(with: page + 1) }
        }
        OperationQueue().addOperation(pages)
        pages.waitUntilFinished()
        print(pages.output!, pages.progress.completedUnitCount)   // 5 5
        XCTAssertEqual(pages.output, 5)
        XCTAssertEqual(pages.progress.completedUnitCount, 5)
    }

    // Laid out as in Docs/Composition.md, which DocumentationTests compares it with: not reformatted.
    // swift-format-ignore
    func testNesting() {
        let both = ResultGroupOperation<Int>(operations: [
            SequenceOperation<Int>(operations: [MeasureFile(name: "left"), TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! * 10) }]),
            SequenceOperation<Int>(operations: [MeasureFile(name: "right"), TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! * 100) }]),
        ])
        let total = SequenceOperation<Int>(operations: [both, TransformBlockOperation<[Int], Int> { $0.finish(with: $0.input!.reduce(0, +)) }])
        OperationQueue().addOperation(total)
        total.waitUntilFinished()
        print(total.output!)   // 540
        XCTAssertEqual(total.output, 540)
    }

    func testARetry() {
        let attemptsMade = ResizedCount()
        let upload = RetryOperation<String>(maximumAttempts: 4, delay: .exponential(initial: .milliseconds(10))) { attempt in
            attemptsMade.increment()
            return ResultBlockOperation<String> { operation in
                if attempt < 3 { operation.finish(throwing: URLError(.timedOut)) } else { operation.finish(with: "uploaded") }
            }
        }
        OperationQueue().addOperation(upload)
        upload.waitUntilFinished()
        print(upload.output!, attemptsMade.count)   // uploaded 3
        XCTAssertEqual(attemptsMade.count, 3)
    }

    func testProgress() {
        let batch = GroupOperation(operations: (1...4).map { MeasureFile(name: String(repeating: "x", count: $0)) })
        OperationQueue().addOperation(batch)
        batch.waitUntilFinished()
        print(batch.progress.fractionCompleted)   // 1.0
        XCTAssertEqual(batch.progress.fractionCompleted, 1, accuracy: 1e-9)
    }
}
