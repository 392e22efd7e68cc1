#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Runs work that would otherwise recurse through nested composites as a loop on the calling thread.
///
/// A finish that completes its parent, which completes its own parent, and so on, would use one stack
/// frame per level: 100,000 nested groups overflow any thread's stack. Every such step goes through
/// ``run(_:)`` instead. The outermost call on a thread runs its work and then drains what that work
/// scheduled, in order; a call made while the thread is already draining only appends. The stack
/// depth is therefore constant whatever the nesting depth, and nothing crosses threads: the work still
/// runs on the thread that caused it.
///
/// The same loop releases what composites held (``dispose(_:)``): the release of a child that is itself
/// a composite releases its own children inside the loop, not inside the parent's `deinit`.
///
/// Each thread has its own queue of work (a thread-local value), so there is no lock here.
enum Trampoline {
    /// Runs `work` now, or, if this thread is already inside `run`, after the work before it.
    static func run(_ work: @escaping () -> Void) {
        let local = LocalQueue.current
        if local.isDraining {
            local.append(work)
            return
        }
        local.isDraining = true
        work()
        local.drain()
        local.isDraining = false
    }

    /// Releases `value` inside the loop, so that releasing a nest of composites does not recurse.
    static func dispose<Value>(_ value: consuming Value) {
        let box = Box(value)
        run { box.clear() }
    }

    private final class Box<Value> {
        var value: Value?
        init(_ value: consuming Value) { self.value = value }
        func clear() { value = nil }
    }

    /// The work a thread has scheduled while it drains, run depth-first: what an item schedules runs,
    /// in the order it was scheduled, before the items that were pending when it started. So a
    /// composite that schedules its children's retirement and then its own finish finishes after
    /// every one of them (and their own children), as it would with plain recursion.
    private final class LocalQueue {
        var isDraining = false
        /// Pending work; the last element runs next.
        private var stack: [() -> Void] = []
        /// Work scheduled by the item that is running now, in order.
        private var scheduled: [() -> Void] = []

        func append(_ work: @escaping () -> Void) {
            scheduled.append(work)
        }

        /// Runs until nothing is pending. Elements are moved out of the arrays before they run or are
        /// released, so work that schedules more work (or a `deinit` that does) never touches an array
        /// while it is being mutated.
        func drain() {
            while true {
                while let work = scheduled.popLast() { stack.append(work) }
                guard let work = stack.popLast() else { return }
                work()
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
