import Foundation
import XCTest

@testable import Baton

/// Attacks on rates along the surfaces where reviews find defects: a grant decided by the rate's
/// timer on one thread while a cancellation, a rate change or a second grant lands on another; a
/// waiter held back by a rate in a width-limited Foundation queue; arguments at their extremes.
final class RateAttackTests: BatonTestCase {
    /// Counts its executions, and those entered after a `cancel()` had returned while it was not yet
    /// executing (which must never happen: the cancellation is decided before `cancel()` returns);
    /// finishes at once.
    private final class Counted: AsyncOperation, @unchecked Sendable {
        let runs = Locked(0)
        let cancelReturned = Locked(false)
        let enteredCancelled = Locked(0)
        /// Called as it executes; set before it is enqueued.
        nonisolated(unsafe) var onRun: (@Sendable () -> Void)?
        override func execute() {
            if cancelReturned.value { enteredCancelled.increment() }
            runs.increment()
            onRun?()
            finish()
        }
        /// Cancels, then notes whether the machine had not yet decided to execute. A cancel that
        /// lands once it has (`executing`) may still see `execute()` entered a moment later: the
        /// call is made outside the lock, after the decision. Noting `true` there made the check
        /// fail about 1 trial in 1,000 under ThreadSanitizer, with nothing wrong.
        func cancelAndNote() {
            cancel()
            let notExecuting = core.withLock { state -> Bool in
                if case .executing = state.life.phase { return false }
                return true
            }
            cancelReturned.mutate { $0 = notExecuting }
        }
    }

    /// A waiter that only the rate's timer can grant, cancelled from another thread after a random
    /// busy spin (so the cancel lands before, during and after the timer's grant across trials), while a
    /// third thread changes the rate: it ends exactly once, executed at most once and never entered
    /// after `cancel()` returned (a cancel that lands inside may still win the outcome, by design);
    /// the table ends idle.
    func testACancelRacingTheRateTimersGrantEndsTheWaiterOnce() throws {
        var random = SplitMix(state: 20_261_125)
        var outcomes = (succeeded: 0, cancelled: 0)
        for trial in 0..<300 {
            let scope = ExclusivityScope("rate race \(trial)")
            try scope.setLimit(100, for: "api")
            try scope.setRate(1, per: .microseconds(500), for: "api")
            let category = OperationCategory("api", in: scope)
            let first = Counted()
            try first.addExclusivity(category)
            let waiter = Counted()
            try waiter.addExclusivity(category)
            let queue = OperationQueue()
            queue.addOperation(first)
            queue.addOperation(waiter)
            // A busy spin (no sleep) of 0 to 900 µs: across trials the cancel lands before, at and
            // after the moment the 500 µs window lets the waiter through.
            let spin = UInt64(random.next(900_000))
            let changeRate = random.next(3) == 0
            let gate = Gate()
            let done = DispatchGroup()
            DispatchQueue.global().async(group: done) {
                gate.wait()
                let until = DispatchTime.now().uptimeNanoseconds + spin
                while DispatchTime.now().uptimeNanoseconds < until {}
                waiter.cancelAndNote()
            }
            DispatchQueue.global().async(group: done) {
                gate.wait()
                if changeRate { try? scope.setRate(1, per: .microseconds(300), for: "api") }
            }
            gate.open()
            gate.open()
            XCTAssertEqual(done.wait(timeout: .now() + testTimeout), .success)
            waitFinished(first)
            waitFinished(waiter)
            let runs = waiter.runs.value
            XCTAssertLessThanOrEqual(runs, 1, "trial \(trial)")
            XCTAssertEqual(waiter.enteredCancelled.value, 0, "trial \(trial): executed although cancelled first")
            switch waiter.outcome {
            case .succeeded?:
                XCTAssertEqual(runs, 1, "trial \(trial): succeeded without executing")
                outcomes.succeeded += 1
            case .cancelled?:
                outcomes.cancelled += 1
            case let other:
                XCTFail("trial \(trial): \(String(describing: other))")
            }
            XCTAssertTrue(eventually { Gatekeeper.isIdle }, "trial \(trial)")
        }
        // Both sides of the race were reached, or the attack proved nothing.
        XCTAssertGreaterThan(outcomes.succeeded, 0)
        XCTAssertGreaterThan(outcomes.cancelled, 0)
    }

    /// Many waiters behind one rate, granted by its timers while other threads remove and set the
    /// rate again and cancel some: each runs at most once, every one finishes, and the limit holds.
    func testRateChangesRacingTimerGrantsGrantEachWaiterOnce() throws {
        for trial in 0..<20 {
            let scope = ExclusivityScope("rate flip \(trial)")
            try scope.setLimit(2, for: "api")
            try scope.setRate(3, per: .milliseconds(1), for: "api")
            let operations = (0..<60).map { _ in Counted() }
            for operation in operations { try operation.addExclusivity(OperationCategory("api", in: scope)) }
            let gate = Gate()
            let done = DispatchGroup()
            DispatchQueue.global().async(group: done) {
                gate.wait()
                let queue = OperationQueue()
                queue.addOperations(operations, waitUntilFinished: false)
            }
            DispatchQueue.global().async(group: done) {
                gate.wait()
                for round in 0..<200 {
                    if round % 2 == 0 {
                        scope.removeRate(for: "api")
                    } else {
                        try? scope.setRate(1, per: .milliseconds(2), for: "api")
                    }
                }
            }
            DispatchQueue.global().async(group: done) {
                gate.wait()
                for operation in operations.enumerated() where operation.offset % 5 == 0 { operation.element.cancelAndNote() }
            }
            for _ in 0..<3 { gate.open() }
            XCTAssertEqual(done.wait(timeout: .now() + testTimeout), .success)
            for operation in operations { waitFinished(operation) }
            for (index, operation) in operations.enumerated() {
                XCTAssertLessThanOrEqual(operation.runs.value, 1, "trial \(trial): #\(index)")
                XCTAssertEqual(operation.enteredCancelled.value, 0, "trial \(trial): #\(index)")
                if index % 5 != 0 { XCTAssertEqual(operation.outcome?.isSuccess, true, "trial \(trial): #\(index)") }
            }
            XCTAssertTrue(eventually { Gatekeeper.isIdle }, "trial \(trial)")
        }
    }

    /// In a serial Foundation queue, an operation held back by a rate does not take the worker: the
    /// operation behind it runs while it waits.
    func testAWaiterHeldBackByARateDoesNotTakeASerialQueuesWorker() throws {
        let scope = ExclusivityScope("rate serial")
        try scope.setRate(1, per: .seconds(3_600), for: "api")
        let category = OperationCategory("api", in: scope)
        let first = Counted()
        first.name = "first"
        try first.addExclusivity(category)
        let held = Counted()
        held.name = "held"
        try held.addExclusivity(category)
        let behind = Counted()
        behind.name = "behind"
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        // The first takes the rate's one start; the queue runs whatever is ready in the meantime (a
        // gated operation is not ready until its gate passes), so it finishes before the others come.
        queue.addOperation(first)
        waitFinished(first)
        queue.addOperations([held, behind], waitUntilFinished: false)
        waitFinished(behind)
        XCTAssertFalse(held.isFinished, "still held back by the rate")
        let expected = "waiting for 'api' in rate serial (rate 1 per 3600.0 seconds)"
        XCTAssertTrue(eventually { held.gateWaitDescription() == expected }, String(describing: held.gateWaitDescription()))
        held.cancel()
        waitFinished(held)
        XCTAssertEqual(held.runs.value, 0)
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    /// Counts at their extremes are refused or taken as they are, never a crash: `Int.min` and 0 are
    /// refused before anything is set; `Int.max` is a rate no burst reaches.
    func testExtremeCountsAreRefusedOrTakenWithoutACrash() throws {
        let scope = ExclusivityScope("rate extremes")
        for count in [Int.min, -1, 0] {
            XCTAssertThrowsError(try scope.setRate(count, per: .seconds(1), for: "api"))
        }
        XCTAssertNil(scope.rate(of: "api"))
        try scope.setLimit(10, for: "api")
        try scope.setRate(Int.max, per: .seconds(3_600), for: "api")
        let operations = (0..<50).map { _ in Counted() }
        for operation in operations { try operation.addExclusivity(OperationCategory("api", in: scope)) }
        try GroupOperation(operations: operations).run(timeout: .seconds(testTimeout))
        XCTAssertEqual(operations.map(\.runs.value), Array(repeating: 1, count: 50))
    }

    /// Scopes made, paced, used by groups (holding the paced category and lending it to children, or
    /// not) and dropped, from many threads at once, some groups cancelled mid-flight from another
    /// thread (the group and each child), while the rates' timers fire and the scopes' cooling lanes
    /// are forgotten: every operation ends once, no child executes after its cancel returned, and the
    /// table ends idle.
    func testPacedScopesMadeUsedCancelledAndDroppedFromManyThreadsLeaveNothingHeld() {
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 96) { iteration in
            var random = SplitMix(state: UInt64(iteration) &+ 4_242)
            do {
                let scope = ExclusivityScope("churn \(iteration)")
                try scope.setLimit(2, for: "api")
                try scope.setRate(1 + random.next(2), per: .microseconds(200 + random.next(800)), for: "api")
                let category = OperationCategory("api", in: scope)
                let children = (0..<6).map { _ in Counted() }
                for child in children { try child.addExclusivity(category) }
                let group = GroupOperation(operations: children)
                if random.next(2) == 0 { try group.addExclusivity(category) }
                let queue = OperationQueue()
                // A third of the groups are cancelled once `after` of their children have run (0 to 5),
                // so the cancel lands while the rest wait for the rate's timer, or are being granted.
                let cancels = random.next(3) == 0
                let after = random.next(6)
                let ran = Locked(0)
                let gate = Gate()
                if cancels {
                    for child in children {
                        child.onRun = {
                            if ran.mutate({
                                $0 += 1
                                return $0
                            }) == after {
                                gate.open()
                            }
                        }
                    }
                    if after == 0 { gate.open() }
                }
                let cancelled = DispatchGroup()
                if cancels {
                    DispatchQueue.global().async(group: cancelled) {
                        gate.wait()
                        // The group's cancellation reaches every child before it returns, even while
                        // it launches them (CompositeCancelTests); each child is cancelled here too,
                        // and none may enter execute() once its own cancel() has returned.
                        group.cancel()
                        for child in children { child.cancelAndNote() }
                    }
                }
                let finished = DispatchSemaphore(value: 0)
                group.observeCompletionForTests { finished.signal() }
                queue.addOperation(group)
                guard cancelled.wait(timeout: .now() + testTimeout) == .success,
                    finished.wait(timeout: .now() + testTimeout) == .success
                else {
                    failures.mutate { $0.append("iteration \(iteration): did not finish") }
                    return
                }
                for child in children {
                    if child.runs.value > 1 { failures.mutate { $0.append("iteration \(iteration): a child ran twice") } }
                    if child.enteredCancelled.value > 0 {
                        failures.mutate { $0.append("iteration \(iteration): a child executed after its cancel returned") }
                    }
                    if !cancels, child.runs.value != 1 {
                        failures.mutate { $0.append("iteration \(iteration): a child of an uncancelled group did not run") }
                    }
                }
            } catch {
                failures.mutate { $0.append("iteration \(iteration): \(error)") }
            }
        }
        XCTAssertEqual(failures.value, [])
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }
}
