import Foundation
import XCTest

@testable import Baton

/// Composites and their children are freed once they have finished: no parent↔child cycle survives.
final class CompositeReleaseTests: BatonTestCase {
    private func assertFreed(_ make: (_ childFreed: Gate) -> AsyncOperation, file: StaticString = #filePath, line: UInt = #line) {
        let childFreed = Gate()
        let done = Gate()
        weak var weakComposite: AsyncOperation?
        inScope {
            let composite = make(childFreed)
            weakComposite = composite
            composite.whenFinished { done.open() }
            OperationQueue().addOperation(composite)
        }
        done.wait(file: file, line: line)
        childFreed.wait(file: file, line: line)
        // The composite goes when its queue lets go of it; its child is gone already, so nothing holds
        // it but the queue's last reference, released right after it finished.
        let deadline = Date().addingTimeInterval(testTimeout)
        while weakComposite != nil && Date() < deadline { RunLoop.current.run(until: Date().addingTimeInterval(0.001)) }
        XCTAssertNil(weakComposite, "the composite is still alive", file: file, line: line)
    }

    func testSequencesAreFreed() {
        assertFreed { freed in SequenceOperation<Void>(operations: [TrackedOperation(freed: freed), BlockOperation {}]) }
    }

    func testRetriesAreFreed() {
        assertFreed { freed in
            let box = Locked<Gate?>(freed)
            return RetryOperation<Int>(maximumAttempts: 2) { attempt in
                let gate = box.mutate { gate -> Gate? in
                    defer { gate = nil }
                    return gate
                }
                return TrackedResult(freed: gate, fail: attempt == 1)
            }
        }
    }

    func testTreesAreFreed() {
        assertFreed { freed in
            let box = Locked<Gate?>(freed)
            let root = TreeNode<Int, Int>("root", items: { _ in [1, 2] }) { _ in
                TrackedResult(
                    freed: box.mutate { gate -> Gate? in
                        defer { gate = nil }
                        return gate
                    }, fail: false)
            }
            return TreeOperation(root: root, input: 0)
        }
    }

    func testGroupsNestedInSequencesAreFreed() {
        assertFreed { freed in
            SequenceOperation<Void>(operations: [
                GroupOperation(operations: [TrackedOperation(freed: freed)]), AsyncBlockOperation { $0.finish() },
            ])
        }
    }
}

/// Succeeds (or fails) at once and opens its gate, if it has one, when freed.
private final class TrackedResult: ResultOperation<Int>, @unchecked Sendable {
    let freed: Gate?
    let fail: Bool
    init(freed: Gate?, fail: Bool) {
        self.freed = freed
        self.fail = fail
        super.init()
    }
    override func execute() {
        if fail { finish(throwing: TestError(code: 0)) } else { finish(with: 1) }
    }
    deinit { freed?.open() }
}
