import Foundation

/// The Foundation operations (not Baton's) that a Baton entry point holds. A Baton operation keeps
/// its custody in its own state; Foundation's cannot, so they are listed here from their claim until
/// they finish (or their owner gives them back). Entries hold the operation weakly: an entry whose
/// operation was freed is stale, so a new object at the same address is never refused.
enum ForeignCustody {
    private struct Entry {
        weak var operation: Operation?
    }

    private static let held = Mutex([ObjectIdentifier: Entry]())

    static func claim(_ operation: Operation) -> Bool {
        held.withLock { held in
            let id = ObjectIdentifier(operation)
            if let entry = held[id], entry.operation === operation { return false }
            held[id] = Entry(operation: operation)
            return true
        }
    }

    static func release(_ operation: Operation) {
        held.withLock { held in
            let id = ObjectIdentifier(operation)
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
        if let baton = self as? AsyncOperation {
            try baton.claimCustody()
            return
        }
        if isFinished { throw .alreadyFinished(operation: reference) }
        if isExecuting { throw .alreadyExecuting(operation: reference) }
        guard ForeignCustody.claim(self) else { throw .alreadyEnqueued(operation: reference) }
    }

    /// Gives back a claim that was never used (the rest of a chain failed validation, or a composite
    /// was freed without running).
    func unclaim() {
        if let baton = self as? AsyncOperation {
            baton.core.withLock { state in
                if state.custody == .claimed { state.custody = .unclaimed }
            }
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

    /// Finishes a claimed operation that will never be launched: cancelled, then started here, so that
    /// it ends without executing and nobody waiting on it hangs. Runs on the trampoline, so retiring a
    /// nest of composites does not recurse.
    func retire() {
        cancel()
        if let baton = self as? AsyncOperation {
            let startsHere = baton.core.withLock { state -> Bool in
                guard state.custody == .claimed || state.custody == .unclaimed else { return false }
                state.custody = .direct
                return state.phase == .pending
            }
            if startsHere { Trampoline.run { baton.start() } }
        } else {
            if !isFinished && !isExecuting && isCancelled { Trampoline.run { self.start() } }
            ForeignCustody.release(self)
        }
    }
}

extension AsyncOperation {
    func claimCustody() throws(BatonError) {
        enum Refusal { case finished, executing, taken }
        let refusal: Refusal? = core.withLock { state in
            switch state.phase {
            case .finished: return .finished
            case .starting, .executing: return .executing
            case .pending:
                guard state.custody == .unclaimed else { return .taken }
                state.custody = .claimed
                return nil
            }
        }
        switch refusal {
        case nil: return
        case .finished?: throw .alreadyFinished(operation: reference)
        case .executing?: throw .alreadyExecuting(operation: reference)
        case .taken?: throw .alreadyEnqueued(operation: reference)
        }
    }

    /// How a claimed operation goes to `queue`.
    enum LaunchPath {
        /// Add it to the queue.
        case enqueue
        /// Cancelled or already finished by `finish`: start it here, never through a queue.
        case startHere
        /// Started by someone else in the meantime: leave it alone.
        case none
    }

    /// Decides, under the lock, whether the operation goes to the queue (which alone may then start
    /// it) or is started here.
    func beginLaunch(on queue: OperationQueue) -> LaunchPath {
        // `DispatchQueue.main` is a new wrapper on every read on Linux: compare the label.
        let onMainThread = queue === OperationQueue.main || queue.underlyingQueue?.label == DispatchQueue.main.label
        return core.withLock { state in
            guard state.phase == .pending else { return .none }
            if state.isCancelled || state.earlyOutcome != nil {
                state.custody = .direct
                return .startHere
            }
            state.custody = .enqueued(queue: ObjectIdentifier(queue), onMainThread: onMainThread)
            return .enqueue
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
        for operation in operations {
            if let baton = operation as? AsyncOperation {
                switch baton.beginLaunch(on: self) {
                case .enqueue: enqueued.append(baton)
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
    }

    /// Hands one claimed operation to the queue (see ``launch(_:)-([Operation])``).
    func launch(_ operation: Operation) {
        launch(CollectionOfOne(operation).map { $0 })
    }
}
