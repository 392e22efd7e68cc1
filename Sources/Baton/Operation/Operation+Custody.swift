import Foundation

/// The Foundation operations (not Baton's) that a Baton entry point holds. A Baton operation keeps
/// its custody in its own state; Foundation's cannot, so they are listed here from their claim until
/// they finish (or their owner gives them back). Entries hold the operation weakly: an entry whose
/// operation was freed is stale, so a new object at the same address is never refused.
///
/// Striped by the operation's identity (`StripedMutex`): an operation's entry is always decided under
/// its one stripe's lock, and claims of different operations rarely meet on one lock.
enum ForeignCustody {
    private struct Entry {
        weak var operation: Operation?
    }

    private static let held = StripedMutex([ObjectIdentifier: Entry]())

    static func claim(_ operation: Operation) -> Bool {
        let id = ObjectIdentifier(operation)
        return held.stripe(for: operation).withLock { held in
            if let entry = held[id], entry.operation === operation { return false }
            held[id] = Entry(operation: operation)
            return true
        }
    }

    static func release(_ operation: Operation) {
        let id = ObjectIdentifier(operation)
        held.stripe(for: operation).withLock { held in
            if let entry = held[id], entry.operation == nil || entry.operation === operation { held[id] = nil }
        }
    }
}

extension Operation {
    /// Takes the operation for a Baton entry point (a chain, a composite, a wait), which alone may
    /// then hand it to a queue or start it.
    ///
    /// Decided under the operation's lock (for a Baton operation) or the custody list's (for a
    /// Foundation one), so two entry points can never both enqueue it.
    ///
    /// - Throws: ``BatonError/alreadyFinished(operation:)``, ``BatonError/alreadyExecuting(operation:)``,
    ///   or ``BatonError/alreadyEnqueued(operation:)`` when another entry point has it.
    func claim() throws(BatonError) {
        // Added to a queue with Foundation's own `addOperation` (where Baton can see it): Foundation
        // would stop the process on a second add.
        if FoundationQueueState.of(self) == .waiting { throw .alreadyEnqueued(operation: reference) }
        if let baton = self as? AsyncOperation {
            try baton.claimCustody()
            return
        }
        if isFinished { throw .alreadyFinished(operation: reference) }
        if isExecuting { throw .alreadyExecuting(operation: reference) }
        guard ForeignCustody.claim(self) else { throw .alreadyEnqueued(operation: reference) }
        // A chain gives a stage back once it has finished: one that ran and was given back between the
        // checks above and the claim is finished now. Checked again while held, nobody can give it
        // back meanwhile, so a finished or started operation is never taken.
        if isFinished || isExecuting {
            ForeignCustody.release(self)
            throw isFinished ? .alreadyFinished(operation: reference) : .alreadyExecuting(operation: reference)
        }
    }

    /// Gives back a claim that was never used (the rest of a chain failed validation, or a composite
    /// was freed without running).
    func unclaim() {
        if let baton = self as? AsyncOperation {
            baton.core.withLock { $0.life.unclaim() }
        } else {
            ForeignCustody.release(self)
        }
    }

    /// Claims every operation, or none of them.
    static func claimAll(_ operations: [Operation]) throws(BatonError) {
        var claimed = 0
        do {
            for operation in operations {
                try operation.claim()
                claimed += 1
            }
        } catch {
            for operation in operations[..<claimed] { operation.unclaim() }
            throw error
        }
    }

    /// Retires `operations` and then reports to `countdown` as each of them finishes (a composite
    /// finishes only after the children it retires).
    static func retire(_ operations: [Operation], reportingTo countdown: Countdown) {
        for operation in operations { operation.observeCompletionOnce { countdown.tick() } }
        for operation in operations { operation.retire() }
    }

    /// Cancels an operation that a Baton structure (a chain, a composite) holds: the one way Baton
    /// cancels anything it holds.
    ///
    /// A Baton operation takes it as any `cancel()`: Foundation never hears of it. A Foundation
    /// operation is told through Foundation, which then starts it at once, before its dependencies
    /// have finished; on Linux each unfinished dependency keeps an unretained pointer to it and
    /// dereferences it when it finishes. So the operation is kept alive until every dependency that
    /// had not finished has finished (a Baton one: announced `isFinished`; a Foundation one: run its
    /// completion, which comes after it let go of its dependents).
    func cancelHeld() {
        if self is AsyncOperation { return cancel() }
        guard !isFinished else { return }
        let unfinished = dependencies.filter { !$0.isFinished }
        if !unfinished.isEmpty {
            let kept = UncheckedSendable(value: self)
            let countdown = Countdown(events: unfinished.count) { withExtendedLifetime(kept) {} }
            for dependency in unfinished { dependency.observeCompletionOnce { countdown.tick() } }
            countdown.tick()
        }
        cancel()
    }

    /// Finishes a claimed operation that will never be launched: cancelled, then started here, so that
    /// it ends without executing and nobody waiting on it hangs. Runs on the trampoline, so retiring a
    /// nest of composites does not recurse.
    func retire() {
        if let baton = self as? AsyncOperation {
            // Cancelled and taken for a start here in one step; a `cancel()` first reaches what an
            // adapter passes it to.
            cancel()
            let startsHere = baton.core.withLock { $0.life.retire() } == .startHere
            if startsHere { Trampoline.run { baton.start() } }
        } else {
            cancelHeld()
            if !isFinished && !isExecuting && isCancelled { Trampoline.run { self.start() } }
            ForeignCustody.release(self)
        }
    }
}

extension AsyncOperation {
    func claimCustody() throws(BatonError) {
        switch core.withLock({ $0.life.claim() }) {
        case nil: return
        case .finished?: throw .alreadyFinished(operation: reference)
        case .executing?: throw .alreadyExecuting(operation: reference)
        case .taken?: throw .alreadyEnqueued(operation: reference)
        }
    }

    /// Decides, under the lock, whether the operation goes to the queue (which alone may then start
    /// it) or is started here.
    func beginLaunch(on queue: OperationQueue, key: Life.QueueKey) -> Life.LaunchAction {
        core.withLock { state in
            let action = state.life.launch(on: key)
            if action == .enqueue { state.launchQueue = queue }
            return action
        }
    }
}

extension AsyncOperation {
    /// Takes the operation for a start by its claimant on the launching thread when nothing makes that
    /// differ from the queue's start: no gate to pass and no dependency to wait for (an open class may
    /// list dependencies of its own: they are read first). Otherwise launches it on `key`'s queue as
    /// ``beginLaunch(on:key:)`` does, in the same lock step. `nil`: taken for the launching thread.
    fileprivate func beginHandOn(on queue: OperationQueue, key: Life.QueueKey) -> Life.LaunchAction? {
        // An open class may answer `isReady` itself: an ungated one is asked (its answer has no side
        // effect then), and handed on only when it says yes; a gated one goes through the queue.
        let mayHandOn = Self.listsOnlyAddedDependencies || (core.withLock { $0.gate == nil } && isReady)
        return core.withLock { state in
            if mayHandOn, state.gate == nil, !state.hasDependencies {
                guard state.life.launchHere(insteadOf: nil) else { return Life.LaunchAction.none }
                state.launchQueue = queue
                return nil
            }
            let action = state.life.launch(on: key)
            if action == .enqueue { state.launchQueue = queue }
            return action
        }
    }
}

extension OperationQueue {
    /// Hands claimed operations to the queue, in one `addOperations` call. A Baton operation that is
    /// already cancelled (or finished by an early `finish`) is started right here instead: it has
    /// nothing to do in a queue. A Baton operation cancelled after this decision is still safe in the
    /// queue, because Foundation is never told of a Baton cancellation (see `cancel()`). A cancelled
    /// Foundation operation added to a queue with a pending barrier deadlocks Linux's queue, so it is
    /// started here too; Baton cannot lock a Foundation operation, so for those the check and the add
    /// are two steps.
    func launch(_ operations: [Operation]) {
        var enqueued = [Operation]()
        enqueued.reserveCapacity(operations.count)
        // Gates passed outside the queue, checked once the queue has them (see
        // `AsyncOperation.gateNoteEnqueuedPassed()`): the first kept alone, so that the usual launch
        // of one operation makes no list.
        var firstPassed: AsyncOperation?
        var morePassed = [AsyncOperation]()
        // Read once for the batch: whether the queue runs on the main thread reads its dispatch queue.
        let key = AsyncOperation.Life.QueueKey(queue: ObjectIdentifier(self), onMainThread: runsOnMainThread)
        for operation in operations {
            if let baton = operation as? AsyncOperation {
                switch baton.beginLaunch(on: self, key: key) {
                // An operation with a gate passes it first, outside the queue, when it can.
                case .enqueue:
                    switch baton.admitForLaunch(on: self) {
                    case .add: enqueued.append(baton)
                    case .addPassed:
                        enqueued.append(baton)
                        if firstPassed == nil { firstPassed = baton } else { morePassed.append(baton) }
                    case .later: break
                    }
                // A plain call: the start of a cancelled operation only retires and finishes, and what
                // that recurses into goes through the trampoline. A caller that waits for the
                // operation (a blocking or async run) finds it finished when this returns.
                case .startHere: baton.start()
                case .none: break
                }
            } else {
                operation.observeCompletion { ForeignCustody.release(operation) }
                if operation.isCancelled {
                    Trampoline.run { if !operation.isFinished { operation.start() } }
                } else {
                    enqueued.append(operation)
                }
            }
        }
        guard !enqueued.isEmpty else { return }
        if enqueued.count == 1 { addOperation(enqueued[0]) } else { addOperations(enqueued, waitUntilFinished: false) }
        if let granted = firstPassed?.gateNoteEnqueuedPassed() { Gatekeeper.wake(granted) }
        for baton in morePassed {
            if let granted = baton.gateNoteEnqueuedPassed() { Gatekeeper.wake(granted) }
        }
    }

    /// Launches a claimed operation handed on (see `Relay`): `true` when the caller starts it once its
    /// thread's current start returns (it has no gate or dependency, or passed its gate at once),
    /// `false` when it went to the queue, waits for its gate to add it, or ended here cancelled.
    func launchHandingOn(_ baton: AsyncOperation) -> Bool {
        // This thread is this queue's worker, marked so by a start under a key off the main thread.
        let key = AsyncOperation.Life.QueueKey(queue: ObjectIdentifier(self), onMainThread: false)
        switch baton.beginHandOn(on: self, key: key) {
        case nil:
            return true
        case .none?:
            return false
        case .startHere?:
            // Cancelled (or finished early): it ends here, as a launch would end it.
            baton.start()
            return false
        case .enqueue?:
            switch baton.admitForLaunch(on: self) {
            case .add:
                addOperation(baton)
            case .addPassed:
                if type(of: baton).listsOnlyAddedDependencies,
                    baton.core.withLock({ $0.life.launchHere(insteadOf: key) })
                {
                    return true
                }
                addOperation(baton)
                if let granted = baton.gateNoteEnqueuedPassed() { Gatekeeper.wake(granted) }
            case .later:
                break
            }
            return false
        }
    }

    /// Starts an operation handed on, unless a dependency was added since: then it goes to the queue,
    /// which starts it once that dependency has finished.
    func startHandedOn(_ baton: AsyncOperation) {
        // An open class's own readiness is asked again (it is ungated: no side effect).
        let ready = type(of: baton).listsOnlyAddedDependencies || baton.isReady
        enum Take { case start, enqueue, none }
        let take: Take = baton.core.withLock { state in
            guard state.life.custody == .handedOn else { return .none }
            if state.hasDependencies || !ready { return .enqueue }
            return state.life.takeHandedOn() ? .start : .none
        }
        switch take {
        case .start: baton.start()
        case .enqueue: enqueueHandedOn(baton)
        case .none: break
        }
    }

    /// Gives an operation handed on to the queue after all (see `Relay.release()`), as a launch
    /// whose gate passed outside the queue.
    func enqueueHandedOn(_ baton: AsyncOperation) {
        let key = AsyncOperation.Life.QueueKey(queue: ObjectIdentifier(self), onMainThread: runsOnMainThread)
        guard baton.core.withLock({ $0.life.enqueueInstead(on: key) }) else { return }
        addOperation(baton)
        if let granted = baton.gateNoteEnqueuedPassed() { Gatekeeper.wake(granted) }
    }

    /// Hands one claimed operation to the queue (see ``launch(_:)-([Operation])``).
    func launch(_ operation: Operation) {
        launch(CollectionOfOne(operation).map { $0 })
    }
}
