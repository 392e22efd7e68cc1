#if canImport(Darwin)
import Darwin
#elseif os(Linux)
import CBatonAtomics
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The package's one lock: a value of `State` that is only reachable inside `withLock`. `package`, so
/// the package's executables (the demo) use it too rather than a second lock type.
///
/// The standard library's `Synchronization.Mutex` needs macOS 15 / iOS 18, so Baton ships this small
/// one. The lock and the state share a single heap allocation (a `ManagedBuffer`): the header is the
/// state, the one element is the platform lock: `os_unfair_lock` on Apple platforms; on Linux one
/// 32-bit word taken with an inline compare-and-swap, which spins a moment and then sleeps on a futex
/// when contended (CBatonAtomics); a `pthread_mutex_t` elsewhere. On Linux a `pthread_mutex_t` took
/// 40 bytes of every operation and about 60 instructions per use, out of line, and an operation takes
/// its lock about twenty times.
///
/// `State` must not be empty (`Void`): the state is the buffer's header, and an empty header shares its
/// address with the platform lock, which ThreadSanitizer then reports as a race on every contended use.
///
/// Rules that keep it deadlock-free: never call out of Baton (callbacks, KVO notifications, other
/// operations' methods) inside `withLock`; decide under the lock, act after it.
package struct Mutex<State>: @unchecked Sendable {
    private let storage: Storage

    /// Creates the lock with its state, which is built in place: a state passed by value was copied
    /// into the buffer and the original destroyed, field by field (an operation's state holds weak
    /// references, whose copies go through the runtime: about 550 instructions per operation).
    package init(_ initialState: @autoclosure () -> State) {
        storage = Storage.make(initialState)
    }

    /// Runs `body` with exclusive access to the state.
    @inline(__always)
    package func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        try storage.withUnsafeMutablePointers { state, lock in
            Self.lock(lock)
            defer { Self.unlock(lock) }
            return try body(&state.pointee)
        }
    }

    #if os(Linux)
    /// Whether a thread may be sleeping on the lock (its word says 2): tests wait for it before they
    /// release, so that the release must wake the sleeper.
    package var mayHaveSleepers: Bool {
        storage.withUnsafeMutablePointerToElements { baton_lock_word($0) == 2 }
    }
    #endif

    #if canImport(Darwin)
    typealias PlatformLock = os_unfair_lock

    @inline(__always) private static func initialize(_ lock: UnsafeMutablePointer<PlatformLock>) {
        lock.initialize(to: os_unfair_lock())
    }

    @inline(__always) private static func destroy(_ lock: UnsafeMutablePointer<PlatformLock>) {}

    @inline(__always) private static func lock(_ lock: UnsafeMutablePointer<PlatformLock>) {
        os_unfair_lock_lock(lock)
    }

    @inline(__always) private static func unlock(_ lock: UnsafeMutablePointer<PlatformLock>) {
        os_unfair_lock_unlock(lock)
    }
    #elseif os(Linux)
    typealias PlatformLock = UInt32

    @inline(__always) private static func initialize(_ lock: UnsafeMutablePointer<PlatformLock>) {
        lock.initialize(to: 0)
    }

    @inline(__always) private static func destroy(_ lock: UnsafeMutablePointer<PlatformLock>) {}

    @inline(__always) private static func lock(_ lock: UnsafeMutablePointer<PlatformLock>) {
        baton_lock(lock)
    }

    @inline(__always) private static func unlock(_ lock: UnsafeMutablePointer<PlatformLock>) {
        baton_unlock(lock)
    }
    #else
    typealias PlatformLock = pthread_mutex_t

    /// An adaptive mutex: a thread that finds it taken spins for a moment before it sleeps. Baton's
    /// critical sections are a few dozen instructions, so the holder is nearly always gone before a
    /// sleep (a futex wait and a wake-up) would have begun.
    @inline(__always) private static func initialize(_ lock: UnsafeMutablePointer<PlatformLock>) {
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        #if canImport(Glibc)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        #endif
        let result = pthread_mutex_init(lock, &attributes)
        pthread_mutexattr_destroy(&attributes)
        precondition(result == 0, "pthread_mutex_init failed: \(result)")
    }

    @inline(__always) private static func destroy(_ lock: UnsafeMutablePointer<PlatformLock>) {
        pthread_mutex_destroy(lock)
    }

    @inline(__always) private static func lock(_ lock: UnsafeMutablePointer<PlatformLock>) {
        pthread_mutex_lock(lock)
    }

    @inline(__always) private static func unlock(_ lock: UnsafeMutablePointer<PlatformLock>) {
        pthread_mutex_unlock(lock)
    }
    #endif

    private final class Storage: ManagedBuffer<State, PlatformLock> {
        static func make(_ initialState: () -> State) -> Storage {
            let buffer = Storage.create(minimumCapacity: 1) { _ in initialState() }
            let storage = unsafeDowncast(buffer, to: Storage.self)
            storage.withUnsafeMutablePointerToElements { Mutex.initialize($0) }
            return storage
        }

        deinit {
            withUnsafeMutablePointerToElements { Mutex.destroy($0) }
        }
    }
}

/// Carries a value across a concurrency boundary that the compiler cannot see is safe.
///
/// Used only where Baton hands a value it produced under its lock to exactly one receiver
/// (an awaiting task), never for shared mutable state.
struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
}
