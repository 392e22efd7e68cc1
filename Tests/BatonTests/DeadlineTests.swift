import Dispatch
import Foundation
import XCTest

@testable import Baton

/// The cancellable timers behind conditions', flags' and operations' timeouts (``Deadlines``).
final class DeadlineTests: BatonTestCase {
    private var pending: Int { Deadlines.state.withLock { $0.count } }

    /// The heap against a sorted reference, over random insertions, cancellations and pops.
    func testTheHeapGivesBackExactlyWhatIsDueWhateverWasCancelled() {
        for seed in 1...20 as ClosedRange<UInt64> {
            var random = SplitMix(state: seed)
            var heap = Deadlines.State()
            var live: [(timer: Deadlines.Timer, id: Int)] = []
            var now: UInt64 = 0
            let fired = Locked<[Int]>([])
            for id in 0..<500 {
                switch random.next(10) {
                case 0...5:
                    let timer = Deadlines.Timer(deadline: now + UInt64(random.next(100))) { fired.mutate { $0.append(id) } }
                    heap.insert(timer)
                    live.append((timer, id))
                case 6...7:
                    guard !live.isEmpty else { continue }
                    let index = random.next(live.count)
                    XCTAssertTrue(heap.remove(live[index].timer), "seed \(seed)")
                    XCTAssertFalse(heap.remove(live[index].timer), "seed \(seed): removed twice")
                    live.remove(at: index)
                default:
                    now += UInt64(random.next(30))
                    let expected = Set(live.filter { $0.timer.deadline <= now }.map(\.id))
                    fired.mutate { $0 = [] }
                    for handler in heap.popDue(now) { handler() }
                    XCTAssertEqual(Set(fired.value), expected, "seed \(seed)")
                    XCTAssertEqual(fired.value.count, expected.count, "seed \(seed): a handler ran twice")
                    live.removeAll { $0.timer.deadline <= now }
                }
                XCTAssertEqual(heap.count, live.count, "seed \(seed)")
            }
        }
    }

    func testATimerRunsItsHandlerOnceNotBeforeItsDeadline() {
        let deadline = DispatchTime.now() + .milliseconds(20)
        let runs = Locked<[Bool]>([])
        let ran = Gate()
        Deadlines.after(.milliseconds(20)) {
            runs.mutate { $0.append(DispatchTime.now() >= deadline) }
            ran.open()
        }
        ran.wait()
        // A second timer, later, runs after the first would have run again.
        let later = Gate()
        Deadlines.after(.milliseconds(40)) { later.open() }
        later.wait()
        XCTAssertEqual(runs.value, [true])
    }

    /// Cancelled before its deadline, a timer never runs, and what its handler captured is freed at
    /// once (`asyncAfter` kept it until the deadline).
    func testACancelledTimerNeverRunsAndLetsGoOfItsHandlerAtOnce() {
        final class Canary: Sendable {}
        let runs = Locked(0)
        weak var watched: Canary?
        var timer: Deadlines.Timer?
        do {
            let canary = Canary()
            watched = canary
            timer = Deadlines.after(.milliseconds(10)) { withExtendedLifetime(canary) { runs.mutate { $0 += 1 } } }
        }
        XCTAssertNotNil(watched)
        XCTAssertTrue(timer!.cancel())
        XCTAssertNil(watched, "the handler was let go of when the timer was cancelled")
        XCTAssertFalse(timer!.cancel(), "cancelled twice")
        let later = Gate()
        Deadlines.after(.milliseconds(30)) { later.open() }
        later.wait()
        XCTAssertEqual(runs.value, 0)
    }

    /// Many threads schedule timers and cancel some as they come due: a cancel that says it won means
    /// the handler never runs; one that lost means it runs exactly once. Nothing is left pending.
    func testCancelsRacingTheirDeadlinesFromManyThreadsEachWinOrLoseCleanly() {
        let threads = 4
        let perThread = 1_500
        let runs = Locked([Int: Int]())
        let cancelled = Locked(Set<Int>())
        let before = pending
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            var random = SplitMix(state: UInt64(thread + 1))
            for index in 0..<perThread {
                let id = thread * perThread + index
                let timer = Deadlines.after(.microseconds(random.next(2_000))) { runs.mutate { $0[id, default: 0] += 1 } }
                if random.next(2) == 0 {
                    // Spin a little, so some cancels land just before, at and after the deadline.
                    for _ in 0..<random.next(200) { _ = DispatchTime.now() }
                    if timer.cancel() { cancelled.mutate { _ = $0.insert(id) } }
                }
            }
        }
        let total = threads * perThread
        XCTAssertTrue(eventually { runs.value.count + cancelled.value.count == total })
        XCTAssertTrue(runs.value.values.allSatisfy { $0 == 1 }, "a handler ran twice")
        XCTAssertTrue(cancelled.value.isDisjoint(with: runs.value.keys), "a cancelled timer ran")
        XCTAssertTrue(eventually { pending <= before })
    }

    // MARK: - Timeouts that end early leave nothing pending

    /// Conditions (60 s timeouts by default) that answer at once, operation timeouts that do not fire
    /// and flag waits ended by `set`: each cancels its timer.
    func testTimeoutsThatEndEarlyLeaveNoTimerPending() throws {
        let before = pending
        let children = (0..<1_000).map { _ in ImmediateOperation(.success(1)) }
        for child in children {
            try child.addCondition(Condition("ready") { _, answer in answer(.satisfied) })
            child.timeout = .seconds(600)
        }
        let flag = ConditionFlag("flag")
        let flagged = (0..<100).map { _ in ImmediateOperation(.success(2)) }
        for operation in flagged { try operation.addCondition(.waitUntil(flag, timeout: .seconds(600))) }
        let group = GroupOperation(operations: children + flagged)
        let run = Locked<Result<Void, any Error>?>(nil)
        DispatchQueue.global().async {
            run.mutate { $0 = Result { try group.run(timeout: .seconds(testTimeout)) } }
        }
        XCTAssertTrue(eventually { self.pending >= before + 100 }, "the flag waits are pending")
        flag.set()
        XCTAssertTrue(eventually { run.value != nil })
        XCTAssertNoThrow(try run.value?.get())
        XCTAssertTrue(eventually { self.pending <= before }, "\(pending - before) timers left pending")
    }

    /// Operations waiting on a flag (an hour's timeout) are cancelled: each flag wait leaves the flag,
    /// with its timer, when its evaluation is abandoned (a review found them kept until the hour was up;
    /// only `set` let go of them).
    func testCancelledFlagWaitsLeaveNoTimerPending() throws {
        let before = pending
        let flag = ConditionFlag("never set")
        let count = 200
        let operations = (0..<count).map { _ in ImmediateOperation(.success(1)) }
        for operation in operations { try operation.addCondition(.waitUntil(flag, timeout: .seconds(3_600))) }
        let queue = OperationQueue()
        queue.addOperations(operations, waitUntilFinished: false)
        // Every condition and its flag wait are under way: two timers each.
        XCTAssertTrue(eventually { self.pending >= before + 2 * count }, "\(pending - before) pending")
        for operation in operations { operation.cancel() }
        XCTAssertTrue(eventually { operations.allSatisfy(\.isFinished) })
        XCTAssertTrue(operations.allSatisfy { $0.outcome?.isCancelled == true })
        XCTAssertTrue(eventually { self.pending <= before }, "\(pending - before) timers still pending")
    }

    /// Cancelled while its conditions evaluate, an operation can be finished by its queue between the
    /// cancellation's two steps (the gate refused, then the evaluation taken and abandoned): the
    /// finish takes the evaluation then, and must abandon it too, or its timers stay. 40 rounds of 200
    /// operations in one queue, each finish making the queue walk the rest; without the fix, 2 rounds
    /// in 3 leave timers behind.
    func testOperationsCancelledWhileTheirConditionsEvaluateLeaveNoTimer() throws {
        for round in 0..<40 {
            let before = pending
            let flag = ConditionFlag("never set")
            let operations = (0..<200).map { _ in ImmediateOperation(.success(1)) }
            for operation in operations { try operation.addCondition(.waitUntil(flag, timeout: .seconds(3_600))) }
            OperationQueue().addOperations(operations, waitUntilFinished: false)
            if round % 2 == 0 { _ = eventually { self.pending >= before + 400 } }
            for operation in operations { operation.cancel() }
            XCTAssertTrue(eventually { operations.allSatisfy(\.isFinished) }, "round \(round)")
            guard eventually({ self.pending <= before }) else {
                return XCTFail("round \(round): \(pending - before) timers left pending")
            }
        }
    }
}
