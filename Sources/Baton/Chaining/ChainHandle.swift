import Dispatch
import Foundation

/// A chain of operations that is running on a queue: its operations, its cancellation, its waits
/// and its outcome.
///
/// You get one from ``Foundation/OperationQueue/addChain(_:adapter:)-([Operation],_)`` or
/// ``Foundation/OperationQueue/addChain(_:adapter:)-(Chain<Output>,_)``.
/// The outcome is the first failure anywhere in the chain, or else the last operation's outcome.
///
/// ```swift
/// let handle = try queue.addChain([download, parse, save])
/// try handle.wait(timeout: .seconds(10))
/// print(handle.outcome!)   // succeeded(...)
/// ```
///
/// ## Linear on Linux
/// Linux's `OperationQueue` walks every queued operation that is not ready on each add and finish,
/// so a chain enqueued at once costs O(N²). A handle enqueues one operation at a time, when the one
/// before it is done; the adapter in between runs on the thread that finished that operation. It
/// drops each dependency edge once both ends have finished, so a chain of any length runs in linear
/// time and is released without recursion. `dependencies` of chained operations are therefore empty
/// after the chain.
public final class ChainHandle<Output: Sendable>: @unchecked Sendable {
    /// Every operation of the chain, in order, including the adapters between them.
    public let operations: [Operation]

    private let queue: OperationQueue
    private let extract: @Sendable (Operation?) -> Outcome<Output>
    private let finished = DispatchGroup()
    private let state: Mutex<State>

    private struct State {
        var requests = 0
        var isDriving = false
        var nextStage = 0
        /// Stages whose dependencies and hooks are in place; only those may be enqueued.
        var wiredStages = 0
        var firstFailure: (any Error)?
        var outcome: Outcome<Output>?
        var callbacks: [@Sendable (Outcome<Output>) -> Void] = []
    }

    /// Builds the chain's operations, adapters between neighbours; nothing is wired or enqueued yet.
    init(
        operations userOperations: [Operation],
        adapter: ChainAdapter,
        queue: OperationQueue,
        extract: @escaping @Sendable (Operation?) -> Outcome<Output>
    ) {
        self.queue = queue
        self.extract = extract
        self.state = Mutex(State())
        self.finished.enter()

        var stages = [Operation]()
        stages.reserveCapacity(max(0, userOperations.count * 2 - 1))
        let coordinator = Coordinator()
        for (index, operation) in userOperations.enumerated() {
            if index > 0 {
                let upstream = userOperations[index - 1]
                let link = AdapterOperation(upstream: upstream, downstream: operation, adapter: adapter, coordinator: coordinator)
                stages.append(link)
            }
            stages.append(operation)
        }
        self.operations = stages
        coordinator.handle = self
    }

    /// The adapters' way back to the handle, which they must not keep alive forever.
    private final class Coordinator: ChainCoordinator, @unchecked Sendable {
        weak var handle: ChainHandle<Output>?
        func recordFailure(_ error: any Error) { handle?.recordFailure(error) }
    }

    /// Wires the chain and starts it. Returns once every dependency is wired; the first stages may
    /// already be running by then: stage `k` is enqueued only when it is wired, and wiring the rest
    /// on the calling thread overlaps with the chain's run on the queue's threads.
    func launch() {
        guard let last = operations.last else {
            complete()
            return
        }
        // The handle keeps itself alive until the last operation has finished.
        last.observeCompletion { self.complete() }
        let stages = (operations.count + 1) / 2
        wire(stage: 0)
        publishWired(1)
        requestNextStage()
        var stage = 1
        while stage < stages {
            let end = min(stages, stage + 256)
            while stage < end {
                wire(stage: stage)
                stage += 1
            }
            publishWired(stage)
        }
    }

    /// Stage `k`: the `k`-th operation depends on the adapter before it, the adapter after it depends
    /// on it, and that adapter starts (on the finishing thread: its work is a handoff, not worth a
    /// trip through the queue) as soon as the operation has finished, then asks for the next stage.
    private func wire(stage: Int) {
        let index = 2 * stage
        let operation = operations[index]
        if index > 0 { operation.addDependency(operations[index - 1]) }
        guard index + 1 < operations.count else { return }
        let adapter = operations[index + 1]
        adapter.addDependency(operation)
        operation.observeCompletion { adapter.start() }
        adapter.observeCompletion { [weak self] in self?.requestNextStage() }
    }

    /// Records how many stages are wired, and drives the chain if it was waiting for them.
    private func publishWired(_ count: Int) {
        let resume = state.withLock { state -> Bool in
            state.wiredStages = count
            guard !state.isDriving, state.requests > 0, state.nextStage < count else { return false }
            state.isDriving = true
            return true
        }
        if resume { drive() }
    }

    // MARK: - Public API

    /// The chain's outcome, or `nil` while it runs.
    public var outcome: Outcome<Output>? {
        state.withLock { $0.outcome }
    }

    /// Whether every operation of the chain has finished.
    public var isFinished: Bool {
        outcome != nil
    }

    /// Cancels every operation of the chain that has not finished. Operations that have not started
    /// finish cancelled without executing; executing ones are asked to stop.
    public func cancel() {
        for operation in operations where !(operation is AdapterOperation) && !operation.isFinished {
            operation.cancel()
        }
    }

    /// Blocks the calling thread until the chain finishes, or until `timeout` runs out, and returns
    /// the chain's output.
    ///
    /// For tests and scripts. Never call it on the queue that runs the chain when that queue runs one
    /// operation at a time: the chain could not make progress. The chain is left running when time
    /// runs out (call ``cancel()`` to stop it).
    ///
    /// - Parameter timeout: The longest wait.
    /// - Returns: The last operation's output.
    /// - Throws: The chain's first error, `CancellationError` when the chain was cancelled, or
    ///   ``BatonError/timedOut(operation:after:)`` naming the first operation that had not finished.
    @available(*, noasync, message: "use 'try await value' in async code")
    @discardableResult
    public func wait(timeout: Duration) throws -> Output {
        if outcome == nil, let reason = queue.deadlockReasonForBlockingWait {
            throw BatonError.wouldDeadlock(operation: pendingOperation.reference, reason: reason)
        }
        if timeout < .zero {
            throw BatonError.invalidArgument(
                operation: pendingOperation.reference, reason: "a wait's timeout must not be negative, got \(timeout)")
        }
        _ = finished.wait(timeout: timeout.deadlineFromNow)
        guard let outcome = self.outcome else {
            throw BatonError.timedOut(operation: pendingOperation.reference, after: timeout)
        }
        return try outcome.get()
    }

    /// The first operation that has not finished (the last one when all have): what a wait names.
    /// Scans the chain, but only when a wait fails.
    private var pendingOperation: Operation {
        operations.first { !($0 is AdapterOperation) && !$0.isFinished } ?? operations.last ?? BlockOperation()
    }

    /// The chain's output, once it has finished (as `await task.value`). Cancelling the awaiting task
    /// ends this wait at once with `CancellationError` and leaves the chain running (call
    /// ``cancel()`` to stop it; ``Chain/run(on:)`` cancels the chain with its task).
    ///
    /// - Throws: The chain's first error, or `CancellationError` when the chain (or the awaiting task)
    ///   was cancelled.
    public var value: Output {
        get async throws {
            try await waitSuspending(cancellingOnTaskCancellation: false).get()
        }
    }

    /// Suspends until the chain finishes, or at once with ``Outcome/cancelled`` when the awaiting
    /// task is cancelled (which cancels the chain too when `cancels`).
    func waitSuspending(cancellingOnTaskCancellation cancels: Bool) async -> Outcome<Output> {
        let waiter = OutcomeWaiter<Outcome<Output>>()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                waiter.install(continuation)
                onFinish { waiter.resume(with: $0) }
            }
        } onCancel: {
            if cancels { self.cancel() }
            waiter.resume(with: .cancelled)
        }
    }

    /// Adds a closure called once with the chain's outcome (at once if the chain has finished).
    ///
    /// - Parameter callback: The closure. It runs on the thread that finished the chain.
    public func onFinish(_ callback: @escaping @Sendable (Outcome<Output>) -> Void) {
        let ready: Outcome<Output>? = state.withLock { state in
            if let outcome = state.outcome { return outcome }
            state.callbacks.append(callback)
            return nil
        }
        if let ready { callback(ready) }
    }

    // MARK: - Driving the stages

    private func recordFailure(_ error: any Error) {
        state.withLock { state in
            if state.firstFailure == nil { state.firstFailure = error }
        }
    }

    /// Enqueues the next stage. Re-entrant calls (a cancelled operation finishing inside `start()`)
    /// only count a request; the one caller that drives loops, so nothing recurses.
    private func requestNextStage() {
        let mustDrive = state.withLock { state -> Bool in
            state.requests += 1
            if state.isDriving { return false }
            state.isDriving = true
            return true
        }
        if mustDrive { drive() }
    }

    /// Enqueues stages while there are requests and wired stages; the one caller that drives loops.
    private func drive() {
        while true {
            let stage: Int? = state.withLock { state in
                guard state.requests > 0, state.nextStage < state.wiredStages else {
                    state.isDriving = false
                    return nil
                }
                state.requests -= 1
                defer { state.nextStage += 1 }
                return state.nextStage
            }
            guard let stage else { return }
            enqueue(stage: stage)
        }
    }

    /// Stage `k` is the `k`-th user operation (at `2k`); the adapter after it (at `2k + 1`) starts
    /// when it finishes, and the adapter's end asks for stage `k + 1`.
    private func enqueue(stage: Int) {
        let index = 2 * stage
        guard index < operations.count else { return }
        if stage > 0 {
            // Both ends of these edges have finished: drop them so that releasing a long chain
            // cannot recurse through `dependencies`.
            operations[index - 1].removeDependency(operations[index - 2])
            if index >= 3 { operations[index - 2].removeDependency(operations[index - 3]) }
        }
        let stage = operations[index]
        // A Foundation operation never waits in the (user's) queue itself: see `ForeignStageRunner`.
        queue.launch(stage is AsyncOperation ? stage : ForeignStageRunner(stage))
    }

    private func complete() {
        let count = operations.count
        if count >= 3 { operations[count - 1].removeDependency(operations[count - 2]) }
        let lastOutcome = extract(operations.last)
        let finishing = state.withLock { state -> Finishing? in
            guard state.outcome == nil else { return nil }
            let outcome = state.firstFailure.map { Outcome<Output>.failed($0) } ?? lastOutcome
            state.outcome = outcome
            defer { state.callbacks = [] }
            return Finishing(outcome: outcome, callbacks: state.callbacks)
        }
        guard let finishing else { return }
        // Callbacks first: whoever waits sees them done.
        for callback in finishing.callbacks { callback(finishing.outcome) }
        finished.leave()
    }

    private struct Finishing {
        let outcome: Outcome<Output>
        let callbacks: [@Sendable (Outcome<Output>) -> Void]
    }
}
