import Foundation
import XCTest

@testable import Baton

/// Baton's one lock. On Linux it is a word of its own (an inline compare-and-swap that spins, then
/// sleeps on a futex), so these pin what a lock must do: exclusion under contention from more
/// threads than cores, and a release that wakes a thread asleep on it.
final class MutexTests: BatonTestCase {
    private struct Pair {
        var first = 0
        var second = 0
    }

    /// Threads (four times the cores, so some are preempted while holding the lock and others sleep)
    /// each add to two counters under the lock, checking on every entry that no one else is inside:
    /// the two counters are equal between critical sections and the totals are exact.
    func testContendedUseExcludesAndLosesNoUpdate() {
        let threads = 4 * max(2, ProcessInfo.processInfo.activeProcessorCount)
        let rounds = 20_000
        let mutex = Mutex(Pair())
        let seenInside = Locked(0)
        let done = DispatchGroup()
        for _ in 0..<threads {
            done.enter()
            Thread {
                var overlaps = 0
                for round in 0..<rounds {
                    mutex.withLock { pair in
                        if pair.first != pair.second { overlaps += 1 }
                        pair.first += 1
                        // A window between the two writes, longer on some rounds.
                        for _ in 0..<(round % 7) { pair.second &+= 0 }
                        pair.second += 1
                    }
                }
                seenInside.mutate { $0 += overlaps }
                done.leave()
            }.start()
        }
        XCTAssertEqual(done.wait(timeout: .now() + testTimeout), .success, "threads did not finish")
        let pair = mutex.withLock { $0 }
        XCTAssertEqual(pair.first, threads * rounds)
        XCTAssertEqual(pair.second, threads * rounds)
        XCTAssertEqual(seenInside.value, 0, "a thread found another inside the lock")
    }

    #if os(Linux)
    /// A thread that finds the lock held long enough goes to sleep on it (its word says so); the
    /// holder's release must wake it, and every waiter after it, each in turn.
    func testReleaseWakesSleepingWaiters() {
        for _ in 0..<20 {
            let mutex = Mutex(0)
            let held = Gate()
            let release = Gate()
            let waiters = 4
            let done = DispatchGroup()
            done.enter()
            Thread {
                mutex.withLock { value in
                    held.open()
                    release.wait()
                    value += 1
                }
                done.leave()
            }.start()
            held.wait()
            for _ in 0..<waiters {
                done.enter()
                Thread {
                    mutex.withLock { $0 += 1 }
                    done.leave()
                }.start()
            }
            // Wait (bounded) until some waiter has given up spinning and sleeps on the lock.
            let deadline = DispatchTime.now() + testTimeout
            while !mutex.mayHaveSleepers && DispatchTime.now() < deadline { sched_yield() }
            XCTAssertTrue(mutex.mayHaveSleepers, "no waiter went to sleep on the lock")
            release.open()
            guard done.wait(timeout: .now() + testTimeout) == .success else {
                return XCTFail("a sleeping waiter was never woken")
            }
            XCTAssertEqual(mutex.withLock { $0 }, waiters + 1)
        }
    }
    #endif
}
