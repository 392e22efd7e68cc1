import Dispatch
import Foundation
import XCTest

@testable import Baton

/// The longest a test waits for a small piece of work (a few operations): a bug fails the test, it
/// never hangs CI. A hang guard, not a speed check.
let testTimeout: Double = 20

/// The hang guard of a wait on bulk work (10⁵ nested composites, 10⁵-stage chains): as long as the
/// watchdog lets a test run, less a margin so that the wait fails with its own message first. Such work
/// takes seconds in a debug build and up to ten times longer under ThreadSanitizer on a busy 2-core
/// machine, so a fixed 20 s would be a speed check, which no test may contain.
let bulkTimeout: Double = Watchdog.limit * 0.9

/// A one-shot signal with a bounded wait.
final class Gate: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    func open() { semaphore.signal() }

    /// Waits for `open()` from async code, on a thread of its own; fails the test after `timeout`.
    func waitAsync(timeout: Double = testTimeout, file: StaticString = #filePath, line: UInt = #line) async {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                self.wait(timeout: timeout, file: file, line: line)
                continuation.resume()
            }
        }
    }

    /// Waits for `open()`; fails the test after `timeout` seconds.
    @discardableResult
    func wait(timeout: Double = testTimeout, file: StaticString = #filePath, line: UInt = #line) -> Bool {
        let opened = semaphore.wait(timeout: .now() + timeout) == .success
        XCTAssertTrue(opened, "gate not opened within \(timeout) s", file: file, line: line)
        return opened
    }
}

/// Runs `change(round)` for rounds 1, 2, 3, … on a thread of its own, for as long as `workers` is
/// above zero (each worker takes 1 off when it is done), then `finally`. Returns what is signalled once
/// it has stopped: wait on it, bounded, before checking what the workers saw.
func keepChanging(
    while workers: Locked<Int>, _ change: @escaping @Sendable (Int) -> Void,
    finally: @escaping @Sendable () -> Void = {}
) -> DispatchSemaphore {
    let stopped = DispatchSemaphore(value: 0)
    Thread {
        var round = 0
        while workers.value > 0 {
            round += 1
            change(round)
        }
        finally()
        stopped.signal()
    }.start()
    return stopped
}

/// A thread-safe value for tests.
final class Locked<Value>: @unchecked Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    var value: Value { mutex.withLock { $0 } }
    func mutate<Result>(_ body: (inout Value) -> Result) -> Result { mutex.withLock(body) }
}

extension Locked where Value == [String] {
    func append(_ event: String) { mutate { $0.append(event) } }
}

extension Locked where Value == Int {
    @discardableResult
    func increment() -> Int {
        mutate {
            $0 += 1
            return $0
        }
    }
}

/// An error with an identity the tests can compare.
struct TestError: Error, Equatable {
    let code: Int
}

/// Collects the diagnostics Baton reports while a test runs (XCTest runs tests one at a time).
final class DiagnosticsRecorder: Sendable {
    private let reports = Locked<[Diagnostic]>([])
    private let previous: @Sendable (Diagnostic) -> Void

    init() {
        previous = Diagnostics.handler
        let reports = self.reports
        Diagnostics.handler = { diagnostic in reports.mutate { $0.append(diagnostic) } }
    }

    func stop() { Diagnostics.handler = previous }

    /// Every kind reported so far, for any operation.
    var allKinds: [Diagnostic.Kind] { reports.value.map(\.kind) }

    func kinds(for operation: Operation) -> [Diagnostic.Kind] {
        reports.value.filter { $0.operation.operation === operation }.map(\.kind)
    }
}

/// An operation whose `execute()` records that it ran and then waits for the test to finish it.
final class ManualOperation: ResultOperation<Int>, @unchecked Sendable {
    let started = Gate()
    /// Opened by `didCancel()`, which comes after `execute()` has returned: wait on it before
    /// asserting what `didCancel()` did (`started` opens while `execute()` still runs).
    let cancelled = Gate()
    let executions = Locked(0)
    let cancellations = Locked(0)
    let finishesOnCancel: Bool

    init(name: String? = nil, finishesOnCancel: Bool = false) {
        self.finishesOnCancel = finishesOnCancel
        super.init()
        self.name = name
    }

    override func execute() {
        executions.increment()
        started.open()
    }

    override func didCancel() {
        cancellations.increment()
        cancelled.open()
        if finishesOnCancel { finish() }
    }
}

/// An operation that finishes with a value, or an error, as soon as it executes.
final class ImmediateOperation: ResultOperation<Int>, @unchecked Sendable {
    let planned: Result<Int, TestError>
    let executions = Locked(0)

    init(_ result: Result<Int, TestError>, name: String? = nil) {
        self.planned = result
        super.init()
        self.name = name
    }

    override func execute() {
        executions.increment()
        finish(with: planned.mapError { $0 as any Error })
    }
}

/// Signals when it is freed, so that tests can wait for a release without sleeping.
final class TrackedOperation: AsyncOperation, @unchecked Sendable {
    let freed: Gate
    init(freed: Gate) { self.freed = freed }
    override func execute() { finish() }
    deinit { freed.open() }
}

/// Waits (bounded) for the queue to drain: a barrier block runs once everything before it has
/// finished. Linux's queue unlinks a finished operation only after it has dispatched its completion
/// block, so a barrier can run while the queue still lists it: barriers are repeated (a bounded number
/// of times) until the queue is empty.
func drain(_ queue: OperationQueue, file: StaticString = #filePath, line: UInt = #line) {
    for _ in 0..<1_000 {
        let done = Gate()
        queue.addBarrierBlock { done.open() }
        guard done.wait(file: file, line: line) else { return }
        if queue.operationCount == 0 { return }
    }
}

/// How deep the nesting tests nest composites (`BATON_NESTING_DEPTH`, default 100,000).
let nestingDepth = ProcessInfo.processInfo.environment["BATON_NESTING_DEPTH"].flatMap(Int.init) ?? 100_000

/// Runs a nest made by `makeNest` around a block, cancels another before it starts, and frees a
/// third that never ran: each must finish (or be freed) within the bulk timeout.
func runCancelAndFree<Nest: AsyncOperation>(
    file: StaticString = #filePath, line: UInt = #line, _ makeNest: (Operation) -> Nest
) {
    let ran = Locked(0)
    let outer = makeNest(
        AsyncBlockOperation {
            ran.increment()
            $0.finish()
        })
    XCTAssertEqual(
        finished(outer, timeout: bulkTimeout, file: file, line: line).observedOutcome.isSuccess, true,
        file: file, line: line)
    XCTAssertEqual(ran.value, 1, file: file, line: line)

    let cancelled = makeNest(
        AsyncBlockOperation {
            ran.increment()
            $0.finish()
        })
    cancelled.cancel()
    XCTAssertEqual(
        finished(cancelled, timeout: bulkTimeout, file: file, line: line).observedOutcome.isCancelled, true,
        file: file, line: line)
    XCTAssertEqual(ran.value, 1, file: file, line: line)

    let freed = Gate()
    inScope { _ = makeNest(TrackedOperation(freed: freed)) }
    freed.wait(timeout: bulkTimeout, file: file, line: line)
}

/// Runs `body` in its own scope, so that its locals are released when it returns.
func inScope<Result>(_ body: () throws -> Result) rethrows -> Result {
    try body()
}

/// An operation that finishes with `number` after a random short delay on another thread: children
/// of composites then finish in a random order.
final class JitterOperation: ResultOperation<Int>, @unchecked Sendable {
    let number: Int
    let executions = Locked(0)
    init(_ number: Int) {
        self.number = number
        super.init()
    }
    override func execute() {
        executions.increment()
        DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(Int.random(in: 0...2_000))) {
            self.finish(with: self.number)
        }
    }
}

/// Runs `body` with the operation after it has finished (bounded).
@discardableResult
func finished<T: AsyncOperation>(
    _ operation: T, on queue: OperationQueue = OperationQueue(), timeout: Double = testTimeout,
    file: StaticString = #filePath, line: UInt = #line
) -> T {
    let done = Gate()
    operation.whenFinished { done.open() }
    queue.addOperation(operation)
    done.wait(timeout: timeout, file: file, line: line)
    return operation
}

extension Operation {
    /// Test access to the internal completion hook (Baton and Foundation operations alike).
    func observeCompletionForTests(_ body: @escaping @Sendable () -> Void) {
        observeCompletion(body)
    }

    /// Test access to the hook that also calls `body` when the operation has already finished.
    func observeCompletionOnceForTests(_ body: @escaping @Sendable () -> Void) {
        observeCompletionOnce(body)
    }
}

/// An operation that runs more work on `queue` with a blocking run (bounded at 60 s) from its
/// `execute()`, then finishes; `said` tells what the run did: "ran", or the error it threw.
func runningInnerWorkBlocking(on queue: OperationQueue) -> (AsyncBlockOperation, said: Locked<String>) {
    let said = Locked("not run")
    let outer = AsyncBlockOperation { operation in
        do {
            try ImmediateOperation(.success(1), name: "inner").run(on: queue, timeout: .seconds(60))
            said.mutate { $0 = "ran" }
        } catch {
            said.mutate { $0 = "\(error)" }
        }
        operation.finish()
    }
    return (outer, said)
}

/// Polls `condition` until it holds or `timeout` runs out (for a release that a queue finishes on
/// its own thread just after the operation has finished).
func eventually(timeout: Double = testTimeout, _ condition: () -> Bool) -> Bool {
    let deadline = DispatchTime.now() + timeout
    let tick = DispatchSemaphore(value: 0)
    while !condition() {
        guard DispatchTime.now() < deadline else { return false }
        _ = tick.wait(timeout: .now() + .milliseconds(1))
    }
    return true
}

/// Threads held at one line and released together (a gate, not a sleep), to widen the windows in
/// which their bodies race; `release(timeout:)` lets them all go and waits until every body returned.
final class StartingLine: Sendable {
    private let go = DispatchSemaphore(value: 0)
    private let done = DispatchGroup()
    private let count = Locked(0)

    /// Starts a thread that runs `body` once the line is released (or after ten seconds, so that a
    /// test that never releases it does not leave threads waiting).
    func thread(_ body: @escaping @Sendable () -> Void) {
        count.increment()
        done.enter()
        Thread { [go, done] in
            _ = go.wait(timeout: .now() + 10)
            body()
            done.leave()
        }.start()
    }

    /// Releases every thread started so far; `true` when all bodies returned within `timeout` seconds.
    func release(timeout: Double) -> Bool {
        for _ in 0..<count.value { go.signal() }
        return done.wait(timeout: .now() + timeout) == .success
    }
}

/// Counts entries and exits from any thread: how many are in now, the most there ever were at once,
/// and how many entered in all (operations executing in one category, or alive at once).
final class ConcurrencyMeter: Sendable {
    private let counts = Locked((now: 0, most: 0, total: 0))
    var now: Int { counts.value.now }
    var most: Int { counts.value.most }
    var total: Int { counts.value.total }
    func enter() {
        counts.mutate {
            $0.now += 1
            $0.total += 1
            $0.most = max($0.most, $0.now)
        }
    }
    func leave() { counts.mutate { $0.now -= 1 } }
}

/// A `ManualOperation` named "holder" that claims `category`, added to `queue` and executing (holding
/// the category) when this returns.
func holding(
    _ category: OperationCategory, on queue: OperationQueue = OperationQueue(), file: StaticString = #filePath,
    line: UInt = #line
) throws -> ManualOperation {
    let holder = ManualOperation(name: "holder")
    try holder.addExclusivity(category)
    queue.addOperation(holder)
    XCTAssertTrue(holder.started.wait(), "the holder never started", file: file, line: line)
    return holder
}

/// A group of `operations` recorded by a new `FlightRecorder`, added to a new queue.
func recordedGroup(_ operations: [Operation]) -> (group: GroupOperation, recorder: FlightRecorder) {
    let group = GroupOperation(operations: operations)
    let recorder = FlightRecorder()
    recorder.attach(to: group)
    OperationQueue().addOperation(group)
    return (group, recorder)
}

/// A deterministic generator for randomized checks (SplitMix64): a failure names its seed.
struct SplitMix {
    var state: UInt64
    mutating func next(_ bound: Int) -> Int {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int((z ^ (z >> 31)) % UInt64(bound))
    }
}

/// Runs `attempt` inside the `execute()` of an operation named "holder" that holds `category`, and
/// returns what it threw (`nil` when it returned): how a wait made inside a holder ends.
func errorInsideHolder(
    of category: OperationCategory, _ attempt: @escaping @Sendable () throws -> Void
) throws -> (any Error)? {
    let thrown = Locked<(any Error)?>(nil)
    let holder = AsyncBlockOperation { operation in
        do {
            try attempt()
        } catch {
            thrown.mutate { $0 = error }
        }
        operation.finish()
    }
    holder.name = "holder"
    try holder.addExclusivity(category)
    try holder.run(timeout: .seconds(testTimeout))
    return thrown.value
}

/// Spreads a thread's next step over another thread's work without sleeping: `rounds` additions.
func spinRounds(_ rounds: Int) {
    var sum = 0
    for value in 0..<rounds { sum &+= value }
    if sum == -1 { print(sum) }
}

/// A queue of one worker, which a blocker takes until the returned semaphore is signalled: what is
/// added meanwhile waits for that worker.
func oneWorkerQueueHeldByABlocker(_ queue: OperationQueue = OperationQueue()) -> (OperationQueue, release: DispatchSemaphore) {
    queue.maxConcurrentOperationCount = 1
    let release = DispatchSemaphore(value: 0)
    let blocker = BlockOperation { release.wait() }
    queue.addOperation(blocker)
    XCTAssertTrue(eventually { blocker.isExecuting }, "the blocker takes the only worker")
    return (queue, release)
}

/// Says it is ready whatever its gate says (reading the real answer first with `readsReadiness`, which
/// begins its gate when its queue holds it): its queue starts it before its gate opens, as Linux's
/// queue does from a readiness it cached before a dependency was added.
final class LiesAboutReadiness: AsyncOperation, @unchecked Sendable {
    let work: @Sendable () -> Void
    nonisolated(unsafe) var readsReadiness = false

    init(_ work: @escaping @Sendable () -> Void) {
        self.work = work
        super.init()
    }

    override var isReady: Bool {
        if readsReadiness { _ = super.isReady }
        return true
    }

    override func execute() {
        work()
        finish()
    }
}

/// An operation that claims `categories` and, once executing, holds them until the returned semaphore
/// is signalled (at most `limit` seconds), then runs `then` and finishes. Added to a queue of its own.
func holderReleasedLater(
    claiming categories: OperationCategory..., limit: Int = 60, then: @escaping @Sendable () -> Void = {}
) throws -> (holder: AsyncBlockOperation, release: DispatchSemaphore) {
    let release = DispatchSemaphore(value: 0)
    let holder = AsyncBlockOperation { operation in
        DispatchQueue.global().async {
            _ = release.wait(timeout: .now() + .seconds(limit))
            then()
            operation.finish()
        }
    }
    try holder.addExclusivity(categories)
    OperationQueue().addOperation(holder)
    return (holder, release)
}

/// A condition named "needs produced" that is satisfied once the operation `produce` makes has run
/// (the shape of the lending tests: a produced operation that claims what a composite lends).
func needsProduced(_ produce: @escaping @Sendable () -> Operation) -> Condition {
    Condition("needs produced", producing: { _ in produce() }) { _, answer in answer(.satisfied) }
}
