import CBatonAtomics
import Dispatch
import Foundation

/// Where an operation stands in an `OperationQueue`, as Foundation itself records it.
///
/// No public API says whether an operation is in a queue. Linux's Foundation (swift-corelibs-foundation)
/// keeps it in stored properties of `Operation`: `__queue`, the queue it was added to, and
/// `__state`, its place in that queue's life (initialized, enqueuing, enqueued, dispatching, starting,
/// executing, finishing, finished). The queue sets `starting` on the thread that calls `start()`, just
/// before the call, so a `start()` that finds anything else came from someone else. Two more say what
/// an operation depends on: `__dependencies`, every edge, the hidden ones on pending barriers included,
/// and `__lock`, the lock that guards it.
///
/// The properties are found once, by name and type, with the standard library's reflection; their
/// layout is then checked on probe operations (one in a suspended queue, initialized then enqueued;
/// one given a dependency). Reading the queue and the state afterwards is two loads. Where they cannot be found or the check fails (Apple
/// platforms, whose Foundation keeps this in Objective-C; a future Foundation that renames them),
/// `of(_:)` answers `nil`: unknown, and Baton behaves as if it could not see the queue.
enum FoundationQueueState: Equatable {
    /// In no queue.
    case none
    /// In a queue, waiting (enqueuing, enqueued or being dispatched): only the queue may start it.
    case waiting
    /// The queue is starting it, on this thread.
    case starting
    /// Executing or finished, as Foundation sees it.
    case past

    /// Whether Foundation has finished adding `operation` to a queue that has not started it yet
    /// (enqueued or being dispatched); `false` while it is being added; `nil` where Baton cannot read it.
    static func isEnqueued(_ operation: Operation) -> Bool? {
        // Enqueued (2) or dispatching (3): past `enqueuing` (1), not yet `starting`.
        stateIndex(of: operation).map { $0 == 2 || $0 == 3 }
    }

    /// Whether a queue has decided to start `operation` (dispatching it, or past that): it will call
    /// `start()` whatever `isReady` says from now on; `nil` where Baton cannot read it.
    static func isDispatched(_ operation: Operation) -> Bool? {
        // Dispatching (3) or past it: the queue took a worker for it under its lock.
        stateIndex(of: operation).map { $0 >= 3 }
    }

    /// Whether Foundation is done with `operation` as a dependency: its finish has walked its
    /// dependents (`__state` is `finished`, set under the operation's lock after the walk). `isFinished`
    /// reads `true` earlier, from the moment the outcome is decided (Foundation's `finishing`, a Baton
    /// operation's announcement): an edge to a dependency in between is still followed. Where Baton
    /// cannot read the record, `isFinished`.
    static func hasWalkedDependents(_ operation: Operation) -> Bool {
        // Finished is the last case (7).
        stateIndex(of: operation).map { $0 == 7 } ?? operation.isFinished
    }

    /// Where `operation`'s `__state` stands among the cases of Foundation's `__NSOperationState`
    /// (its index in declaration order), or `nil` when Baton cannot read it on this platform.
    private static func stateIndex(of operation: Operation) -> UInt8? {
        #if canImport(Darwin)
        return nil
        #else
        return Layout.shared?.stateIndex(of: operation)
        #endif
    }

    /// The queue Foundation holds `operation` in, or `nil` (in none, finished, or unknown on this
    /// platform). Read only for an operation that queue has started and that has not finished: the
    /// queue keeps `__queue`, retained, until the operation finishes.
    static func queue(of operation: Operation) -> OperationQueue? {
        #if canImport(Darwin)
        return nil
        #else
        return Layout.shared?.queue(of: operation)
        #endif
    }

    /// Every operation Foundation records `operation` as depending on, the pending barriers its queue
    /// made it wait for included (`dependencies` leaves those out), read under Foundation's own lock
    /// of `operation`, the one that guards the list; `nil` where Baton cannot read it (Apple
    /// platforms). Never called under the operation's Baton lock: Foundation takes its locks in
    /// `addDependency` before it reads `isReady`, which takes Baton's.
    static func edges(of operation: Operation) -> [Operation]? {
        #if canImport(Darwin)
        return nil
        #else
        return Layout.shared?.edges(of: operation)
        #endif
    }

    /// The state of `operation`, or `nil` when Baton cannot read it on this platform.
    static func of(_ operation: Operation) -> FoundationQueueState? {
        #if canImport(Darwin)
        return nil
        #else
        guard let layout = Layout.shared else { return nil }
        return layout.state(of: operation)
        #endif
    }

    #if !canImport(Darwin)
    /// Where an `OperationQueue` keeps its dispatch queue (`__dispatch_queue`, set by
    /// `underlyingQueue`) and whether it is the main queue (`__mainQ`), found and checked once, as
    /// ``Layout`` is.
    struct QueueLayout: Sendable, Equatable {
        let dispatchOffset: Int
        let mainOffset: Int

        /// The layout, or `nil` where it cannot be found, published in `baton_foundation_queue_layout`
        /// (not a `static let`, for the reason ``Layout/shared`` gives).
        static var shared: QueueLayout? {
            QueueLayout(
                word: Layout.published(baton_foundation_queue_layout, baton_publish_foundation_queue_layout) {
                    find()?.word
                })
        }

        init(dispatchOffset: Int, mainOffset: Int) {
            self.dispatchOffset = dispatchOffset
            self.mainOffset = mainOffset
        }

        // The published word: the two offsets, 15 bits each, and bit 62 set when they were found.
        private static let offsetBits = 15
        private static let found: UInt64 = 1 << 62

        init?(word: UInt64) {
            guard word & Self.found != 0 else { return nil }
            let mask = UInt64(1) << Self.offsetBits - 1
            self.init(
                dispatchOffset: Int(truncatingIfNeeded: word & mask),
                mainOffset: Int(truncatingIfNeeded: word >> Self.offsetBits & mask))
        }

        var word: UInt64? {
            let limit = 1 << Self.offsetBits
            guard (0..<limit).contains(dispatchOffset), (0..<limit).contains(mainOffset) else { return nil }
            return Self.found | UInt64(dispatchOffset) | UInt64(mainOffset) << Self.offsetBits
        }

        func dispatchQueue(of queue: OperationQueue) -> DispatchQueue? {
            if ForeignFields.load(Bool.self, at: mainOffset, of: queue) { return DispatchQueue.main }
            return ForeignFields.load(Unmanaged<DispatchQueue>?.self, at: dispatchOffset, of: queue)?
                .takeUnretainedValue()
        }

        private static func find() -> QueueLayout? {
            let fields = ForeignFields.declared(by: OperationQueue.self)
            guard let dispatch = fields["__dispatch_queue"], dispatch.type == Optional<DispatchQueue>.self,
                let main = fields["__mainQ"], main.type == Bool.self
            else { return nil }
            let layout = QueueLayout(dispatchOffset: dispatch.offset, mainOffset: main.offset)
            return layout.holds() && layout.word != nil ? layout : nil
        }

        /// Whether probes read as the getter says: a queue without a dispatch queue of its own, one
        /// with, and the main queue.
        private func holds() -> Bool {
            let plain = OperationQueue()
            let own = OperationQueue()
            let lane = DispatchQueue(label: "baton.layout-probe")
            own.underlyingQueue = lane
            return withExtendedLifetime(lane) {
                dispatchQueue(of: plain) == nil && dispatchQueue(of: own) === lane
                    && dispatchQueue(of: OperationQueue.main) != nil
            }
        }
    }

    /// Where the properties are in an `Operation`, found and checked once.
    struct Layout: Sendable, Equatable {
        let queueOffset: Int
        let stateOffset: Int
        /// `__dependencies` (`[Operation]`) and `__lock` (the `NSLock` that guards it).
        let dependenciesOffset: Int
        let lockOffset: Int

        /// The layout, or `nil` where it cannot be found: looked for on the first read, published in
        /// an atomic word (`baton_foundation_layout`), read from it afterwards. Not a `static let`:
        /// under ThreadSanitizer, Swift's runtime takes a lock on every read of a lazily initialised
        /// global (so that the sanitizer sees the initialisation), and this is read on every
        /// `isReady`. With a thousand operations waiting in one queue, each change made Foundation
        /// read it a thousand times from every worker, and the workers queued on that one lock for
        /// most of their time (a test of 1,000 gated operations took 20 s instead of 2).
        static var shared: Layout? {
            Layout(word: published(baton_foundation_layout, baton_publish_foundation_layout) { find()?.word })
        }

        /// The word `read` returns, once `publish` has stored it: on the first read (0, nobody has
        /// looked yet) it is looked for with `find` (``absent`` when not found) and published. Two first
        /// reads at once both look: the probes are cheap and the word the same.
        static func published(
            _ read: () -> UInt64, _ publish: (UInt64) -> Void, find: () -> UInt64?
        ) -> UInt64 {
            var word = read()
            if word == 0 {
                word = find() ?? absent
                publish(word)
            }
            return word
        }

        init(queueOffset: Int, stateOffset: Int, dependenciesOffset: Int, lockOffset: Int) {
            self.queueOffset = queueOffset
            self.stateOffset = stateOffset
            self.dependenciesOffset = dependenciesOffset
            self.lockOffset = lockOffset
        }

        // The published word: the four offsets, 15 bits each, and bit 62 set when they were found;
        // `absent` when they were not; 0 while nobody has looked.
        private static let offsetBits = 15
        private static let found: UInt64 = 1 << 62
        static let absent: UInt64 = 1

        /// The layout a published word holds, or `nil` for ``absent``.
        init?(word: UInt64) {
            guard word & Self.found != 0 else { return nil }
            let mask = UInt64(1) << Self.offsetBits - 1
            func offset(_ index: Int) -> Int { Int(truncatingIfNeeded: word >> (index * Self.offsetBits) & mask) }
            self.init(queueOffset: offset(0), stateOffset: offset(1), dependenciesOffset: offset(2), lockOffset: offset(3))
        }

        /// The word that publishes this layout, or `nil` when an offset does not fit its 15 bits.
        var word: UInt64? {
            let offsets = [queueOffset, stateOffset, dependenciesOffset, lockOffset]
            guard offsets.allSatisfy({ (0..<1 << Self.offsetBits).contains($0) }) else { return nil }
            return offsets.enumerated().reduce(Self.found) { word, field in
                word | UInt64(field.element) << (field.offset * Self.offsetBits)
            }
        }

        // The cases of Foundation's `__NSOperationState`, in declaration order: Swift stores a case
        // by its index.
        private static let initialized: UInt8 = 0
        private static let starting: UInt8 = 4

        func state(of operation: Operation) -> FoundationQueueState {
            withExtendedLifetime(operation) {
                let base = UnsafeRawPointer(Unmanaged.passUnretained(operation).toOpaque())
                let queue = base.load(fromByteOffset: queueOffset, as: UnsafeRawPointer?.self)
                switch stateIndex(of: operation) {
                case Self.initialized: return queue == nil ? .none : .waiting
                case 1...3: return .waiting
                case Self.starting: return .starting
                default: return .past
                }
            }
        }

        func queue(of operation: Operation) -> OperationQueue? {
            withExtendedLifetime(operation) {
                UnsafeRawPointer(Unmanaged.passUnretained(operation).toOpaque())
                    .load(fromByteOffset: queueOffset, as: Unmanaged<OperationQueue>?.self)?.takeUnretainedValue()
            }
        }

        func edges(of operation: Operation) -> [Operation] {
            ForeignFields.load([Operation].self, at: dependenciesOffset, of: operation, lockedBy: lockOffset)
        }

        /// The index of `operation`'s `__state` case: one load.
        func stateIndex(of operation: Operation) -> UInt8 {
            withExtendedLifetime(operation) {
                UnsafeRawPointer(Unmanaged.passUnretained(operation).toOpaque())
                    .load(fromByteOffset: stateOffset, as: UInt8.self)
            }
        }

        private static func find() -> Layout? {
            let fields = ForeignFields.declared(by: Operation.self)
            guard let queue = fields["__queue"], queue.type == Optional<Unmanaged<OperationQueue>>.self,
                let state = fields["__state"], Self.size(of: state.type) == 1,
                let dependencies = fields["__dependencies"], dependencies.type == [Operation].self,
                let lock = fields["__lock"], lock.type == NSLock.self
            else { return nil }
            let layout = Layout(
                queueOffset: queue.offset, stateOffset: state.offset, dependenciesOffset: dependencies.offset,
                lockOffset: lock.offset)
            return layout.holds() && layout.word != nil ? layout : nil
        }

        private static func size(of type: Any.Type) -> Int {
            func size<T>(_: T.Type) -> Int { MemoryLayout<T>.size }
            return _openExistential(type, do: size)
        }

        /// Whether probes read as expected: in no queue; waiting in a suspended queue; finished once
        /// started by hand. Nothing here waits: the layout is found lazily inside `start()`, on a
        /// dispatch worker, while other workers may be blocked on the same one-time initialisation,
        /// so waiting for a queue to run the probe could wait for ever.
        private func holds() -> Bool {
            let fresh = BlockOperation {}
            guard state(of: fresh) == .none, edges(of: fresh).isEmpty else { return false }
            // A probe never started: Foundation's `removeDependency` leaves an unfinished dependency
            // counted, so its `start()` would stop the process as not ready.
            let dependent = BlockOperation {}
            let dependency = BlockOperation {}
            dependent.addDependency(dependency)
            guard edges(of: dependent).count == 1, edges(of: dependent).first === dependency else { return false }
            fresh.start()
            guard state(of: fresh) == .past else { return false }
            let probe = BlockOperation {}
            let queue = OperationQueue()
            queue.isSuspended = true
            queue.addOperation(probe)
            let waiting = state(of: probe) == .waiting
            // It runs whenever a worker is free; nobody waits for it.
            queue.isSuspended = false
            return waiting
        }
    }
    #endif
}

extension OperationQueue {
    /// The dispatch queue the queue runs its operations on when it has one of its own: its
    /// `underlyingQueue` (the main queue's is `DispatchQueue.main`). On Linux it is read from
    /// Foundation's record of the queue, one load, where Baton can read that record: the getter takes
    /// the queue's own lock, which the queue holds while it walks every operation it holds, and a
    /// claim that read it as the queue asked `isReady` waited for those walks (10,000 uncontended
    /// claims in a plain queue took 13.2 µs each instead of 10.8, medians of 9 runs). Foundation refuses to change it
    /// while the queue holds operations, so Baton reads it only about a queue that holds one.
    var ownDispatchQueue: DispatchQueue? {
        #if canImport(Darwin)
        return underlyingQueue
        #else
        guard let layout = FoundationQueueState.QueueLayout.shared else { return underlyingQueue }
        return layout.dispatchQueue(of: self)
        #endif
    }

    /// Whether the queue runs any number of operations at once (the main queue runs one). Linux's
    /// queue counts a limit of `Int32.max` or more as none (it keeps the limit as an `Int32`, and the
    /// default, -1, as `Int32.max`).
    var hasNoWidthLimit: Bool {
        let limit = maxConcurrentOperationCount
        return limit == OperationQueue.defaultMaxConcurrentOperationCount || limit >= Int(Int32.max)
    }
}
