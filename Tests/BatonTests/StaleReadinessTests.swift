import Dispatch
import Foundation
import XCTest

@testable import Baton

/// An operation whose next `isReady` read may be made to answer `true` once, whatever its dependencies
/// say: the stale readiness Linux's queue can cache (it reads `isReady`, then stores what it read, so a
/// read made before a barrier's or a dependency's edge can be stored after it), made on demand.
private final class StaleReadinessOperation: AsyncOperation, @unchecked Sendable {
    private let lies = Locked(0)
    let executions = Locked(0)
    let body: @Sendable () -> Void

    init(_ body: @escaping @Sendable () -> Void = {}) {
        self.body = body
        super.init()
    }

    /// The next read of `isReady` answers `true`.
    func liesOnce() { lies.mutate { $0 = 1 } }

    override var isReady: Bool {
        let lie = lies.mutate { lies -> Bool in
            defer { lies = 0 }
            return lies > 0
        }
        return lie || super.isReady
    }

    override func execute() {
        executions.increment()
        body()
        finish()
    }

    /// Whether its queue started it and it waits for its dependencies (or, on a library that does not
    /// wait, whether it ran).
    var parkedOrRan: Bool { core.withLock { $0.life.isParked } || executions.value > 0 }

    /// Makes the queue read `isReady` now, and cache what it reads (`true`): the queue starts it.
    func announceStaleReadiness() {
        liesOnce()
        willChangeValue(forKey: "isReady")
        didChangeValue(forKey: "isReady")
    }
}

/// Linux's `OperationQueue` may start an operation whose dependencies have not finished: it caches each
/// operation's readiness by reading `isReady` and then storing the answer, so a read made while another
/// thread adds a dependency (or while the queue itself adds an operation's dependency on a pending
/// barrier) can store a `true` after the edge's `false`. Before this was fixed, Baton ran such an
/// operation (or finished it cancelled) at once, before its dependency, and a test that then let go of
/// it crashed the process when the dependency finished and followed its unretained pointer to the freed
/// operation (a SIGSEGV in Foundation's `observeValue`, 1 in about 3,000 trials of the hammer below). A
/// Baton operation the queue starts too early now waits, pending, until Foundation counts no unfinished
/// dependency, and only then starts.
final class StaleReadinessTests: BatonTestCase {
    private func queueWithPendingBarrier() -> (OperationQueue, release: DispatchSemaphore, barrierRan: Locked<Bool>) {
        let queue = OperationQueue()
        let release = DispatchSemaphore(value: 0)
        queue.addOperation(BlockOperation { _ = release.wait(timeout: .now() + testTimeout) })
        let barrierRan = Locked(false)
        queue.addBarrierBlock { barrierRan.mutate { $0 = true } }
        return (queue, release, barrierRan)
    }

    /// An operation added behind a pending barrier, then started by its queue on a stale readiness;
    /// `makeBody` makes its body from the flag the barrier sets.
    private func parkedBehindABarrier(
        file: StaticString = #filePath, line: UInt = #line,
        _ makeBody: (Locked<Bool>) -> @Sendable () -> Void = { _ in {} }
    ) -> (StaleReadinessOperation, OperationQueue, release: DispatchSemaphore, barrierRan: Locked<Bool>) {
        let (queue, release, barrierRan) = queueWithPendingBarrier()
        let operation = StaleReadinessOperation(makeBody(barrierRan))
        queue.addOperation(operation)
        operation.announceStaleReadiness()
        XCTAssertTrue(eventually { operation.parkedOrRan }, "the queue never started it", file: file, line: line)
        return (operation, queue, release, barrierRan)
    }

    func testAStartOnAStaleReadinessWaitsForThePendingBarrier() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation keeps no record Baton can read, and its queue reads readiness through KVO")
        #else
        let ranAfterTheBarrier = Locked<Bool?>(nil)
        let (operation, queue, release, _) = parkedBehindABarrier { barrierRan in
            { ranAfterTheBarrier.mutate { $0 = barrierRan.value } }
        }
        XCTAssertEqual(operation.executions.value, 0, "it executed while the barrier before it was pending")
        XCTAssertFalse(operation.isFinished)
        XCTAssertEqual(diagnostics.kinds(for: operation), [])
        release.signal()
        waitFinished(operation)
        XCTAssertEqual(operation.executions.value, 1)
        XCTAssertEqual(ranAfterTheBarrier.value, true)
        XCTAssertEqual(operation.outcome?.isSuccess, true)
        drain(queue)
        #endif
    }

    func testAStartOnAStaleReadinessWaitsForAnUnfinishedDependency() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation keeps no record Baton can read, and its queue reads readiness through KVO")
        #else
        let dependency = ManualOperation()
        let dependencyFinished = Locked(false)
        let ranAfterTheDependency = Locked<Bool?>(nil)
        let operation = StaleReadinessOperation { ranAfterTheDependency.mutate { $0 = dependencyFinished.value } }
        operation.addDependency(dependency)
        let queue = OperationQueue()
        queue.addOperation(operation)
        operation.announceStaleReadiness()
        XCTAssertTrue(eventually { operation.parkedOrRan }, "the queue never started it")
        XCTAssertEqual(operation.executions.value, 0, "it executed before its dependency finished")
        // The dependency finishes on a thread of its own; its last act is to have Foundation read
        // the dependent's `isReady`, which resumes the start.
        finishOnAQueue(dependency, marking: dependencyFinished)
        waitFinished(operation)
        XCTAssertEqual(operation.executions.value, 1)
        XCTAssertEqual(ranAfterTheDependency.value, true)
        drain(queue)
        #endif
    }

    func testACancelWhileAStartWaitsEndsItCancelledOnlyOnceTheBarrierHasRun() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation keeps no record Baton can read, and its queue reads readiness through KVO")
        #else
        let (operation, queue, release, barrierRan) = parkedBehindABarrier()
        operation.cancel()
        XCTAssertFalse(operation.isFinished, "it finished while the barrier that points to it was pending")
        XCTAssertFalse(barrierRan.value)
        release.signal()
        waitFinished(operation)
        XCTAssertTrue(barrierRan.value)
        XCTAssertEqual(operation.executions.value, 0)
        XCTAssertEqual(operation.outcome?.isCancelled, true)
        drain(queue)
        #endif
    }

    func testAStartByHandWhileAStartWaitsIsRefused() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation keeps no record Baton can read, and its queue reads readiness through KVO")
        #else
        let (operation, queue, release, _) = parkedBehindABarrier()
        operation.start()
        XCTAssertEqual(operation.executions.value, 0, "a start by hand ran an operation its queue started")
        XCTAssertEqual(diagnostics.kinds(for: operation), [.startedWhileInQueue])
        release.signal()
        waitFinished(operation)
        XCTAssertEqual(operation.executions.value, 1)
        drain(queue)
        #endif
    }

    /// A resumed start goes to the queue's `underlyingQueue`; for the main queue that is the main
    /// dispatch queue, which Linux's Foundation answers (Baton relies on it, with no case of its own).
    func testAResumedStartRunsOnTheUnderlyingQueueOfItsQueue() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation keeps no record Baton can read, and its queue reads readiness through KVO")
        #else
        XCTAssertNotNil(OperationQueue.main.underlyingQueue)
        let key = DispatchSpecificKey<Int>()
        let workers = DispatchQueue(label: "stale-readiness workers")
        workers.setSpecific(key: key, value: 1)
        let trials = ProcessInfo.processInfo.environment["BATON_TRIALS"].flatMap(Int.init) ?? 200
        for trial in 0..<trials {
            let queue = OperationQueue()
            queue.underlyingQueue = workers
            let release = DispatchSemaphore(value: 0)
            queue.addOperation(BlockOperation { _ = release.wait(timeout: .now() + testTimeout) })
            queue.addBarrierBlock {}
            let onWorkers = Locked<Bool?>(nil)
            let operation = StaleReadinessOperation { onWorkers.mutate { $0 = DispatchQueue.getSpecific(key: key) == 1 } }
            queue.addOperation(operation)
            // The stale announcement and the release race from two threads.
            let line = StartingLine()
            line.thread { operation.announceStaleReadiness() }
            line.thread { release.signal() }
            XCTAssertTrue(line.release(timeout: testTimeout))
            waitFinished(operation)
            XCTAssertEqual(onWorkers.value, true, "trial \(trial)")
            XCTAssertEqual(operation.executions.value, 1, "trial \(trial)")
        }
        #endif
    }

    /// A dependency added while the start waits is waited for too: the start goes on only once
    /// Foundation counts no unfinished dependency, so it never runs before the barrier it was put off
    /// for (a review's finding: the late edge used to release it at once, past the pending barrier,
    /// which then followed its pointer to the freed operation).
    func testADependencyAddedWhileAStartWaitsIsWaitedForToo() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation keeps no record Baton can read, and its queue reads readiness through KVO")
        #else
        let dependencyFinished = Locked(false)
        let ranAfter = Locked<[Bool]>([])
        let (operation, queue, release, barrierRan) = parkedBehindABarrier { barrierRan in
            { ranAfter.mutate { $0 = [barrierRan.value, dependencyFinished.value] } }
        }
        let dependency = ManualOperation()
        operation.addDependency(dependency)
        XCTAssertEqual(operation.executions.value, 0, "the late dependency released it before the barrier")
        release.signal()
        XCTAssertTrue(eventually { barrierRan.value })
        // A moment's look: released by the barrier alone, it would run now.
        _ = eventually(timeout: 0.05) { operation.isFinished }
        XCTAssertEqual(operation.executions.value, 0, "it ran before its late dependency finished")
        finishOnAQueue(dependency, marking: dependencyFinished)
        waitFinished(operation)
        XCTAssertEqual(operation.executions.value, 1)
        XCTAssertEqual(ranAfter.value, [true, true])
        XCTAssertEqual(diagnostics.kinds(for: operation), [])
        drain(queue)
        #endif
    }

    /// In a queue with a width limit the start does not wait: it would keep the slot that the
    /// operations ahead of the barrier need (a review hung a serial queue so). It runs as Foundation's
    /// would, says it was not ready, and leaves no edge in the barrier, whose finish would otherwise
    /// follow its pointer to the operation after the operation was freed.
    func testInAQueueWithAWidthLimitAStartOnAStaleReadinessRunsAndLeavesNoEdgeInTheBarrier() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation keeps no record Baton can read, and its queue reads readiness through KVO")
        #else
        for width in [1, 3] {
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = width
            // Ahead of the barrier, waiting for a dependency outside the queue: a worker slot must stay
            // free for it.
            let external = BlockOperation {}
            let ahead = (0..<width).map { _ in BlockOperation {} }
            for operation in ahead { operation.addDependency(external) }
            queue.addOperations(ahead, waitUntilFinished: false)
            let barrierRan = Locked(false)
            queue.addBarrierBlock { barrierRan.mutate { $0 = true } }
            let barriers = FoundationDump.listed(in: queue).filter { listed in !ahead.contains { $0 === listed } }
            XCTAssertEqual(barriers.count, 1)
            weak var freedOperation: StaleReadinessOperation?
            inScope {
                let operation = StaleReadinessOperation()
                freedOperation = operation
                queue.addOperation(operation)
                XCTAssertEqual(barriers.map { FoundationDump.dependentCount(of: $0) }, [1])
                operation.announceStaleReadiness()
                waitFinished(operation)
                XCTAssertEqual(operation.executions.value, 1, "width \(width)")
                XCTAssertEqual(diagnostics.kinds(for: operation), [.startedWhileNotReady], "width \(width)")
                XCTAssertFalse(barrierRan.value)
                XCTAssertEqual(operation.outcome?.isSuccess, true)
            }
            XCTAssertEqual(
                barriers.map { FoundationDump.dependentCount(of: $0) }, [0],
                "width \(width): the pending barrier still points to the finished operation")
            XCTAssertTrue(eventually { freedOperation == nil }, "width \(width): the operation was never freed")
            // The barrier's finish walks its dependents: a pointer left to the freed operation crashes here.
            external.start()
            XCTAssertTrue(eventually { barrierRan.value }, "width \(width): \(FoundationDump.of(queue))")
            drain(queue)
        }
        #endif
    }

    /// A limit set on the queue while a start waits would leave the pending barrier no slot (the
    /// waiting start keeps one): the start notices and runs, as in a queue that had the limit from the
    /// start (an independent review's finding; the queue hung for good).
    func testAWidthLimitSetWhileAStartWaitsLetsItRun() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation keeps no record Baton can read, and its queue reads readiness through KVO")
        #else
        for aheadStarted in [true, false] {
            let queue = OperationQueue()
            let release = DispatchSemaphore(value: 0)
            let started = Gate()
            let external = BlockOperation {}
            let ahead = BlockOperation {
                started.open()
                _ = release.wait(timeout: .now() + testTimeout)
            }
            if !aheadStarted { ahead.addDependency(external) }
            queue.addOperation(ahead)
            if aheadStarted { started.wait() }
            let barrierRan = Locked(false)
            queue.addBarrierBlock { barrierRan.mutate { $0 = true } }
            let operation = StaleReadinessOperation()
            queue.addOperation(operation)
            operation.announceStaleReadiness()
            XCTAssertTrue(eventually { operation.parkedOrRan }, "the queue never started it")
            XCTAssertEqual(operation.executions.value, 0)
            // A limit Linux's queue counts as none changes nothing.
            queue.maxConcurrentOperationCount = .max
            _ = eventually(timeout: 0.25) { operation.isFinished }
            XCTAssertEqual(operation.executions.value, 0, "a limit of Int.max let it run before the barrier")
            queue.maxConcurrentOperationCount = 1
            waitFinished(operation)
            XCTAssertEqual(operation.executions.value, 1, "ahead started \(aheadStarted)")
            XCTAssertEqual(diagnostics.kinds(for: operation), [.startedWhileNotReady], "ahead started \(aheadStarted)")
            XCTAssertFalse(barrierRan.value)
            if !aheadStarted { external.start() }
            release.signal()
            XCTAssertTrue(eventually { barrierRan.value }, "ahead started \(aheadStarted): \(FoundationDump.of(queue))")
            drain(queue)
        }
        #endif
    }

    /// The race itself, as users meet it: an operation behind a pending barrier, added to the queue
    /// while two threads make it depend on a finished operation, a third reads `isReady` and a fourth
    /// may cancel it (with and without a category, whose gate reads readiness too). Whoever wins, it
    /// neither executes nor finishes before the barrier has run.
    func testAnOperationAddedBehindABarrierWhileItsDependenciesChangeNeverRunsFirst() throws {
        let trials = ProcessInfo.processInfo.environment["BATON_TRIALS"].flatMap(Int.init) ?? 1_000
        var random = SplitMix(state: 6101)
        let finishedDependency = BlockOperation {}
        finishedDependency.start()
        var failures: [String] = []
        for trial in 0..<trials {
            let (queue, release, barrierRan) = queueWithPendingBarrier()
            let early = Locked(0)
            let operation = AsyncBlockOperation { operation in
                if !barrierRan.value { early.increment() }
                operation.finish()
            }
            if random.next(2) == 0 {
                try operation.addExclusivity(OperationCategory("X", in: ExclusivityScope("stale-readiness-\(trial)")))
            }
            let cancels = random.next(4) == 0
            raceAdding(operation, to: queue, dependingOn: finishedDependency, cancels: cancels, &random)
            // A start the queue made too early ends (or not) at once: a moment's look sees it.
            if eventually(timeout: 0.002, { operation.isFinished }) {
                failures.append(
                    "trial \(trial): finished before the barrier (cancel \(cancels)): \(FoundationDump.of(operation))")
            }
            release.signal()
            if !eventually(timeout: testTimeout, { operation.isFinished }) {
                failures.append("trial \(trial): never finished: \(FoundationDump.of(operation))")
            }
            if early.value > 0 { failures.append("trial \(trial): executed before the barrier") }
            if failures.count > 5 { break }
        }
        XCTAssertEqual(failures, [])
    }

    /// The same race in a queue with a width limit, where a start the queue makes too early does not
    /// wait: the operation may end before the barrier (executed, or cancelled), but once it has, no
    /// pending barrier points to it any more.
    func testInAQueueWithAWidthLimitTheRaceLeavesNoBarrierPointingToAFinishedOperation() throws {
        let trials = ProcessInfo.processInfo.environment["BATON_TRIALS"].flatMap(Int.init) ?? 1_000
        var random = SplitMix(state: 6102)
        let finishedDependency = BlockOperation {}
        finishedDependency.start()
        var failures: [String] = []
        var endedFirst = 0
        for trial in 0..<trials {
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 2
            let release = DispatchSemaphore(value: 0)
            let ahead = BlockOperation { _ = release.wait(timeout: .now() + testTimeout) }
            queue.addOperation(ahead)
            queue.addBarrierBlock {}
            let barriers = FoundationDump.listed(in: queue).filter { $0 !== ahead }
            let operation = AsyncBlockOperation { $0.finish() }
            if random.next(2) == 0 {
                try operation.addExclusivity(OperationCategory("X", in: ExclusivityScope("stale-readiness-width-\(trial)")))
            }
            let cancels = random.next(4) == 0
            raceAdding(operation, to: queue, dependingOn: finishedDependency, cancels: cancels, &random)
            if eventually(timeout: 0.002, { operation.isFinished }) {
                waitFinished(operation)
                endedFirst += 1
                let pointing = barriers.compactMap { FoundationDump.dependentCount(of: $0) }.filter { $0 > 0 }
                if !pointing.isEmpty {
                    failures.append(
                        "trial \(trial) (cancel \(cancels)): a pending barrier still points to the finished operation")
                }
            }
            release.signal()
            if !eventually(timeout: testTimeout, { operation.isFinished }) {
                failures.append("trial \(trial): never finished: \(FoundationDump.of(operation))")
            }
            drain(queue)
            if failures.count > 5 { break }
        }
        XCTAssertEqual(failures, [], "\(endedFirst) of \(trials) ended before the barrier")
    }

    /// Runs `dependency` on a queue of its own and finishes it there, `finished` set just before: its
    /// finish's last act is to have Foundation read its dependents' `isReady`.
    private func finishOnAQueue(_ dependency: ManualOperation, marking finished: Locked<Bool>) {
        OperationQueue().addOperation(dependency)
        dependency.started.wait()
        finished.mutate { $0 = true }
        dependency.finish(with: 1)
    }
}
