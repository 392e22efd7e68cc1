import Dispatch

extension Duration {
    /// The duration in seconds, as a `Double` (exact enough for timers: attoseconds are rounded).
    var seconds: Double {
        // Not `components`, which traps for a duration beyond `Int64.max` seconds (a sum of two huge
        // timeouts); the division is exact enough and never traps.
        self / .seconds(1)
    }

    /// The duration in whole nanoseconds, at least 1 and at most about a century (as a deadline's
    /// distance; beyond it, never comes anyway). From ``seconds``, so it never traps.
    var clampedNanoseconds: UInt64 {
        UInt64(min(max((seconds * 1e9).rounded(), 1), 3e18))
    }

    /// The moment this long from now; beyond about a century, never.
    var deadlineFromNow: DispatchTime {
        let seconds = self.seconds
        guard seconds < 3e9 else { return .distantFuture }
        return .now() + max(0, seconds)
    }
}
