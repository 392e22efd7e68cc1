import Dispatch

#if os(Linux) && canImport(Glibc)
import Glibc
#elseif os(Linux) && canImport(Musl)
import Musl
#endif

/// The clock behind `DispatchTime.now()`, read for a recorder's timestamps.
///
/// On Linux, libdispatch reads `CLOCK_MONOTONIC` for `DispatchTime.now()`; reading it here directly
/// gives the same nanoseconds without `dispatch_time` and `DispatchTime`'s conversions, about 50
/// instructions a read, and a recorded operation reads it three times (callgrind, 2026-11-29).
/// Elsewhere it is `DispatchTime.now().uptimeNanoseconds` itself. `UptimeTests` pins that a read
/// falls between two reads of `DispatchTime.now()`.
enum Uptime {
    /// Nanoseconds on the clock of `DispatchTime.now().uptimeNanoseconds`.
    @inline(__always)
    static func nanoseconds() -> UInt64 {
        #if os(Linux)
        var now = timespec()
        guard clock_gettime(CLOCK_MONOTONIC, &now) == 0 else { return DispatchTime.now().uptimeNanoseconds }
        return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
        #else
        return DispatchTime.now().uptimeNanoseconds
        #endif
    }
}
