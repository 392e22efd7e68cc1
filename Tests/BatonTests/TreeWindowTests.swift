import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Issue #22: a tree node keeps at most its window of operations in flight, taking its items
/// lazily, so memory is bounded by the window whatever the fan-out; tree nodes take any operation.
final class TreeWindowTests: BatonTestCase {
    /// An operation that finishes at once; the census counts it alive from creation until it is freed.
    final class Counted: AsyncOperation, @unchecked Sendable {
        private let census: ConcurrencyMeter
        init(_ census: ConcurrencyMeter) {
            self.census = census
            super.init()
            census.enter()
        }
        deinit { census.leave() }
        override func execute() { finish() }
    }

    /// A sequence that counts how far it has been iterated.
    struct Numbers: Sequence, Sendable {
        let count: Int
        let taken: Locked<Int>
        func makeIterator() -> AnyIterator<Int> {
            var next = 0
            return AnyIterator {
                guard next < count else { return nil }
                defer { next += 1 }
                taken.increment()
                return next
            }
        }
    }

    func testAMillionItemNodeKeepsItsWindowOfOperations() {
        let census = ConcurrencyMeter()
        let taken = Locked(0)
        let finished = Locked(0)
        let widest = Locked(0)
        let node = TreeNode<Int, Void>("item", items: { Numbers(count: $0, taken: taken) }) { _ in
            // Taken and not yet finished: what the window bounds.
            let inFlight = taken.value - finished.value
            widest.mutate { $0 = max($0, inFlight) }
            return Counted(census)
        }
        node.window = 64
        node.onFinish { _ in finished.increment() }
        let tree = TreeOperation(root: node, input: 1_000_000, maxConcurrentOperationCount: 2)
        OperationQueue().addOperation(tree)
        waitFinished(tree, timeout: bulkTimeout)
        XCTAssertTrue(tree.outcome?.isSuccess == true, "\(String(describing: tree.outcome))")
        XCTAssertEqual(census.total, 1_000_000)
        XCTAssertLessThanOrEqual(widest.value, 64, "more items in flight than the window")
        // Freed as they finish: alive at once is the window, plus the few finished operations whose
        // last reference (the queue's) is being dropped on the queue's threads.
        XCTAssertLessThanOrEqual(census.most, 64 + 32, "operations alive at once")
        XCTAssertTrue(eventually { census.now == 0 }, "\(census.now) operations never freed")
    }

    func testAWindowBelowOneFailsTheTreeNamingTheNode() throws {
        let leaf = TreeNode<Int, Void>("leaf", items: { 0..<$0 }) { _ in BlockOperation {} }
        let root = TreeNode<Int, Int>("root") { value in ResultBlockOperation { $0.finish(with: value) } }
        root.addChild(leaf)
        leaf.window = 0
        let tree = TreeOperation(root: root, input: 3)
        tree.name = "walk"
        let outcome = try tree.runForOutcome(timeout: .seconds(testTimeout))
        guard case .failed(BatonError.invalidArgument("walk", let reason)) = outcome else {
            return XCTFail("\(outcome)")
        }
        XCTAssertTrue(reason.contains("\"leaf\"") && reason.contains("got 0"), reason)
    }

    func testCancellingATreeDropsTheItemsNotYetLaunched() {
        let started = Gate()
        let census = ConcurrencyMeter()
        let node = TreeNode<Int, Void>("item", items: { 0..<$0 }) { index in
            if index == 0 {
                return ManualOperation(finishesOnCancel: true).withStart { started.open() }
            }
            return Counted(census)
        }
        node.window = 1
        let tree = TreeOperation(root: node, input: 1_000)
        OperationQueue().addOperation(tree)
        started.wait()
        tree.cancel()
        waitFinished(tree)
        XCTAssertTrue(tree.outcome?.isCancelled == true)
        XCTAssertEqual(census.total, 0, "an item behind a full window was made after the cancel")
    }

    func testATreeWhoseBuilderReturnsPlainOperations() throws {
        let seen = Locked<[String]>([])
        let words = TreeNode<String, any Sendable>("word", items: { $0.split(separator: " ").map(String.init) }) {
            word in
            word == "plain" ? BlockOperation {} : ResultBlockOperation<any Sendable> { $0.finish(with: word.count) }
        }
        let echo = TreeNode<any Sendable, Void>("echo") { input in
            seen.append(String(describing: input))
            return AsyncBlockOperation { $0.finish() }
        }
        let done = TreeNode<Void, Void>("done") { _ in BlockOperation { seen.append("done") } }
        words.addChild(echo)
        echo.addChild(done)
        let outcome = try TreeOperation(root: words, input: "plain typed").runForOutcome(timeout: .seconds(testTimeout))
        XCTAssertTrue(outcome.isSuccess, "\(outcome)")
        XCTAssertEqual(seen.value.filter { $0 != "done" }.sorted(), ["()", "5"])
        XCTAssertEqual(seen.value.filter { $0 == "done" }.count, 2)
    }

    func testAPlainOperationThatFailsIsATreeFailure() throws {
        let node = TreeNode<Int, Void>("job") { _ in AsyncBlockOperation { $0.finish(throwing: TestError(code: 9)) } }
        let outcome = try TreeOperation(root: node, input: 0).runForOutcome(timeout: .seconds(testTimeout))
        guard case .failed(BatonError.treeNodeFailed(["job[0]"], _, let underlying)) = outcome else {
            return XCTFail("\(outcome)")
        }
        XCTAssertEqual(underlying as? TestError, TestError(code: 9))
    }
}

extension ManualOperation {
    /// The operation, with `body` run when it starts.
    func withStart(_ body: @escaping @Sendable () -> Void) -> Self {
        onStart(body)
        return self
    }
}
