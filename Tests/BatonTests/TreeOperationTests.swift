import Dispatch
import Foundation
import XCTest

@testable import Baton

final class TreeOperationTests: BatonTestCase {
    /// cookbook → recipes (3 per cookbook) → ingredients (2 per recipe)
    private func cookbook(
        failing ingredient: String? = nil,
        record: Locked<[String]>
    ) -> TreeNode<String, [String]> {
        let root = TreeNode<String, [String]>("cookbook") { name in
            ResultBlockOperation { $0.finish(with: (1...3).map { "\(name)/recipe\($0)" }) }
        }
        let recipe = TreeNode<[String], String>("recipe", items: { $0 }) { id in
            JitteredValue(id)
        }
        let ingredient = TreeNode<String, String>(
            "ingredient",
            asyncItems: { recipe in
                await Task.yield()
                return ["\(recipe)/salt", "\(recipe)/pepper"]
            }
        ) { id in
            ResultBlockOperation { operation in
                if id == ingredient { operation.finish(throwing: TestError(code: 1)) } else { operation.finish(with: id) }
            }
        }
        ingredient.onFinish { if let output = $0.output { record.append(output) } }
        root.addChild(recipe)
        recipe.addChild(ingredient)
        return root
    }

    func testEveryNodeRunsAndOutputsFlowDown() {
        let record = Locked<[String]>([])
        let tree = finished(TreeOperation(root: cookbook(record: record), input: "stew"))
        XCTAssertTrue(tree.outcome?.isSuccess == true, "\(String(describing: tree.outcome))")
        XCTAssertEqual(record.value.count, 6)
        XCTAssertTrue(record.value.contains("stew/recipe2/pepper"))
        XCTAssertEqual(tree.progress.totalUnitCount, 1 + 3 + 6)
        XCTAssertEqual(tree.progress.fractionCompleted, 1, accuracy: 1e-9)
    }

    func testAFailureDeepInTheTreeIsReportedWithItsPath() {
        let record = Locked<[String]>([])
        let tree = finished(TreeOperation(root: cookbook(failing: "stew/recipe2/pepper", record: record), input: "stew"))
        guard case .failed(BatonError.treeNodeFailed(let path, _, let underlying))? = tree.outcome else {
            return XCTFail("got \(String(describing: tree.outcome))")
        }
        XCTAssertEqual(path, ["cookbook[0]", "recipe[1]", "ingredient[1]"])
        XCTAssertEqual(underlying as? TestError, TestError(code: 1))
        XCTAssertEqual(record.value.count, 5, "the other branches go on")
    }

    func testAMappingThatThrowsIsReported() {
        let root = TreeNode<Int, Int>("root") { value in ResultBlockOperation { $0.finish(with: value) } }
        let broken = TreeNode<Int, Int>("broken", items: { (_: Int) -> [Int] in throw TestError(code: 5) }) { value in
            ResultBlockOperation { $0.finish(with: value) }
        }
        root.addChild(broken)
        let tree = finished(TreeOperation(root: root, input: 1))
        guard case .failed(BatonError.treeNodeFailed(["root[0]", "broken"], nil, _))? = tree.outcome else {
            return XCTFail("got \(String(describing: tree.outcome))")
        }
    }

    func testSeveralFailuresAreAllReported() {
        let root = TreeNode<Int, Int>("root", items: { _ in [1, 2, 3] }) { value in
            ResultBlockOperation { $0.finish(throwing: TestError(code: value)) }
        }
        let tree = finished(TreeOperation(root: root, input: 0))
        guard case .failed(BatonError.treeFailed(let failures))? = tree.outcome else {
            return XCTFail("got \(String(describing: tree.outcome))")
        }
        XCTAssertEqual(failures.count, 3)
    }

    func testANodeFinishesAfterItsWholeSubtree() {
        let events = Locked<[String]>([])
        let root = TreeNode<Int, Int>("root") { value in ResultBlockOperation { $0.finish(with: value) } }
        let leaf = TreeNode<Int, Int>("leaf", items: { value in [value, value + 1] }) { value in
            JitteredValue(value)
        }
        leaf.onFinish { events.append("leaf \($0.output!)") }
        root.onSubtreeFinish { events.append("root subtree \($0.output!)") }
        root.addChild(leaf)
        finished(TreeOperation(root: root, input: 10))
        XCTAssertEqual(events.value.count, 3)
        XCTAssertEqual(events.value.last, "root subtree 10")
    }

    /// Two sibling subtrees end at once on two threads: the tree must not finish while the first one's
    /// `onSubtreeFinish` callback is still running (it did: the first thread released the parent's
    /// count before its callback ran, so the second brought the tree to zero and finished it).
    func testTheTreeFinishesOnlyAfterEverySubtreeCallbackHasRun() {
        let operations = [ManualOperation(name: "first"), ManualOperation(name: "second")]
        let root = TreeNode<Int, Int>("pair", items: { _ in [0, 1] }) { index in operations[index] }
        let inFirstCallback = Gate()
        let releaseFirstCallback = Gate()
        let callbacks = Locked<[Int]>([])
        root.onSubtreeFinish { outcome in
            if outcome.output == 0 {
                inFirstCallback.open()
                releaseFirstCallback.wait()
            }
            callbacks.mutate { $0.append(outcome.output!) }
        }
        let tree = TreeOperation(root: root, input: 0)
        OperationQueue().addOperation(tree)
        for operation in operations { operation.started.wait() }

        DispatchQueue.global().async { operations[0].finish(with: 0) }
        inFirstCallback.wait()
        operations[1].finish(with: 1)   // its whole release path runs on this thread before it returns
        XCTAssertEqual(callbacks.value, [1])
        XCTAssertFalse(tree.isFinished, "the tree finished while a subtree's callback was still running")

        releaseFirstCallback.open()
        waitFinished(tree)
        XCTAssertEqual(callbacks.value, [1, 0])
        XCTAssertEqual(tree.outcome?.isSuccess, true)
    }

    func testCancellingTheTreeCancelsEverythingInFlight() {
        let started = Gate()
        let attempts = Locked(0)
        let root = TreeNode<Int, Int>("root", items: { _ in Array(0..<4) }) { _ in
            attempts.increment()
            let operation = ManualOperation(finishesOnCancel: true)
            operation.onStart { started.open() }
            return operation
        }
        let below = TreeNode<Int, Int>("below") { value in ResultBlockOperation { $0.finish(with: value) } }
        root.addChild(below)
        let tree = TreeOperation(root: root, input: 0)
        let done = Gate()
        tree.whenFinished { done.open() }
        OperationQueue().addOperation(tree)
        started.wait()
        tree.cancel()
        done.wait()
        XCTAssertTrue(tree.outcome?.isCancelled == true)
        // Items are made lazily (issue #22): those not made when the tree was cancelled never are.
        XCTAssertTrue((1...4).contains(attempts.value), "\(attempts.value) operations made")
    }

    func testRetriesPerNode() {
        let made = Locked(0)
        let root = TreeNode<Int, Int>("root") { value in
            let attempt = made.increment()
            return ResultBlockOperation { operation in
                if attempt < 3 { operation.finish(throwing: TestError(code: attempt)) } else { operation.finish(with: value) }
            }
        }
        root.retry(maximumAttempts: 3)
        let tree = finished(TreeOperation(root: root, input: 7))
        XCTAssertTrue(tree.outcome?.isSuccess == true, "\(String(describing: tree.outcome))")
        XCTAssertEqual(made.value, 3)
    }

    func testAWideTree() {
        let count = Locked(0)
        let root = TreeNode<Int, Int>("root", items: { _ in Array(0..<10) }) { value in
            ResultBlockOperation { $0.finish(with: value) }
        }
        var level = root
        for depth in 1..<4 {
            let next = TreeNode<Int, Int>("level\(depth)", items: { value in Array(0..<10).map { value * 10 + $0 } }) { value in
                ResultBlockOperation { $0.finish(with: value) }
            }
            level.addChild(next)
            level = next
        }
        level.onFinish { _ in count.increment() }
        let tree = finished(TreeOperation(root: root, input: 0))
        XCTAssertTrue(tree.outcome?.isSuccess == true)
        XCTAssertEqual(count.value, 10_000)
        XCTAssertEqual(tree.progress.totalUnitCount, 11_110)
    }

    func testNodeCallbacksSeeEveryOutcomeFailuresIncluded() {
        let finishes = Locked<[String]>([])
        let subtrees = Locked<[String]>([])
        let root = TreeNode<Int, Int>("item", items: { Array(0..<$0) }) { index in
            ResultBlockOperation { operation in
                if index == 1 { operation.finish(throwing: TestError(code: 1)) } else { operation.finish(with: index) }
            }
        }
        let leaf = TreeNode<Int, Int>("leaf") { value in ResultBlockOperation { $0.finish(with: value * 10) } }
        root.addChild(leaf)
        root.onFinish { outcome in finishes.append(outcome.isSuccess ? "ok \(outcome.output!)" : "failed") }
        root.onSubtreeFinish { outcome in subtrees.append(outcome.isSuccess ? "subtree \(outcome.output!)" : "subtree failed") }
        let tree = finished(TreeOperation(root: root, input: 3))
        XCTAssertTrue(tree.outcome?.isFailure == true)
        XCTAssertEqual(finishes.value.sorted(), ["failed", "ok 0", "ok 2"])
        XCTAssertEqual(subtrees.value.sorted(), ["subtree 0", "subtree 2", "subtree failed"])
    }
}

/// Succeeds with its value after a random short delay.
final class JitteredValue<Value: Sendable>: ResultOperation<Value>, @unchecked Sendable {
    let payload: Value
    init(_ payload: Value) {
        self.payload = payload
        super.init()
    }
    override func execute() {
        DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(Int.random(in: 0...1_000))) {
            self.finish(with: self.payload)
        }
    }
}
