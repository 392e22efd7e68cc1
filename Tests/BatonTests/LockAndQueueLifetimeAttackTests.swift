import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Hammers from stop 48's independent review: the futex lock (c92f161), the launch queue held until
/// the operation finishes (6094929), the input hand-on without a cast (4b8a70c) and the record as a
/// value (3e1795c). None found a defect; they stay as the attack on those lines.
final class LockAndQueueLifetimeAttackTests: BatonTestCase {
    private struct Weak<Object: AnyObject> {
        weak var object: Object?
        init(_ object: Object) { self.object = object }
    }

    private var trials: Int {
        ProcessInfo.processInfo.environment["BATON_LOCK_QUEUE_ATTACK_TRIALS"].flatMap(Int.init) ?? 200
    }

    // MARK: - c92f161: the futex lock

    /// Many more threads than cores (32 per core), critical sections of varying length (some long
    /// enough that waiters give up spinning and sleep), one lock: every thread finishes, totals are
    /// exact, no thread ever finds another inside.
    func testOversubscribedLockMakesProgressAndExcludes() {
        let threads = 32 * max(2, ProcessInfo.processInfo.activeProcessorCount)
        let rounds = 3_000
        let mutex = Mutex((first: 0, second: 0))
        let overlaps = Locked(0)
        let line = StartingLine()
        for index in 0..<threads {
            line.thread {
                var seen = 0
                for round in 0..<rounds {
                    mutex.withLock { pair in
                        if pair.first != pair.second { seen += 1 }
                        pair.first += 1
                        let spin = (round &+ index) % 97 == 0 ? 20_000 : round % 5
                        for _ in 0..<spin { pair.second &+= 0 }
                        pair.second += 1
                    }
                }
                overlaps.mutate { $0 += seen }
            }
        }
        XCTAssertTrue(line.release(timeout: 50), "a thread never got the lock")
        XCTAssertEqual(mutex.withLock { $0.first }, threads * rounds)
        XCTAssertEqual(mutex.withLock { $0.second }, threads * rounds)
        XCTAssertEqual(overlaps.value, 0)
    }

    #if os(Linux)
    /// Sleepers on the lock while a barging thread keeps taking and releasing it through the fast path
    /// (0 -> 1, which clears the "sleepers" mark the woken thread must put back): every sleeper is
    /// woken, in every trial.
    func testSleepersAreWokenWhileAnotherThreadBarges() {
        for trial in 0..<trials {
            let mutex = Mutex(0)
            let held = Gate()
            let release = Gate()
            let stopBarging = Locked(false)
            let waiters = 1 + trial % 6
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
            let bargerDone = Gate()
            Thread {
                var taken = 0
                while !stopBarging.value {
                    mutex.withLock { _ in taken += 1 }
                }
                bargerDone.open()
            }.start()
            let deadline = DispatchTime.now() + testTimeout
            while !mutex.mayHaveSleepers && DispatchTime.now() < deadline { sched_yield() }
            release.open()
            let woken = done.wait(timeout: .now() + testTimeout) == .success
            stopBarging.mutate { $0 = true }
            bargerDone.wait()
            guard woken else { return XCTFail("trial \(trial): a sleeper on the lock was never woken") }
            XCTAssertEqual(mutex.withLock { $0 }, waiters + 1)
        }
    }
    #endif

    // MARK: - 6094929: the launch queue held strongly

    /// Queues dropped by their owner at once after Baton was given a group, a sequence, a retry whose
    /// first attempt fails, a tree and a rerunning operation, each finishing its work on a thread that
    /// is not the queue's (so Baton's release in the finish may be the queue's last): every operation
    /// finishes and every queue, including every composite's own queue, is freed.
    func testDroppedQueuesWithCompositesFinishingElsewhereAreAllFreed() throws {
        let queues = Locked<[Weak<OperationQueue>]>([])
        var tops: [Operation] = []
        let elsewhere = DispatchQueue(label: "elsewhere", attributes: .concurrent)
        var dispatchQueues: [DispatchQueue] = []
        for trial in 0..<trials {
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = trial % 2 == 0 ? 1 : 3
            if trial % 3 == 0 {
                let under = DispatchQueue(label: "under-\(trial)")
                dispatchQueues.append(under)
                queue.underlyingQueue = under
            }
            queues.mutate { $0.append(Weak(queue)) }
            let leaf = { AsyncBlockOperation { op in elsewhere.async { op.finish() } } }
            let group = GroupOperation(operations: (0..<3).map { _ in leaf() })
            let sequence = SequenceOperation<any Sendable>(operations: [leaf(), leaf(), GroupOperation(operations: [leaf()])])
            let retry = RetryOperation<Int>(maximumAttempts: 3) { (attempt: Int) -> ResultOperation<Int> in
                ResultBlockOperation<Int> { op in
                    elsewhere.async { attempt < 2 ? op.finish(throwing: TestError(code: attempt)) : op.finish(with: attempt) }
                }
            }
            let root = TreeNode<Int, Int>("root", items: { [$0, $0 + 1] }) { value in
                ResultBlockOperation<Int> { op in elsewhere.async { op.finish(with: value) } }
            }
            let tree = TreeOperation(root: root, input: trial)
            let runs = Locked(0)
            let rerunning = AsyncBlockOperation { op in
                if runs.increment() < 3 { op.rerun() } else { elsewhere.async { op.finish() } }
            }
            try queue.addChain([group, sequence])
            try queue.addChain([retry])
            try queue.addChain([tree])
            try queue.addChain([rerunning])
            tops += [sequence, retry, tree, rerunning]
        }
        for operation in tops { waitFinished(operation) }
        XCTAssertEqual(tops.filter { !(($0 as? AsyncOperation)?.outcome?.isSuccess ?? false) }.count, 0)
        let freed = eventually { queues.value.allSatisfy { $0.object == nil } }
        XCTAssertTrue(freed, "\(queues.value.filter { $0.object != nil }.count) of \(queues.value.count) queues never freed")
    }

    /// The queue's last reference is Baton's, let go on a thread running a block of the queue's own
    /// serial underlying dispatch queue (the operation's finish is sent there, after Foundation's work
    /// item for it has returned), and the dispatch queue's only owner is the operation queue: every
    /// queue is freed, nothing crashes or hangs.
    func testAQueueFreedOnItsOwnUnderlyingQueue() throws {
        let queues = Locked<[Weak<OperationQueue>]>([])
        let dispatchQueues = Locked<[Weak<DispatchQueue>]>([])
        var lasts: [Operation] = []
        for trial in 0..<trials {
            let queue = OperationQueue()
            do {
                let under = DispatchQueue(label: "own-\(trial)")
                dispatchQueues.mutate { $0.append(Weak(under)) }
                queue.underlyingQueue = under
            }
            queues.mutate { $0.append(Weak(queue)) }
            // Sent to the queue's own dispatch queue, read when the block runs: by then Foundation's work
            // item has returned and only the operation holds the operation queue.
            let first = ResultBlockOperation<Int> { op in
                let target = OperationQueue.current?.underlyingQueue
                target?.async { op.finish(with: trial) }
            }
            let last = TransformBlockOperation<Int, Int> { op in
                let target = OperationQueue.current?.underlyingQueue
                let value = op.input ?? -1
                target?.async { op.finish(with: value + 1) }
            }
            try queue.addChain([first, last])
            lasts.append(last)
        }
        for operation in lasts { waitFinished(operation) }
        XCTAssertEqual(lasts.filter { ($0 as? ResultOperation<Int>)?.outcome?.isSuccess != true }.count, 0)
        XCTAssertTrue(eventually { queues.value.allSatisfy { $0.object == nil } }, "an operation queue was never freed")
        XCTAssertTrue(eventually { dispatchQueues.value.allSatisfy { $0.object == nil } }, "a dispatch queue was never freed")
    }

    /// Waits on operations of a queue whose owner dropped it: wait(timeout:) and value return the
    /// outcome, and the queue is then freed.
    func testWaitsAfterTheOwnerDropsTheQueue() async throws {
        weak var weakQueue: OperationQueue?
        let release = Gate()
        let operation = ResultBlockOperation<Int> { op in
            DispatchQueue.global().async {
                release.wait()
                op.finish(with: 7)
            }
        }
        do {
            let queue = OperationQueue()
            weakQueue = queue
            try queue.addChain([operation])
        }
        XCTAssertNotNil(weakQueue, "the executing operation holds its queue")
        release.open()
        let value = try await operation.value
        XCTAssertEqual(value, 7)
        XCTAssertEqual(try operation.wait(timeout: .seconds(testTimeout)), 7)
        XCTAssertTrue(eventually { weakQueue == nil })
    }

    // MARK: - 4b8a70c: the input hand-on

    private class Animal: @unchecked Sendable { var sound: String { "..." } }
    private final class Dog: Animal, @unchecked Sendable { override var sound: String { "woof" } }
    private protocol Named: Sendable { var name: String { get } }
    private struct Cat: Named, Hashable { let name: String }
    private struct Wrapper<T: Sendable>: Sendable { let value: T }

    /// What the chain gives `Input` when an adapter recovers with `value`, against what a plain
    /// `value as? Input` gives: the same description, or a mismatch for both.
    private func handOn<Input: Sendable>(_ value: any Sendable, as _: Input.Type) -> (chain: String, cast: String) {
        let queue = OperationQueue()
        let first = ResultBlockOperation<Int> { $0.finish(with: 0) }
        let second = TransformBlockOperation<Input, String> { op in
            op.finish(with: String(reflecting: op.input))
        }
        let adapter = ChainAdapter.recovering { _, _, _ in .recover(with: value) }
        guard (try? queue.addChain([first, second], adapter: adapter)) != nil else { return ("refused", "") }
        let chain: String
        switch try? second.waitToOutcome() {
        case .succeeded(let text)?: chain = text
        case .failed(BatonError.inputTypeMismatch)?: chain = "mismatch"
        case let other: chain = "other: \(String(describing: other))"
        }
        let cast = (value as? Input).map { String(reflecting: Optional<Input>.some($0)) } ?? "mismatch"
        return (chain, cast)
    }

    func testHandOnMatchesAPlainCastForEveryKindOfType() {
        let nilInt: Int? = nil
        let someNil: Int?? = .some(nil)
        let cases: [(String, (chain: String, cast: String))] = [
            ("Int <- Int", handOn(41, as: Int.self)),
            ("Animal <- Dog", handOn(Dog(), as: Animal.self)),
            ("Animal <- Animal", handOn(Animal(), as: Animal.self)),
            ("Dog <- Animal", handOn(Animal(), as: Dog.self)),
            ("any Named <- Cat", handOn(Cat(name: "Tom"), as: (any Named).self)),
            ("any Sendable <- Int", handOn(7, as: (any Sendable).self)),
            ("Int? <- Int", handOn(5, as: Int?.self)),
            ("Int? <- Int?.none", handOn(nilInt, as: Int?.self)),
            ("Int? <- Int??.some(nil)", handOn(someNil, as: Int?.self)),
            ("Int?? <- Int?.none", handOn(nilInt, as: Int??.self)),
            ("Int?? <- Int??.some(nil)", handOn(someNil, as: Int??.self)),
            ("Int <- Int?.some(3)", handOn(Optional(3), as: Int.self)),
            ("(any Sendable)? <- Int?.none", handOn(nilInt, as: (any Sendable)?.self)),
            ("Int <- NSNumber", handOn(NSNumber(value: 9), as: Int.self)),
            ("NSNumber <- Int", handOn(9, as: NSNumber.self)),
            ("Int.Type <- Int.self", handOn(Int.self, as: Int.Type.self)),
            ("Any.Type <- Int.self", handOn(Int.self, as: Any.Type.self)),
            ("(Int, String) <- tuple", handOn((1, "a"), as: (Int, String).self)),
            ("(a: Int, b: String) <- unlabelled tuple", handOn((1, "a"), as: (a: Int, b: String).self)),
            ("Wrapper<Int> <- Wrapper<Int>", handOn(Wrapper(value: 1), as: Wrapper<Int>.self)),
            ("Wrapper<Int?> <- Wrapper<Int>", handOn(Wrapper(value: 1), as: Wrapper<Int?>.self)),
            ("[Int] <- [Int]", handOn([1, 2], as: [Int].self)),
            ("[Int?] <- [Int]", handOn([1, 2], as: [Int?].self)),
            ("[any Sendable] <- [Int]", handOn([1, 2], as: [any Sendable].self)),
        ]
        for (name, result) in cases {
            XCTAssertEqual(result.chain, result.cast, name)
        }
    }

    // MARK: - 3e1795c: Recording as a value

    /// A recorder attached to queues that their owner drops, running groups, sequences, retries and
    /// trees whose work finishes elsewhere: every record is finished, each recorded once, and every
    /// parent named exists.
    func testRecordsOfDroppedQueuesAreWholeAndFinished() throws {
        let recorder = FlightRecorder()
        let elsewhere = DispatchQueue(label: "elsewhere", attributes: .concurrent)
        var tops: [Operation] = []
        for trial in 0..<max(1, trials / 4) {
            let queue = OperationQueue()
            recorder.attach(to: queue)
            let leaf = { AsyncBlockOperation { op in elsewhere.async { op.finish() } } }
            let group = GroupOperation(operations: (0..<3).map { _ in leaf() })
            let sequence = SequenceOperation<any Sendable>(operations: [leaf(), GroupOperation(operations: [leaf()])])
            let retry = RetryOperation<Int>(maximumAttempts: 2) { (attempt: Int) -> ResultOperation<Int> in
                ResultBlockOperation<Int> { op in
                    elsewhere.async { attempt < 2 ? op.finish(throwing: TestError(code: 1)) : op.finish(with: trial) }
                }
            }
            try queue.addChain([group, sequence, retry])
            tops.append(retry)
        }
        for operation in tops { waitFinished(operation) }
        XCTAssertTrue(
            eventually { recorder.records.allSatisfy(\.status.isFinished) },
            "unfinished: \(recorder.records.filter { !$0.status.isFinished }.prefix(3))")
        let records = recorder.records
        let ids = Set(records.map(\.id))
        XCTAssertEqual(ids.count, records.count)
        XCTAssertEqual(records.filter { $0.parentID.map { !ids.contains($0) } ?? false }.count, 0)
        // Per trial: chain 1, group 1 + 3, sequence 1 + leaf 1 + inner group 1 + 1, retry 1 + 2 attempts.
        XCTAssertEqual(records.count, tops.count * 12, "records: \(records.count)")
    }
}
