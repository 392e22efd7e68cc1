import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Claims in a queue with a width limit (a serial queue, a group with `maxConcurrentOperationCount`).
/// Such a queue reads the readiness of every operation it holds whenever it has a worker free, more
/// operations than it has workers: one granted its categories there may wait for a worker while it
/// holds them, behind operations that do not end soon. Two defects came of it (stop 57):
/// - a Baton entry point (a group's launch) granted a child its categories before adding it to the
///   group's queue, where it waited for a worker;
/// - an operation granted as a serial queue read it waited behind the queue's running operation.
///
/// Either way the category was held by an operation that was not executing, so every other claimant
/// waited for it, and when the running operation waited for one of those claimants, nothing ever ran
/// again. Now a Baton entry point passes a gate outside the queue only in a queue without a limit;
/// a holder that may wait for a worker gives its categories back to a request that would execute at
/// once, while its queue has not started it; and such requests wait behind those that would.
final class QueuedHolderTests: BatonTestCase {
    private let scopeID = ObjectIdentifier(ExclusivityScope.process)
    private func lane(_ category: String) -> Lane { Lane(name: .init(scope: scopeID, category: category), under: 0) }

    // MARK: - The table

    /// A request that would execute at once waits ahead of every request that may wait for a worker,
    /// in every line it joins: the category goes to it first.
    func testARequestThatWouldExecuteWaitsAheadOfQueuedRequests() {
        let a = lane("a")
        var table = ClaimTable<String>()
        XCTAssertTrue(table.request(1, lanes: [a], waiter: "holder"))
        XCTAssertFalse(table.request(2, lanes: [a], waiter: "queued", queued: true))
        XCTAssertFalse(table.request(3, lanes: [a], waiter: "direct"))
        XCTAssertEqual(table.release([a], by: 1).map(\.1), ["direct"], "direct joined later, but goes first")
        XCTAssertEqual(table.release([a], by: 3).map(\.1), ["queued"])
        XCTAssertTrue(table.queuedHolders.contains(WaiterKey(2)), "granted, it may wait in its queue for a worker")
        _ = table.release([a], by: 2)
        XCTAssertTrue(table.queuedHolders.isEmpty)
        XCTAssertTrue(table.isIdle)
    }

    /// A lane with room and only queued requests waiting is granted at once to a request that would
    /// execute; one that may itself wait for a worker joins behind them (FIFO among them).
    func testOnlyQueuedRequestsAheadDoNotHoldBackOneThatWouldExecute() {
        let (a, b) = (lane("a"), lane("b"))
        var table = ClaimTable<String>()
        _ = table.setLimit(2, of: a.name)
        XCTAssertTrue(table.request(1, lanes: [b], waiter: "b holder"))
        XCTAssertFalse(table.request(2, lanes: [a, b], waiter: "queued", queued: true), "b is held")
        XCTAssertFalse(table.request(3, lanes: [a], waiter: "queued too", queued: true), "queued waits ahead of it")
        XCTAssertTrue(table.request(4, lanes: [a], waiter: "direct"), "a has room, and only queued ones wait")
        XCTAssertEqual(table.release([b], by: 1).map(\.1), ["queued"])
        XCTAssertEqual(table.release([a], by: 4).map(\.1), ["queued too"])
        _ = table.release([a, b], by: 2)
        _ = table.release([a], by: 3)
        XCTAssertTrue(table.isIdle)
    }

    /// The holders asked to give way: the queued ones of a lane without room, never one that would
    /// execute at once.
    func testTheHoldersAskedToGiveWayAreTheQueuedOnesOfFullLanes() {
        let (a, b) = (lane("a"), lane("b"))
        var table = ClaimTable<String>()
        _ = table.setLimit(3, of: a.name)
        XCTAssertTrue(table.request(1, lanes: [a], waiter: "queued in a", queued: true))
        XCTAssertTrue(table.request(2, lanes: [a], waiter: "queued in a too", queued: true))
        XCTAssertTrue(table.request(3, lanes: [a], waiter: "direct"))
        XCTAssertTrue(table.request(4, lanes: [b], waiter: "queued in b", queued: true))
        XCTAssertFalse(table.request(5, lanes: [a, b], waiter: "asker"))
        XCTAssertEqual(table.holdersGivingWay(for: [a, b]).sorted(), ["queued in a", "queued in a too", "queued in b"])
        _ = table.release([a], by: 3)
        XCTAssertEqual(table.holdersGivingWay(for: [a, b]), ["queued in b"], "a has room now")
        XCTAssertEqual(table.release([b], by: 4).map(\.1), ["asker"])
        for (id, lanes) in [(1, [a]), (2, [a]), (5, [a, b])] as [(UInt64, [Lane])] { _ = table.release(lanes, by: id) }
        XCTAssertTrue(table.isIdle)
    }

    /// Queued requests keep their order among themselves, behind every request that would execute.
    func testQueuedRequestsKeepTheirOrder() {
        let a = lane("a")
        var table = ClaimTable<String>()
        XCTAssertTrue(table.request(1, lanes: [a], waiter: "holder"))
        XCTAssertFalse(table.request(2, lanes: [a], waiter: "first queued", queued: true))
        XCTAssertFalse(table.request(3, lanes: [a], waiter: "second queued", queued: true))
        XCTAssertFalse(table.request(4, lanes: [a], waiter: "direct"))
        XCTAssertEqual(table.release([a], by: 1).map(\.1), ["direct"])
        XCTAssertEqual(table.release([a], by: 4).map(\.1), ["first queued"])
        XCTAssertEqual(table.release([a], by: 2).map(\.1), ["second queued"])
        _ = table.release([a], by: 3)
        XCTAssertTrue(table.isIdle)
    }

    /// A request for no lanes (an operation with conditions and no category) holds nothing, so it is
    /// not counted as a queued holder: its release gives back no lane (the table stayed busy for good,
    /// found by the suite's idle checks).
    func testAQueuedRequestForNoLanesIsNotCounted() {
        var table = ClaimTable<String>()
        XCTAssertTrue(table.request(1, lanes: [], waiter: "nothing", queued: true))
        XCTAssertTrue(table.queuedHolders.isEmpty)
        XCTAssertTrue(table.isIdle)
    }

    /// A queued request its queue then starts (it holds a worker now) goes first, as any such request,
    /// and is no longer counted as queued once granted.
    func testAQueuedRequestPutFirstIsNoLongerQueued() {
        let a = lane("a")
        var table = ClaimTable<String>()
        XCTAssertTrue(table.request(1, lanes: [a], waiter: "holder"))
        XCTAssertFalse(table.request(2, lanes: [a], waiter: "direct"))
        XCTAssertFalse(table.request(3, lanes: [a], waiter: "queued", queued: true))
        XCTAssertEqual(table.putFirst(3).granted.map(\.1), [])
        XCTAssertEqual(table.release([a], by: 1).map(\.1), ["queued"], "it holds a worker: first")
        XCTAssertFalse(table.queuedHolders.contains(WaiterKey(3)))
        XCTAssertEqual(table.release([a], by: 3).map(\.1), ["direct"])
        _ = table.release([a], by: 2)
        XCTAssertTrue(table.isIdle)
    }

    // MARK: - Operations

    /// The shape of the first defect: a serial group launches its children at once, the second
    /// claiming x; the first waits (without blocking) for an operation elsewhere that claims x. The
    /// second used to hold x while waiting in the group's queue for the first to end.
    func testASerialGroupsLaterChildDoesNotHoldItsCategoryWhileTheFirstWaitsForAClaimant() throws {
        for _ in 0..<50 {
            let category = OperationCategory("x", in: ExclusivityScope("serial-group-\(UUID())"))
            let (outsider, first) = try waitingForOutsider(claiming: category)
            let second = try claiming(category, name: "second")
            let group = GroupOperation(operations: [first, second], maxConcurrentOperationCount: 1)
            OperationQueue().addOperation(group)
            waitFinished(group)
            // The outsider's outcome observers (which finish `first`) run before it reads finished.
            waitFinished(outsider)
            XCTAssertTrue(second.isFinished)
        }
        XCTAssertTrue(Gatekeeper.isIdle)
    }

    /// The shape of the second defect, on a plain serial queue: both operations claim (x and y), the
    /// first waits for an operation elsewhere that claims y. The queue read both, granting the second
    /// y while it waited behind the first.
    func testASerialQueuesWaitingOperationDoesNotHoldItsCategoryFromTheOneTheFirstWaitsFor() throws {
        for _ in 0..<50 {
            let scope = ExclusivityScope("serial-queue-\(UUID())")
            let (outsider, first) = try waitingForOutsider(claiming: OperationCategory("y", in: scope))
            try first.addExclusivity(OperationCategory("x", in: scope))
            let second = try claiming(OperationCategory("y", in: scope), name: "second")
            let serial = OperationQueue()
            serial.maxConcurrentOperationCount = 1
            serial.addOperations([first, second], waitUntilFinished: false)
            waitFinished(second)
            waitFinished(outsider)
            waitFinished(first)
        }
        XCTAssertTrue(Gatekeeper.isIdle)
    }

    /// A limit of 2 and a group one wide: while its first child executes, the two others do not both
    /// hold the category from an operation elsewhere, which runs (and finishes) meanwhile.
    func testAnOperationElsewhereRunsWhileAGroupsQueuedChildrenWaitForAWorker() throws {
        let scope = ExclusivityScope("limit-\(UUID())")
        try scope.setLimit(2, for: "x")
        let category = OperationCategory("x", in: scope)
        let release = Gate()
        let started = Gate()
        let children = try (0..<3).map { index in
            let child = AsyncBlockOperation { operation in
                if index == 0 {
                    started.open()
                    DispatchQueue.global().async {
                        release.wait()
                        operation.finish()
                    }
                } else {
                    operation.finish()
                }
            }
            try child.addExclusivity(category)
            return child
        }
        let group = GroupOperation(operations: children, maxConcurrentOperationCount: 1)
        OperationQueue().addOperation(group)
        started.wait()
        let outsider = try claiming(category, name: "outsider")
        OperationQueue().addOperation(outsider)
        waitFinished(outsider)
        XCTAssertFalse(children[0].isFinished, "the outsider ran while the first child still executed")
        release.open()
        waitFinished(group)
        XCTAssertTrue(Gatekeeper.isIdle)
    }

    /// Many operations on queues of widths 1 to 3, in groups and plain, claiming one of two
    /// categories (limits 1 and 2) while some wait for a claimant in a queue without a limit: every
    /// one finishes, and no category ever has more executing holders than its limit.
    func testMixedWidthLimitedClaimantsAllFinishWithinTheirLimits() throws {
        var random = SeededRandom(seed: 57)
        for trial in 0..<40 {
            let scope = ExclusivityScope("mixed-\(trial)-\(UUID())")
            try scope.setLimit(2, for: "b")
            let categories = [OperationCategory("a", in: scope), OperationCategory("b", in: scope)]
            let executing = Locked([0, 0])
            let violations = Locked(0)
            let elsewhere = OperationQueue()
            func counted(_ index: Int?) -> AsyncBlockOperation {
                let operation = AsyncBlockOperation { operation in
                    if let index {
                        let now = executing.mutate { counts -> Int in
                            counts[index] += 1
                            return counts[index]
                        }
                        if now > (index == 0 ? 1 : 2) { violations.mutate { $0 += 1 } }
                    }
                    DispatchQueue.global().async {
                        if let index { executing.mutate { $0[index] -= 1 } }
                        operation.finish()
                    }
                }
                if let index { try? operation.addExclusivity(categories[index]) }
                return operation
            }
            var all: [Operation] = []
            var queues: [OperationQueue] = []
            for _ in 0..<3 {
                var operations: [AsyncBlockOperation] = []
                for _ in 0..<6 {
                    let index = Int.random(in: 0...2, using: &random)
                    if index == 2 {
                        // Waits for a claimant elsewhere, holding a worker of its queue meanwhile.
                        let claimant = counted(Int.random(in: 0...1, using: &random))
                        let waiter = AsyncBlockOperation { operation in
                            claimant.onFinish { _ in operation.finish() }
                            elsewhere.addOperation(claimant)
                        }
                        all.append(claimant)
                        operations.append(waiter)
                    } else {
                        operations.append(counted(index))
                    }
                }
                all.append(contentsOf: operations)
                let width = Int.random(in: 1...3, using: &random)
                if Bool.random(using: &random) {
                    let group = GroupOperation(operations: operations, maxConcurrentOperationCount: width)
                    let queue = OperationQueue()
                    queue.addOperation(group)
                    queues.append(queue)
                    all.append(group)
                } else {
                    let queue = OperationQueue()
                    queue.maxConcurrentOperationCount = width
                    queue.addOperations(operations, waitUntilFinished: false)
                    queues.append(queue)
                }
            }
            for operation in all { waitFinished(operation) }
            XCTAssertEqual(violations.value, 0, "trial \(trial): more executing holders than a limit")
            withExtendedLifetime(queues) {}
        }
        XCTAssertTrue(Gatekeeper.isIdle)
    }

    /// Operations contending for one category on a queue one wide and in a group two wide all finish,
    /// one executing at a time: queued holders of one queue never ask each other to give way.
    func testContentionInsideOneWidthLimitedQueueFinishes() throws {
        let category = OperationCategory("x", in: ExclusivityScope("contention-\(UUID())"))
        let executing = Locked(0)
        let most = Locked(0)
        func operations(_ count: Int) throws -> [AsyncBlockOperation] {
            try (0..<count).map { _ in
                let operation = AsyncBlockOperation { operation in
                    let now = executing.mutate { value -> Int in
                        value += 1
                        return value
                    }
                    most.mutate { $0 = Swift.max($0, now) }
                    executing.mutate { $0 -= 1 }
                    operation.finish()
                }
                try operation.addExclusivity(category)
                return operation
            }
        }
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        let plain = try operations(1_000)
        serial.addOperations(plain, waitUntilFinished: false)
        let group = GroupOperation(operations: try operations(1_000), maxConcurrentOperationCount: 2)
        OperationQueue().addOperation(group)
        for operation in plain { waitFinished(operation) }
        waitFinished(group)
        XCTAssertEqual(most.value, 1)
        XCTAssertTrue(Gatekeeper.isIdle)
    }

    // MARK: - Helpers

    private func claiming(_ category: OperationCategory, name: String) throws -> AsyncBlockOperation {
        let operation = AsyncBlockOperation { $0.finish() }
        operation.name = name
        try operation.addExclusivity(category)
        return operation
    }

    /// An operation that claims `category`, and one that adds it to a queue without a width limit and
    /// finishes once it has finished.
    private func waitingForOutsider(
        claiming category: OperationCategory
    ) throws -> (outsider: AsyncBlockOperation, first: AsyncBlockOperation) {
        let outsider = try claiming(category, name: "outsider")
        let queue = OperationQueue()
        let first = AsyncBlockOperation { operation in
            outsider.onFinish { _ in operation.finish() }
            queue.addOperation(outsider)
        }
        first.name = "first"
        return (outsider, first)
    }
}
