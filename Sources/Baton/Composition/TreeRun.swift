import Foundation

/// One run of an operation tree: its queue, the operations in flight, the failures, and a counter per
/// subtree that says when that subtree (and, at the root, the whole tree) has finished.
final class TreeRun: @unchecked Sendable {
    /// A subtree: an operation and everything launched below it (the root scope is the whole tree).
    struct Scope: Sendable, Hashable {
        let id: Int
    }

    private struct Counter {
        var pending: Int
        let parent: Scope?
        let finished: (@Sendable () -> Void)?
    }

    private struct State {
        var counters: [Scope: Counter] = [:]
        var nextID = 0
        var live: [ObjectIdentifier: Operation] = [:]
        var failures: [BatonError] = []
        var isCancelled = false
        var progress = ProgressCount()
        /// The item mappings running now, cancelled with the tree.
        var expansions: [Int: Task<Void, Never>] = [:]
        /// Mappings that ended before they were registered (they must not be registered after).
        var endedExpansions = Set<Int>()
        var nextExpansion = 0
        /// The tree's record, when it is recorded; how many operations it launched; and each open
        /// scope's operation record (the predecessor of what the scope launches).
        var recording: Recording?
        var recordedLaunches = 0
        var scopeRecords: [Scope: Int] = [:]
        /// Each node's operations in flight, and the cursors waiting for one of them to finish.
        var windows: [ObjectIdentifier: Window] = [:]
    }

    /// One node's window in this run.
    private struct Window {
        var inFlight = 0
        /// Cursors with items left, first come first served (`head` is the next one).
        var parked: [Cursor?] = []
        var head = 0

        mutating func park(_ cursor: Cursor) {
            parked.append(cursor)
        }

        mutating func unpark() -> Cursor? {
            guard head < parked.count else { return nil }
            defer {
                parked[head] = nil
                head += 1
                if head == parked.count {
                    parked.removeAll(keepingCapacity: true)
                    head = 0
                }
            }
            return parked[head]
        }
    }

    /// The items of one expansion of a node still to launch. Driven by one thread at a time: the one
    /// that made it, or the one that frees a slot of its node's window while it is parked.
    final class Cursor: @unchecked Sendable {
        let node: ObjectIdentifier
        let window: Int
        private let items: TreeItems
        private let launch: (Int, @escaping @Sendable () -> Operation, @escaping @Sendable () -> Void) -> Void
        private let ended: () -> Void
        private var index = 0

        init(
            node: ObjectIdentifier, window: Int, items: TreeItems,
            launch:
                @escaping (
                    _ index: Int, _ make: @escaping @Sendable () -> Operation, _ done: @escaping @Sendable () -> Void
                ) -> Void,
            ended: @escaping () -> Void
        ) {
            self.node = node
            self.window = window
            self.items = items
            self.launch = launch
            self.ended = ended
        }

        /// The next item's maker, or `nil` when there are no more.
        func take() -> (@Sendable () -> Operation)? { items.next() }

        /// Launches an item; `done` runs once its operation has finished (or could not be launched).
        func launch(_ make: @escaping @Sendable () -> Operation, done: @escaping @Sendable () -> Void) {
            defer { index += 1 }
            launch(index, make, done)
        }

        /// The cursor is spent (or dropped with the tree's cancellation): its scope is released.
        func end() { ended() }
    }

    let queue: ChildQueue
    private let state = Mutex(State())

    init(maxConcurrentOperationCount: Int, valid: Bool) {
        queue = ChildQueue()
        queue.name = "Baton tree"
        if valid { queue.maxConcurrentOperationCount = maxConcurrentOperationCount }
    }

    var isCancelled: Bool { state.withLock { $0.isCancelled } }

    /// Records every operation the tree launches as a child of `recording`'s operation.
    func record(into recording: Recording) {
        state.withLock { $0.recording = recording }
    }
    var failures: [BatonError] { state.withLock { $0.failures } }
    var progress: Progress { state.withLock { $0.progress }.snapshot() }

    /// Runs an item mapping in a task that the tree's cancellation cancels.
    func expand(_ body: @escaping @Sendable () async -> Void) {
        let id = state.withLock { state -> Int in
            defer { state.nextExpansion += 1 }
            return state.nextExpansion
        }
        let task = Task {
            await body()
            self.state.withLock { state in
                if state.expansions.removeValue(forKey: id) == nil { state.endedExpansions.insert(id) }
            }
        }
        let cancelNow = state.withLock { state -> Bool in
            if state.endedExpansions.remove(id) != nil { return false }
            state.expansions[id] = task
            return state.isCancelled
        }
        if cancelNow { task.cancel() }
    }

    /// Launches the cursor's items while its node's window has room; with none, parks it until an
    /// operation of the node finishes. A cancelled tree drops the cursor.
    func drive(_ cursor: Cursor) {
        enum Slot { case taken, parked, cancelled }
        while true {
            let slot = state.withLock { state -> Slot in
                if state.isCancelled { return .cancelled }
                if state.windows[cursor.node, default: Window()].inFlight >= cursor.window {
                    state.windows[cursor.node, default: Window()].park(cursor)
                    return .parked
                }
                state.windows[cursor.node, default: Window()].inFlight += 1
                return .taken
            }
            switch slot {
            case .parked: return
            case .cancelled: return cursor.end()
            case .taken: break
            }
            guard let make = cursor.take() else {
                cursor.end()
                return freeSlot(of: cursor.node)
            }
            let node = cursor.node
            cursor.launch(make) { self.freeSlot(of: node) }
        }
    }

    /// An operation of `node` finished (or a cursor gave back the slot it took): the first parked
    /// cursor of the node goes on, through the trampoline (so that operations finishing as they are
    /// launched never recurse).
    private func freeSlot(of node: ObjectIdentifier) {
        let parked = state.withLock { state -> Cursor? in
            state.windows[node]?.inFlight -= 1
            return state.windows[node]?.unpark()
        }
        if let parked { Trampoline.run { self.drive(parked) } }
    }

    /// Opens a scope that is finished when its own token and everything retained in it are released.
    func open(parent: Scope?, finished: (@Sendable () -> Void)?) -> Scope {
        state.withLock { state in
            let scope = Scope(id: state.nextID)
            state.nextID += 1
            state.counters[scope] = Counter(pending: 1, parent: parent, finished: finished)
            if let parent { state.counters[parent]?.pending += 1 }
            return scope
        }
    }

    func retain(_ scope: Scope) {
        state.withLock { $0.counters[scope]?.pending += 1 }
    }

    /// Releases one token; a scope that reaches zero runs its callback and then releases its parent,
    /// iteratively. The parent's token is released only after the callback has returned, so a
    /// subtree's callbacks all run before its parent's (and the tree itself) can finish, even when a
    /// sibling subtree ends at the same moment on another thread.
    func release(_ scope: Scope) {
        var current: Scope? = scope
        while let scope = current {
            let ended: Counter? = state.withLock { state in
                guard var counter = state.counters[scope] else { return nil }
                counter.pending -= 1
                guard counter.pending == 0 else {
                    state.counters[scope] = counter
                    return nil
                }
                state.counters[scope] = nil
                if state.recording != nil { state.scopeRecords[scope] = nil }
                return counter
            }
            guard let ended else { return }
            ended.finished?()
            current = ended.parent
        }
    }

    func record(path: [String], operation: Operation? = nil, error: any Error) {
        let failure = BatonError.treeNodeFailed(path: path, operation: operation?.reference, underlying: error)
        state.withLock { $0.failures.append(failure) }
    }

    /// Runs `operation` in a new scope below `parent`, reading its outcome as `Output`; `finished`
    /// launches the children. An operation that is not fresh (a factory that returns one twice, say) is
    /// recorded as a failure. `done` runs once, when the operation has finished or was refused.
    func launch<Output: Sendable>(
        _ operation: Operation,
        as _: Output.Type,
        path: [String],
        parent: Scope,
        finished: @escaping @Sendable (Outcome<Output>, Scope) -> Void,
        subtreeFinished: (@Sendable (Outcome<Output>) -> Void)?,
        done: @escaping @Sendable () -> Void
    ) {
        do {
            try operation.claim()
        } catch {
            record(path: path, operation: operation, error: error)
            return done()
        }
        // The outcome (and so the output) is kept until the subtree finishes only when someone asked
        // for it there; otherwise it is let go once the node's children have it.
        let box = Mutex<Outcome<Output>?>(nil)
        var whenSubtreeFinished: (@Sendable () -> Void)?
        if let subtreeFinished {
            whenSubtreeFinished = { if let outcome = box.withLock({ $0 }) { subtreeFinished(outcome) } }
        }
        let scope = open(parent: parent, finished: whenSubtreeFinished)
        let (cancelled, placement) = state.withLock { state -> (Bool, (Recording, FlightRecorder.Placement)?) in
            state.live[ObjectIdentifier(operation)] = operation
            state.progress.total += 1
            guard let recording = state.recording else { return (state.isCancelled, nil) }
            let predecessor = state.scopeRecords[parent]
            defer { state.recordedLaunches += 1 }
            let placement = FlightRecorder.Placement(
                parent: recording.id, position: state.recordedLaunches, predecessor: predecessor,
                link: predecessor == nil ? nil : .subtree)
            return (state.isCancelled, (recording, placement))
        }
        operation.observeCompletion { [self] in
            state.withLock { state in
                state.live.removeValue(forKey: ObjectIdentifier(operation))
                state.progress.completed += 1
            }
            let outcome = operation.outcome(as: Output.self)
            if subtreeFinished != nil { box.withLock { $0 = outcome } }
            finished(outcome, scope)
            switch outcome {
            case .succeeded:
                break
            case .failed(let error):
                record(path: path, operation: operation, error: error)
            case .cancelled:
                if !isCancelled { record(path: path, operation: operation, error: CancellationError()) }
            }
            release(scope)
            done()
        }
        if cancelled { operation.cancelHeld() }
        if let (recording, placement) = placement, let id = recording.adopt(operation, placement) {
            state.withLock { state in
                if state.counters[scope] != nil { state.scopeRecords[scope] = id }
            }
        }
        queue.launch(operation)
    }

    /// Cancels every operation in flight and every item mapping running; expansions not yet made, and
    /// items not yet launched, are skipped.
    func cancel() {
        let (live, expansions, parked) = state.withLock { state -> ([Operation], [Task<Void, Never>], [Cursor]) in
            state.isCancelled = true
            // Nothing is launched or parked after this: the windows are done with.
            let parked = state.windows.values.flatMap { $0.parked[$0.head...].compactMap { $0 } }
            state.windows = [:]
            return (Array(state.live.values), Array(state.expansions.values), parked)
        }
        for expansion in expansions { expansion.cancel() }
        for operation in live { operation.cancelHeld() }
        for cursor in parked { cursor.end() }
    }
}
