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

    /// The work a thread has scheduled while it drains.
    private final class LocalQueue {
        var isDraining = false
        private var pending: [() -> Void] = []
        private var head = 0

        func append(_ work: @escaping () -> Void) {
            pending.append(work)
        }

        func drain() {
            while head < pending.count {
                let work = pending[head]
                pending[head] = {}
                head += 1
                work()
                if head >= 1_024 && head * 2 >= pending.count {
                    pending.removeFirst(head)
                    head = 0
                }
            }
            pending.removeAll(keepingCapacity: pending.count < 4_096)
            head = 0
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
