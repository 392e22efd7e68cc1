import Dispatch

/// One-shot timers that can be cancelled, for the timeouts that usually end early (a condition's, an
/// operation's, a flag wait's, a slow-wait watch).
///
/// Why not `DispatchQueue.asyncAfter`: its block, and everything the block captures, stays in
/// libdispatch's timer list until the deadline, whether or not it is still wanted. A condition's
/// timeout is 60 seconds by default, so every gated operation left one pending block for a minute
/// after it had finished: a steady stream of them keeps tens of thousands alive.
///
/// Every timer is an entry of one binary heap ordered by deadline, behind one lock, and one dispatch
/// timer source is armed for the earliest. Scheduling and cancelling cost O(log n); a cancelled timer
/// leaves the heap and lets go of its handler at once. The source is re-armed only when a new timer
/// comes first, and when it fires; a cancelled earliest timer leaves it armed (it fires, finds nothing
/// due, and re-arms for the next). Due handlers run on the global queue, one `async` each, as
/// `asyncAfter`'s did: a handler may start an operation and run its `execute()`.
enum Deadlines {
    /// A scheduled timer: ``cancel()`` it when the wait it guards ends first.
    final class Timer: HeapEntry, @unchecked Sendable {
        /// When it is due, in `DispatchTime` nanoseconds.
        let deadline: UInt64
        // Read and written only under the heap's lock.
        /// Its position in the heap; -1 once it has left (fired or cancelled).
        fileprivate var index: Int
        /// What runs when it is due; `nil` once it has left.
        fileprivate var handler: (@Sendable () -> Void)?

        init(deadline: UInt64, handler: @escaping @Sendable () -> Void) {
            self.deadline = deadline
            self.index = -1
            self.handler = handler
        }

        var heapKey: UInt64 { deadline }
        func moved(to index: Int) { self.index = index }

        /// Takes the timer out of the heap, and drops its handler, unless it is due already. `true`:
        /// its handler will never run; `false`: it ran, or is on its way (or the timer was cancelled).
        @discardableResult
        func cancel() -> Bool {
            Deadlines.state.withLock { $0.remove(self) }
        }
    }

    /// The heap, and the source with the deadline it is armed for.
    struct State {
        private(set) var heap = MinHeap<Timer>()
        /// What the source is armed for (`UInt64.max`: nothing).
        var armed = UInt64.max
        /// The one source, on a serial queue of its own, made with the first timer. Armed only here,
        /// under the lock (setting a dispatch timer calls nothing back), so two re-arms can never land
        /// in the wrong order.
        private var source: DispatchSourceTimer?

        /// Arms the source for `deadline` (`UInt64.max`: never).
        mutating func arm(for deadline: UInt64) {
            armed = deadline
            let source = self.source ?? Self.makeSource()
            self.source = source
            source.schedule(deadline: deadline == .max ? .distantFuture : DispatchTime(uptimeNanoseconds: deadline))
        }

        private static func makeSource() -> DispatchSourceTimer {
            let source = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "Baton deadlines"))
            source.setEventHandler { Deadlines.fire() }
            source.activate()
            return source
        }

        /// How many timers are scheduled (a test seam).
        var count: Int { heap.count }

        mutating func insert(_ timer: Timer) {
            heap.insert(timer)
        }

        /// Takes `timer` out; `false` when it had left already.
        @discardableResult
        mutating func remove(_ timer: Timer) -> Bool {
            let index = timer.index
            guard index >= 0 else { return false }
            heap.remove(at: index)
            timer.index = -1
            timer.handler = nil
            return true
        }

        /// Takes out every timer due at `now`, with its handler.
        mutating func popDue(_ now: UInt64) -> [@Sendable () -> Void] {
            var due: [@Sendable () -> Void] = []
            while let first = heap.first, first.deadline <= now {
                if let handler = first.handler { due.append(handler) }
                remove(first)
            }
            return due
        }
    }

    static let state = Mutex(State())

    /// Schedules `handler` to run on the global queue after `duration` (never, beyond about a century),
    /// unless the returned timer is cancelled first.
    @discardableResult
    static func after(_ duration: Duration, _ handler: @escaping @Sendable () -> Void) -> Timer {
        at(duration.deadlineFromNow.uptimeNanoseconds, handler)
    }

    /// Schedules `handler` to run on the global queue at `deadline` (`DispatchTime` nanoseconds),
    /// unless the returned timer is cancelled first.
    @discardableResult
    static func at(_ deadline: UInt64, _ handler: @escaping @Sendable () -> Void) -> Timer {
        let timer = Timer(deadline: deadline, handler: handler)
        state.withLock { state in
            state.insert(timer)
            if deadline < state.armed { state.arm(for: deadline) }
        }
        return timer
    }

    /// The source fired: runs what is due, and arms the source for the next.
    fileprivate static func fire() {
        let due = state.withLock { state in
            let due = state.popDue(DispatchTime.now().uptimeNanoseconds)
            state.arm(for: state.heap.first?.deadline ?? .max)
            return due
        }
        for handler in due { DispatchQueue.global().async(execute: handler) }
    }
}
