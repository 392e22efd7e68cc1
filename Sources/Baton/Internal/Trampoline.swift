import Foundation

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Runs work that would otherwise recurse through nested composites without letting the stack grow
/// with the nesting depth.
///
/// A finish that completes its parent, which completes its own parent, and so on, uses stack frames
/// per level: 100,000 nested groups overflow any thread's stack. Every such step goes through
/// ``run(_:)``. Work runs at once, on the calling thread, as a plain call would — so code inside a
/// callback that cancels or starts another operation and waits for it still works — until this
/// thread's Baton work is ``depthLimit`` calls deep. Deeper work is deferred to the outermost call on
/// the thread, which runs it in a loop once the stack has unwound (depth first: what an item schedules
/// runs before the items pending when it started). The stack depth is bounded whatever the nesting,
/// and nothing crosses threads: the work runs on the thread that caused it.
///
/// The same mechanism releases what composites held (``dispose(_:)``), so that releasing a nest of
/// composites does not recurse through every level's `deinit`.
///
/// Each thread has its own state (a thread-local value), so there is no lock here.
enum Trampoline {
    /// How many nested Baton steps run as plain calls before the rest is deferred. A level of nested
    /// composites costs one step on the way down (a cancel) and one on the way up (a finish); each step
    /// costs a few stack frames, so 64 keeps the total far below the smallest thread stack Baton runs on
    /// (checked under ThreadSanitizer, whose frames are the largest).
    static let depthLimit = 64

    /// Runs `work` now, or, this thread being ``depthLimit`` steps deep, once the stack has unwound.
    static func run(_ work: @escaping () -> Void) {
        let local = LocalQueue.current
        if local.depth >= depthLimit {
            local.append(work)
            return
        }
        local.depth += 1
        work()
        local.depth -= 1
        if local.depth == 0 { local.drain() }
    }

    /// Whether this thread holds Baton work deferred until its stack unwinds: a blocking wait here
    /// could be waiting for exactly that work.
    static var hasDeferredWork: Bool {
        LocalQueue.current.hasDeferredWork
    }

    /// Releases `value` through ``run(_:)``, so that releasing a nest of composites does not recurse.
    static func dispose<Value>(_ value: consuming Value) {
        let box = Box(value)
        run { box.clear() }
    }

    private final class Box<Value> {
        var value: Value?
        init(_ value: consuming Value) { self.value = value }
        func clear() { value = nil }
    }

    /// A thread's nesting depth and its deferred work, run depth-first by the outermost call. Only its
    /// own thread touches it, and no access spans a call (work is moved out before it runs), so its
    /// properties are not checked for overlapping access at run time (about 110 instructions each,
    /// two to four per operation, callgrind).
    fileprivate final class LocalQueue {
        @exclusivity(unchecked) var depth = 0
        /// The operations whose start or outcome callouts this thread is running (innermost last).
        @exclusivity(unchecked) var callouts: [ObjectIdentifier] = []
        /// The operations holding categories whose `execute()` this thread is inside (innermost last).
        @exclusivity(unchecked) var holders: [AsyncOperation] = []
        /// The queue whose worker this thread is, inside the start of an operation Baton launched there
        /// (see ``Relay``).
        @exclusivity(unchecked) var workerOf: ObjectIdentifier?
        /// The queue whose operation this thread starts on that queue's dispatch queue, outside
        /// Foundation's own start (a grant that came after the queue's start returned): what
        /// `OperationQueue.current` would say there (see ``Relay/startingFor(_:_:)``).
        @exclusivity(unchecked) var startsFor: ObjectIdentifier?
        /// The next step this thread starts once that start returns, and the queue it was launched on.
        @exclusivity(unchecked) var handedOn: (operation: AsyncOperation, queue: OperationQueue)?
        /// Deferred work; the last element runs next.
        @exclusivity(unchecked) private var stack: [() -> Void] = []
        /// Work deferred by the item that is running now, in order.
        @exclusivity(unchecked) private var scheduled: [() -> Void] = []

        var hasDeferredWork: Bool { !stack.isEmpty || !scheduled.isEmpty }

        func append(_ work: @escaping () -> Void) {
            scheduled.append(work)
        }

        /// Runs deferred work until there is none, each item as a step of depth 1. Elements are moved
        /// out of the arrays before they run or are released, so work that defers more work (or a
        /// `deinit` that does) never touches an array while it is being mutated.
        func drain() {
            while true {
                while let work = scheduled.popLast() { stack.append(work) }
                guard var work = stack.popLast() else { return }
                depth += 1
                work()
                // Released while the step still counts: a `deinit` it triggers defers its own work
                // instead of starting a nested drain.
                work = {}
                depth -= 1
            }
        }

        static var current: LocalQueue {
            if let raw = pthread_getspecific(key) {
                return Unmanaged<LocalQueue>.fromOpaque(raw).takeUnretainedValue()
            }
            let local = LocalQueue()
            pthread_setspecific(key, Unmanaged.passRetained(local).toOpaque())
            return local
        }

        private static let key: pthread_key_t = {
            var key = pthread_key_t()
            let result = pthread_key_create(&key, releaseLocalQueue)
            precondition(result == 0, "pthread_key_create failed: \(result)")
            return key
        }()
    }
}

/// A sequence's next step started on the worker that ran the step before, once that step's `start()`
/// has returned, instead of through the sequence's queue: the queue would wake another thread for it
/// (a futex wake and a context switch per step, most of a step's time).
///
/// The worker's thread is marked with the queue it works for while it runs the start of an operation
/// Baton launched there (``AsyncOperation/start()``). A step that finishes on that thread hands the
/// next one on here instead of launching it; the start, once `execute()` has returned, starts it, and
/// whatever that one hands on in turn, in a loop (the stack stays flat). A step that finishes on any
/// other thread (asynchronous work) launches the next one through the queue as before.
enum Relay {
    /// Runs `body` (the start of an operation `queue` started) marked as `queue`'s worker, then the
    /// steps handed on meanwhile, each once the one before has returned.
    static func working(for queue: ObjectIdentifier, _ body: () -> Void) {
        let local = Trampoline.LocalQueue.current
        let outer = local.workerOf
        local.workerOf = queue
        body()
        while let next = local.handedOn {
            local.handedOn = nil
            next.queue.startHandedOn(next.operation)
        }
        local.workerOf = outer
    }

    /// Launches `operation` (claimed by the caller) on `queue`, or, on a worker of `queue` that holds
    /// no step yet, hands it on to start here once this thread's current start returns.
    static func launch(_ operation: Operation, on queue: OperationQueue) {
        let local = Trampoline.LocalQueue.current
        guard let baton = operation as? AsyncOperation, local.workerOf == ObjectIdentifier(queue),
            local.handedOn == nil
        else { return queue.launch(operation) }
        guard queue.launchHandingOn(baton) else { return }
        // A condition evaluated while the gate was passed may have handed on a step of its own.
        if local.handedOn == nil {
            local.handedOn = (baton, queue)
        } else {
            queue.enqueueHandedOn(baton)
        }
    }

    /// Runs `body` (the start of an operation of `queue`, on `queue`'s dispatch queue, outside
    /// Foundation's start) marked as running for `queue`: a blocking wait inside it that needs
    /// `queue` is refused as it is inside Foundation's start (see `OperationQueue.deadlockReason`).
    static func startingFor(_ queue: ObjectIdentifier, _ body: () -> Void) {
        let local = Trampoline.LocalQueue.current
        let outer = local.startsFor
        local.startsFor = queue
        body()
        local.startsFor = outer
    }

    /// The queue this thread runs a start for outside Foundation's (see ``startingFor(_:_:)``).
    static var startingFor: ObjectIdentifier? { Trampoline.LocalQueue.current.startsFor }

    /// Gives the step this thread holds to its queue: the thread is about to block, and what it waits
    /// for may be that step.
    static func release() {
        let local = Trampoline.LocalQueue.current
        guard let held = local.handedOn else { return }
        local.handedOn = nil
        held.queue.enqueueHandedOn(held.operation)
    }
}

/// The operations whose own callouts (start observers, the delegate, outcome observers) the current
/// thread is running. Such an operation cannot finish before they return, so a wait for it on this
/// thread would wait for itself: the waits ask here and refuse at once.
enum Callouts {
    /// Runs `body` marked as `operation`'s callouts on this thread. With `holding`, `operation` may
    /// hold categories while they run (its start's observers, its outcome's, which run before it gives
    /// them back): a blocking wait here for an operation that needs one of them would wait for itself,
    /// as it would inside ``executing(_:_:)``.
    static func during(_ operation: AsyncOperation, holding: Bool, _ body: () -> Void) {
        let local = Trampoline.LocalQueue.current
        local.callouts.append(ObjectIdentifier(operation))
        if holding { local.holders.append(operation) }
        body()
        if holding { local.holders.removeLast() }
        local.callouts.removeLast()
    }

    /// Runs `body` (an `execute()` call) marked as inside `operation`, which holds categories: a
    /// blocking wait here for an operation that needs one of them would wait for itself.
    static func executing(_ operation: AsyncOperation, _ body: () -> Void) {
        let local = Trampoline.LocalQueue.current
        local.holders.append(operation)
        body()
        local.holders.removeLast()
    }

    /// The operations holding categories whose `execute()` this thread is inside.
    static var holders: [AsyncOperation] {
        Trampoline.LocalQueue.current.holders
    }

    /// The lanes held by operations that a wait made here would keep from finishing: the operations
    /// holding categories whose `execute()` this thread is inside (for a blocking wait), the operation
    /// whose body is the current task (``RunningQueue/bodyOperation``), and every composite above any
    /// of them; for a blocking wait on a composite's queue, the composites above the child this thread
    /// runs too (each waits for that child). Empty, and cheap, where nothing is held.
    static func blockedLanes(blocking: Bool) -> [AsyncOperation.BlockedLane] {
        var blocked: [AsyncOperation.BlockedLane] = []
        if blocking {
            for holder in holders { blocked += holder.heldLanesUpward() }
            if let owner = (OperationQueue.current as? ChildQueue)?.owner { blocked += owner.heldLanesUpward() }
        }
        if let body = RunningQueue.bodyOperation { blocked += body.heldLanesUpward() }
        return blocked
    }

    /// Whether this thread is inside `operation`'s callouts.
    static func areRunning(for operation: AnyObject) -> Bool {
        Trampoline.LocalQueue.current.callouts.contains(ObjectIdentifier(operation))
    }
}

#if canImport(Darwin)
private func releaseLocalQueue(_ raw: UnsafeMutableRawPointer) {
    Unmanaged<AnyObject>.fromOpaque(raw).release()
}
#else
private func releaseLocalQueue(_ raw: UnsafeMutableRawPointer?) {
    guard let raw else { return }
    Unmanaged<AnyObject>.fromOpaque(raw).release()
}
#endif
