import Dispatch
import Foundation

/// A chain of operations that is running on a queue: its cancellation, its waits and its outcome.
///
/// You get one from ``Foundation/OperationQueue/addChain(_:adapter:)-([Operation],_)``,
/// ``Foundation/OperationQueue/addChain(_:adapter:)-(Chain<Output>,_)`` or
/// ``Foundation/OperationQueue/addChain(first:adapter:next:)``.
/// The outcome is the first failure anywhere in the chain, or else the last operation's outcome.
///
/// ```swift
/// let handle = try queue.addChain([download, parse, save])
/// try handle.wait(timeout: .seconds(10))
/// print(handle.outcome!)   // succeeded(...)
/// ```
///
/// ## Linear on Linux, and only what is ahead
/// Linux's `OperationQueue` walks every queued operation that is not ready on each add and finish,
/// so a chain enqueued at once costs O(N²). A handle enqueues one operation at a time, when the one
/// before it has finished and the adapter has handed its outcome on (on the thread that finished it, or
/// on the one already handing on an earlier operation), so a chain of any length runs in linear time.
/// Chained operations get no dependency edges.
///
/// The handle lets go of each operation once it has been handed on: a long chain holds only the
/// operations still ahead of it (``unfinishedOperations``), and a chain made with
/// ``Foundation/OperationQueue/addChain(first:adapter:next:)`` holds only the one running.
public final class ChainHandle<Output: Sendable>: @unchecked Sendable {
    private let queue: OperationQueue
    private let adapter: ChainAdapter
    private let extract: @Sendable (Operation?) -> Outcome<Output>
    private let finished = DispatchGroup()
    private let state: Mutex<State>
    /// The chain's record, when a recorder watches it.
    let recording: Recording?

    /// Where the next operations come from.
    enum Source {
        /// The operations not taken yet, in order (taken ones are `nil`).
        case list([Operation?], next: Int)
        /// Makes the next operation from the one that just succeeded.
        case generator(@Sendable (Operation) -> Operation?)
    }

    private struct State {
        /// A list chain's operations not taken yet, in order (taken ones are `nil`).
        var listed: [Operation?] = []
        var nextListed = 0
        /// A generator chain's way to make the next operation.
        var generator: (@Sendable (Operation) -> Operation?)?
        /// The operation enqueued last: running, or finished and being handed on.
        var current: Operation?
        /// The adapter operation running between two operations (then `current`), and the operation
        /// it hands on to, which is enqueued once the adapter has finished.
        var adapting: (adapter: AdapterOperation, downstream: Operation)?
        /// An operation that finished while another thread drives the chain: the driver hands it on.
        var finishedStage: Operation?
        var isDriving = false
        var isCancelled = false
        var firstFailure: (any Error)?
        var outcome: Outcome<Output>?
        /// Callbacks and waits, in order: a wait that ends early (its task cancelled) takes its entry
        /// out again, with what it held.
        var callbacks = WaitList<@Sendable (Outcome<Output>) -> Void>()
        /// When recorded: the position of the next stage, and the record of the stage before it.
        var recordedStages = 0
        var lastRecordedStage: Int?

        init(source: Source) {
            switch source {
            case .list(let operations, let next):
                listed = operations
                nextListed = next
            case .generator(let make):
                generator = make
            }
        }

        /// The operation enqueued last, if any, and the listed ones not taken yet.
        var unfinished: [Operation] {
            var unfinished = current.map { [$0] } ?? []
            if let adapting { unfinished.append(adapting.downstream) }
            if nextListed < listed.count { unfinished += listed[nextListed...].compactMap { $0 } }
            return unfinished
        }

        /// What comes after the operation that just finished.
        enum Next {
            case operation(Operation)
            /// A generator chain asks its generator (outside the lock).
            case make(@Sendable (Operation) -> Operation?)
            case end
            /// A generator chain was cancelled: it makes nothing more and ends cancelled.
            case endCancelled
        }

        /// Takes the next listed operation (and makes it the current one), or says what to do instead.
        mutating func next(afterSuccess succeeded: Bool) -> Next {
            guard let generator else {
                guard nextListed < listed.count, let operation = listed[nextListed] else { return .end }
                listed[nextListed] = nil
                nextListed += 1
                current = operation
                return .operation(operation)
            }
            if isCancelled { return .endCancelled }
            return succeeded ? .make(generator) : .end
        }
    }

    /// A handle on the operations of `source`, claimed already; nothing is enqueued yet.
    /// The chain records into the recorder of its first operation, else its queue's, else the global
    /// one.
    init(
        source: Source,
        adapter: ChainAdapter,
        queue: OperationQueue,
        first: Operation?,
        extract: @escaping @Sendable (Operation?) -> Outcome<Output>
    ) {
        self.queue = queue
        self.adapter = adapter
        self.extract = extract
        self.state = Mutex(State(source: source))
        self.finished.enter()
        let recorder =
            (first as? AsyncOperation)?.recorderLink.recorder ?? RecordingRegistry.recorder(forChainOn: queue)
        if let recorder {
            let id = recorder.register(kind: .chain, type: Self.self, name: nil, placement: nil, enqueued: false)
            recorder.started(id, dependencies: [])
            recording = Recording(recorder: recorder, id: id)
        } else {
            recording = nil
        }
    }

    /// Enqueues the first operation (or, for an empty list, finishes at once).
    func launch(first: Operation?) {
        guard let first else { return complete(last: nil) }
        state.withLock { $0.current = first }
        enqueue(first)
    }

    // MARK: - Public API
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
    /// finish cancelled without executing; executing ones are asked to stop. A chain made with a
    /// generator makes no further operations.
    public func cancel() {
        for operation in state.withLock({ state -> [Operation] in
            state.isCancelled = true
            return state.unfinished
        }) where !operation.isFinished {
            operation.cancelHeld()
        }
    }

    /// The operations of the chain that have not finished, in order: the one running and, for a chain
    /// made from an array, every one after it. Finished operations are let go as the chain advances.
    public var unfinishedOperations: [Operation] {
        state.withLock { $0.unfinished }.filter { !$0.isFinished }
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
        try waitBlocking(timeout: timeout).get()
    }

    /// Blocks until the chain finishes or `timeout` runs out; throws only for the wait itself.
    func waitBlocking(timeout: Duration) throws(BatonError) -> Outcome<Output> {
        if outcome == nil, let reason = queue.deadlockReason(blocking: true) {
            throw .wouldDeadlock(operation: pendingOperation.reference, reason: reason)
        }
        if outcome == nil,
            let (step, reason) = AsyncOperation.categoryDeadlock(
                among: state.withLock { $0.unfinished }, on: queue, blocking: true)
        {
            throw .wouldDeadlock(operation: step.reference, reason: reason)
        }
        if timeout < .zero {
            throw .invalidArgument(
                operation: pendingOperation.reference, reason: "a wait's timeout must not be negative, got \(timeout)")
        }
        Relay.release()
        _ = finished.wait(timeout: timeout.deadlineFromNow)
        guard let outcome = self.outcome else {
            throw .timedOut(operation: pendingOperation.reference, after: timeout)
        }
        return outcome
    }

    /// The first operation that has not finished: what a wait names.
    private var pendingOperation: Operation {
        state.withLock { $0.current } ?? BlockOperation()
    }

    /// The chain's output, once it has finished (as `await task.value`). Cancelling the awaiting task
    /// ends this wait at once with `CancellationError` and leaves the chain running (call
    /// ``cancel()`` to stop it; ``Chain/run(on:)`` cancels the chain with its task).
    ///
    /// - Throws: The chain's first error, or `CancellationError` when the chain (or the awaiting task)
    ///   was cancelled.
    public var value: Output {
        get async throws {
            if outcome == nil,
                let (step, reason) = AsyncOperation.categoryDeadlock(
                    among: state.withLock { $0.unfinished }, on: queue, blocking: false)
            {
                throw BatonError.wouldDeadlock(operation: step.reference, reason: reason)
            }
            return try await waitSuspending(cancellingOnTaskCancellation: false).orCancelled().get()
        }
    }

    /// Suspends until the chain finishes, or at once when the awaiting task is cancelled (which
    /// cancels the chain too when `cancels`).
    func waitSuspending(cancellingOnTaskCancellation cancels: Bool) async -> AwaitEnd<Outcome<Output>> {
        let waiter = OutcomeWaiter<AwaitEnd<Outcome<Output>>>()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                waiter.install(continuation)
                let registration: (token: UInt64?, finished: Outcome<Output>?) = state.withLock { state in
                    if let outcome = state.outcome { return (nil, outcome) }
                    return (state.callbacks.append { waiter.resume(with: .finished($0)) }, nil)
                }
                if let finished = registration.finished { return waiter.resume(with: .finished(finished)) }
                // Cancelled meanwhile: the wait is over, its registration is released here.
                if let token = registration.token, !waiter.attach(token) { endWait(token) }
            }
        } onCancel: {
            waiter.resume(with: .taskCancelled) { if cancels { self.cancel() } }
            if let token = waiter.attachedToken { self.endWait(token) }
        }
    }

    /// Test seam: how many callbacks and waits the handle holds.
    var registeredCallbackCount: Int {
        state.withLock { $0.callbacks.count }
    }

    /// Takes out the registration of a wait that ended early.
    private func endWait(_ token: UInt64) {
        let released = state.withLock { $0.callbacks.remove(token) }
        withExtendedLifetime(released) {}
    }

    /// Adds a closure called once with the chain's outcome (at once if the chain has finished).
    ///
    /// - Parameter callback: The closure. It runs on the thread that finished the chain.
    public func onFinish(_ callback: @escaping @Sendable (Outcome<Output>) -> Void) {
        let ready: Outcome<Output>? = state.withLock { state in
            if let outcome = state.outcome { return outcome }
            _ = state.callbacks.append(callback)
            return nil
        }
        if let ready { callback(ready) }
    }

    // MARK: - Driving the stages

    /// Enqueues a stage. A Foundation operation never waits in the (user's) queue itself: see
    /// `ForeignStageRunner`.
    private func enqueue(_ operation: Operation) {
        let stage = operation is AsyncOperation ? operation : ForeignStageRunner(operation)
        // Recorded first: a Foundation stage's record is finished before the chain hears of it.
        if let recording { record(stage, running: operation, in: recording) }
        operation.observeCompletion { self.stageFinished(operation) }
        queue.launch(stage)
    }

    /// Records a stage at its position, linked to the stage before it by the adapter. A Foundation
    /// operation's runner is recorded as the operation, finished when the operation is.
    private func record(_ stage: Operation, running operation: Operation, in recording: Recording) {
        let (position, predecessor) = state.withLock { state in
            defer { state.recordedStages += 1 }
            return (state.recordedStages, state.lastRecordedStage)
        }
        let id = recording.adopt(
            stage,
            FlightRecorder.Placement(
                parent: recording.id, position: position, predecessor: predecessor,
                link: predecessor == nil ? nil : .adapter))
        state.withLock { $0.lastRecordedStage = id }
        if let id, stage !== operation {
            let recorder = recording.recorder
            operation.observeCompletionOnce { [weak operation] in
                recorder.finished(id, status: operation?.isCancelled == true ? .cancelled : .succeeded, name: nil)
            }
        }
    }

    /// An operation finished: it is handed on by the one thread that drives the chain. A stage that
    /// finishes inside `enqueue` (a cancelled one) is left for the driver's loop, so nothing recurses.
    private func stageFinished(_ operation: Operation) {
        let drive = state.withLock { state -> Bool in
            state.finishedStage = operation
            if state.isDriving { return false }
            state.isDriving = true
            return true
        }
        guard drive else { return }
        while let finished = state.withLock({ state -> Operation? in
            defer { state.finishedStage = nil }
            if state.finishedStage == nil { state.isDriving = false }
            return state.finishedStage
        }) {
            handOn(finished)
        }
    }

    /// Takes (or makes) the operation after `finished`, passes `finished`'s outcome to it and enqueues
    /// it; or, at the end, completes the chain.
    private func handOn(_ finished: Operation) {
        if let downstream = finishedAdapting(finished) { return adapted(by: finished, to: downstream) }
        let next: Operation
        let succeeded = finished.observedSharedOutcome.isSuccess
        switch state.withLock({ $0.next(afterSuccess: succeeded) }) {
        case .end:
            return complete(last: finished)
        case .endCancelled:
            return complete(last: finished, cancelled: true)
        case .operation(let operation):
            next = operation
        case .make(let make):
            guard let made = make(finished) else { return complete(last: finished) }
            do {
                try made.claim()
            } catch {
                recordFailure(error)
                return complete(last: finished)
            }
            let cancelled = state.withLock { state -> Bool in
                state.current = made
                return state.isCancelled
            }
            if cancelled { made.cancelHeld() }
            next = made
        }
        if let make = adapter.operationFactory { return adapt(from: finished, to: next, with: make()) }
        if let error = Handoff.pass(from: finished, to: next, adapter: adapter) { recordFailure(error) }
        enqueue(next)
    }

    /// Puts an adapter operation between `upstream` (finished) and `downstream` and enqueues it, in
    /// `downstream`'s place: the driver hands on when it finishes. An adapter operation that is not
    /// fresh fails `downstream` with the error that says why.
    private func adapt(from upstream: Operation, to downstream: Operation, with adapterOperation: AdapterOperation) {
        do {
            try adapterOperation.claim()
        } catch {
            recordFailure(error)
            _ = Handoff.apply(.fail(error), to: downstream, after: upstream.observedSharedOutcome)
            return enqueue(downstream)
        }
        adapterOperation.connect(upstream: upstream, downstream: downstream)
        adapterOperation.qualityOfService = upstream.qualityOfService
        let cancelled = state.withLock { state -> Bool in
            state.current = adapterOperation
            state.adapting = (adapterOperation, downstream)
            return state.isCancelled
        }
        if cancelled { adapterOperation.cancel() }
        enqueue(adapterOperation)
    }

    /// The downstream operation of `finished` when it is the running adapter operation (taken out).
    private func finishedAdapting(_ finished: Operation) -> Operation? {
        state.withLock { state -> Operation? in
            guard let adapting = state.adapting, adapting.adapter === finished else { return nil }
            state.adapting = nil
            state.current = adapting.downstream
            return adapting.downstream
        }
    }

    /// An adapter operation finished: its decision is carried out and `downstream` is enqueued.
    private func adapted(by finished: Operation, to downstream: Operation) {
        guard let adapterOperation = finished as? AdapterOperation else { return enqueue(downstream) }
        let upstreamOutcome = adapterOperation.upstream?.observedSharedOutcome ?? .cancelled
        let error = Handoff.apply(adapterOperation.chainDecision, to: downstream, after: upstreamOutcome)
        adapterOperation.disconnect()
        if let error { recordFailure(error) }
        enqueue(downstream)
    }

    private func recordFailure(_ error: any Error) {
        state.withLock { state in
            if state.firstFailure == nil { state.firstFailure = error }
        }
    }

    /// Ends the chain with its first failure, or else `last`'s outcome (cancelled when `cancelled`).
    private func complete(last: Operation?, cancelled: Bool = false) {
        let lastOutcome = cancelled ? .cancelled : extract(last)
        let finishing = state.withLock { state -> Finishing? in
            guard state.outcome == nil else { return nil }
            let outcome = state.firstFailure.map { Outcome<Output>.failed($0) } ?? lastOutcome
            state.outcome = outcome
            state.current = nil
            state.listed = []
            state.generator = nil
            return Finishing(outcome: outcome, callbacks: state.callbacks.takeAll())
        }
        guard let finishing else { return }
        if let recording {
            recording.recorder.finished(recording.id, status: FlightRecord.Status(finishing.outcome), name: nil)
        }
        // Callbacks first: whoever waits sees them done.
        for callback in finishing.callbacks { callback(finishing.outcome) }
        finished.leave()
    }

    private struct Finishing {
        let outcome: Outcome<Output>
        let callbacks: WaitList<@Sendable (Outcome<Output>) -> Void>
    }
}
