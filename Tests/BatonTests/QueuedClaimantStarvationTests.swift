import Dispatch
import Foundation
import XCTest

@testable import Baton

/// From stop 57's review, against a version that put requests made in width-limited queues behind
/// all others (taken back): a serial queue's claimant is not starved by a stream of later claimants.
final class QueuedClaimantStarvationTests: BatonTestCase {
    /// A serial queue's claimant S waits (queued) for x while a stream of claimants from a queue
    /// without a width limit keeps x busy, each asking while the one before holds it. S is not
    /// waiting for a worker (its queue is idle), yet every later claimant passes it.
    func testASerialQueuesClaimantIsNotStarvedByAStream() throws {
        let category = OperationCategory("x", in: ExclusivityScope("starve-\(UUID())"))
        let stream = OperationQueue()
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        let order = Locked<[String]>([])
        let count = 200
        let s = AsyncBlockOperation { op in
            order.append("S")
            op.finish()
        }
        s.name = "S"
        try s.addExclusivity(category)
        var ops: [AsyncBlockOperation] = []
        let holder = Locked<[AsyncBlockOperation]>([])
        for i in 0..<count {
            let n = AsyncBlockOperation { op in
                order.append("N\(i)")
                if i == 0 {
                    serial.addOperation(s)
                    _ = s.isReady   // S asks for x now, while N0 holds it
                }
                if i + 1 < count {
                    let next = holder.value[i + 1]
                    stream.addOperation(next)
                    _ = next.isReady   // the next one asks while this one holds x
                }
                op.finish()
            }
            n.name = "N\(i)"
            try n.addExclusivity(category)
            ops.append(n)
        }
        holder.mutate { $0 = ops }
        stream.addOperation(ops[0])
        waitFinished(s)
        for n in ops { waitFinished(n) }
        let position = order.value.firstIndex(of: "S") ?? -1
        XCTAssertLessThanOrEqual(position, 3, "S, which asked second, ran after \(position) later claimants")
        XCTAssertTrue(Gatekeeper.isIdle)
    }
}
